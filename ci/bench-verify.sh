#!/usr/bin/env bash
# ci/bench-verify.sh [MiB] [chunk KiB] [rounds] — host micro-benchmark of the file verification
# (no RDMA): the real per-chunk hashing on the real thread pool, for xxh3 and blake3 at 1, 2 and
# all threads (examples/verify_bench.rs). Prints a table; asserts nothing (timings depend on load).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --example verify_bench >&2
exec target/release/examples/verify_bench "$@"
