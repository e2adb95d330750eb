#!/usr/bin/env bash
# ci/bench-pingpong.sh [ROUNDS] — build rdmaxfer (release), boot one guest and run
# ci/guest-bench-pingpong.sh there (12 rounds by default): rdmaxfer pingpong next to ib_send_lat and ibv_rc_pingpong,
# with the ratios the issue asks for. Outputs in target/bench/pingpong/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
ci_guest_bench target/bench/pingpong ci/guest-bench-pingpong.sh "${1:-12}"
