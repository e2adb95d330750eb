#!/usr/bin/env bash
# ci/bench-instr.sh [REPS] — build rdmaxfer (release), boot one guest and run ci/guest-bench-instr.sh
# there: user-space instructions per ping-pong round trip, rdmaxfer next to ibv_rc_pingpong
# (callgrind). Outputs in target/bench/instr/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
cargo build --release --bin rdmaxfer
out="target/bench/instr"
rm -rf "$out"
mkdir -p "$out"
ci/guest.sh -- bash ci/guest-bench-instr.sh "$out" "${1:-2}"
