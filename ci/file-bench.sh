#!/usr/bin/env bash
# ci/file-bench.sh [ROUNDS] [MIB] — build rdmaxfer (release), boot one guest and run
# ci/guest-file-bench.sh there (3 interleaved rounds by default, 128 MiB): `rdmaxfer send` at the
# default and N = 1, 2, 4 streams, over one and two rails, each --verify, next to rcopy and
# ib_write_bw; medians, spreads and the issue's ratios, and peak RSS against file size.
# Env as for ci/guest-file-bench.sh: ROWS, NO_RSS, RSS_BIG_MIB, FLAGS, BIN_B (passed into the guest).
# Outputs in target/bench/file/ (file-summary.txt, file-runs.tsv, every run's output).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
# 3 rounds take ~10 min on a quiet host; a loaded one needs more.
export CI_GUEST_TIMEOUT="${CI_GUEST_TIMEOUT:-3600}"
export CI_GUEST_ENV="${CI_GUEST_ENV:-} ROWS NO_RSS RSS_BIG_MIB FLAGS BIN_B"
ci_guest_bench target/bench/file ci/guest-file-bench.sh "${1:-3}" "${2:-128}"
