#!/usr/bin/env bash
# ci/rig.sh [TEST...] — the two-host rig (docs/rig.md): builds the release binary, then runs the
# rig's harness, tests/rig (Rust: boots guests A and B with ci/rig-boot.sh, drives the agents of
# ci/rig-agent.sh, runs the two-host tests, the fault campaign and the two-host benchmark, and
# ends with "test result: … N passed; M failed"). TEST names select tests (default: all; `hold`
# keeps the guests up for manual commands). Outputs: target/rig/<run>/.
# Env: RIG_BUILD=0 (use the existing release binary), RIG_BIN (the binary to test, default
# target/release/rdmaxfer, under the tree, which the guests mount); the rest is read by the
# harness and by ci/rig-boot.sh (their headers list it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
ci_find_vng || ci_die "virtme-ng (vng) not found: run ci/setup.sh"
ci_find_kernel >/dev/null || ci_die "no guest kernel with rdma_rxe.ko: run ci/setup.sh"
if [[ "${RIG_BUILD:-1}" != 0 ]]; then
  ci_log "building the release binary"
  cargo build --release --features cli --bin rdmaxfer
fi
exec cargo test --test rig -- --ignored "$@"
