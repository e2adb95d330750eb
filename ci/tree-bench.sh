#!/usr/bin/env bash
# ci/tree-bench.sh [ROUNDS] [FILES] [SIZE] [DIRS] — build rdmaxfer (release), boot one guest and
# run ci/guest-tree-bench.sh there: a tree of many small files (default 10000 × 4 KiB in 100
# directories) by rdmaxfer and by rsync to an rsync daemon over TCP on the same interface, fresh
# and re-run, next to one file of the same total size; medians, spreads and issue 37's ratios.
# Env as for ci/guest-tree-bench.sh: ROWS, FLAGS, BIN_B. Outputs in target/bench/tree/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
command -v rsync >/dev/null || ci_die "rsync missing: run ci/setup.sh (it installs Debian's rsync)"
# 3 rounds of 10000 files take ~10 min on a quiet host.
export CI_GUEST_TIMEOUT="${CI_GUEST_TIMEOUT:-3600}"
export CI_GUEST_ENV="${CI_GUEST_ENV:-} ROWS FLAGS BIN_B"
ci_guest_bench target/bench/tree ci/guest-tree-bench.sh "${1:-3}" "${2:-10000}" "${3:-4096}" "${4:-100}"
