#!/usr/bin/env bash
# ci/cp-bench.sh [ROUNDS] [MIB] — build rdmaxfer (release), boot one guest and run
# ci/guest-cp-bench.sh there: `rdmaxfer cp` of one file (default 128 MiB) through ssh next to
# `recv` and `send` started by hand, interleaved rounds, medians and the ratio (issue 38: <= 1.1).
# Outputs in target/bench/cp/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
export CI_GUEST_TIMEOUT="${CI_GUEST_TIMEOUT:-3600}"
ci_guest_bench target/bench/cp ci/guest-cp-bench.sh "${1:-5}" "${2:-128}"
