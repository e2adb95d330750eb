#!/usr/bin/env bash
# ci/bench-instr.sh [REPS] — build rdmaxfer (release), boot one guest and run ci/guest-bench-instr.sh
# there: user-space instructions per ping-pong round trip, rdmaxfer next to ibv_rc_pingpong
# (callgrind). Outputs in target/bench/instr/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
ci_guest_bench target/bench/instr ci/guest-bench-instr.sh "${1:-2}"
