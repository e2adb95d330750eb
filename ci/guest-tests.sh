#!/usr/bin/env bash
# ci/guest-tests.sh BIN... — runs INSIDE the guest: each device test binary with --ignored --test-threads=1.
# With CI_VALGRIND_BINS="BIN..." (paths without spaces) and CI_VALGRIND_LOG=FILE it then runs, in
# the same boot, ci/guest-valgrind.sh BIN... with its output in FILE; that phase does not change
# this script's status (ci/test.sh's valgrind step reports it: ci/guest-valgrind.sh --report FILE).
# Any process that crashes meanwhile (a test binary, or an rdmaxfer or C example it spawned)
# leaves a core in CI_CORE_DIR (default target/ci/cores); after each test binary the backtraces
# of the new cores are printed here ("[cores] CRASH: ..."), and a crash fails the run.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
(($#)) || { echo "[guest-tests] no test binaries given" >&2; exit 2; }
limit="${CI_DEVICE_TEST_TIMEOUT:-600}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
cores="${CI_CORE_DIR:-target/ci/cores}"
cores_enable "$cores" || echo "[guest-tests] WARNING: crashes will leave no core" >&2
# Per-test wall times (a test's result line is stamped when it ends; with one test thread its
# time is the gap since the line before): every binary's in $times, the slowest at the end.
times="${CI_DEVICE_TIMES:-target/ci/logs/device-times.txt}"
mkdir -p "$(dirname "$times")"
: >"$times"
rc=0
for bin in "$@"; do
  name="$(basename "$bin")"
  log="/tmp/guest-tests.$name.log" # guest-only /tmp
  before="/tmp/guest-tests.$name.cores"
  cores_list "$cores" >"$before"
  echo "[guest-tests] === $name --ignored --test-threads=1 (limit ${limit}s)"
  timeout -k 10 "$limit" "$bin" --ignored --test-threads=1 2>&1 | stamp_lines "$log" "$times"
  r="${PIPESTATUS[0]}"
  if ! cores_report "$cores" "$before"; then
    echo "[guest-tests] $name: a process crashed (core and backtrace above)"
    rc=1
  fi
  if ((r != 0)); then
    rc=1
    if grep -qE '^test result: .* [1-9][0-9]* failed' "$log"; then
      echo "[guest-tests] $name FAILED (exit $r)"
    else
      # On its own line: a timed-out test leaves "test NAME ... " unterminated, and ci/test.sh
      # counts this line only at the start of one.
      echo
      echo "[guest-tests] $name FAILED without a test summary (exit $r$( ((r == 124)) && echo ', timed out'))"
    fi
  fi
done
echo "[guest-tests] slowest device tests (seconds; all in $times):"
sort -rn "$times" | head -n 15 | sed 's/^/[guest-tests]   /'
if [[ -n "${CI_VALGRIND_BINS:-}" ]]; then
  vlog="${CI_VALGRIND_LOG:?CI_VALGRIND_LOG must name the log of the memcheck phase}"
  echo "[guest-tests] === memcheck phase: ci/guest-valgrind.sh $CI_VALGRIND_BINS > $vlog"
  t0=$SECONDS
  # shellcheck disable=SC2086 # a space-separated list of paths
  bash "$(dirname "${BASH_SOURCE[0]}")/guest-valgrind.sh" $CI_VALGRIND_BINS >"$vlog" 2>&1
  echo "[guest-tests] memcheck phase: exit $? after $((SECONDS - t0))s (reported by its own step)"
fi
exit "$rc"
