#!/usr/bin/env bash
# ci/guest-valgrind.sh BIN... — runs INSIDE the guest: each Rust device test binary (--ignored
# --test-threads=1) under valgrind memcheck (--error-exitcode=1); any memcheck error or
# definitely-lost block fails it. rdma-core's caches are at most "possibly lost"/"still
# reachable", which are not errors here (tests/valgrind.supp covers the "possibly lost" ones for
# the C examples, whose README command counts them; each entry has its reason).
# Prints a cargo-style "test result:" line per binary for the memcheck verdict alone (the
# binary's own line counts its tests), then "[guest-valgrind] exit status N".
# ci/guest-valgrind.sh --report LOG — on the host: shows LOG (written by the phase above, which
# ci/guest-tests.sh runs when CI_VALGRIND_BINS is set) and exits with the status it recorded;
# a missing LOG or one without that last line (guest died, timed out) is a failure.
set -uo pipefail
if [[ "${1:-}" == --report ]]; then
  log="${2:?usage: ci/guest-valgrind.sh --report LOG}"
  [[ -f "$log" ]] || { echo "[guest-valgrind] FAILED without a test summary: no $log (the memcheck phase did not run: no device_verbs/device_rw binary, or the device-tests guest failed to boot, died or timed out)"; exit 1; }
  cat "$log"
  st="$(sed -n 's/^\[guest-valgrind\] exit status \([0-9]*\)$/\1/p' "$log" | tail -1)"
  [[ -n "$st" ]] || { echo "[guest-valgrind] FAILED without a test summary: $log has no exit status (the phase was cut short)"; exit 1; }
  exit "$st"
fi
(($#)) || { echo "[guest-valgrind] no test binaries given" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/ci/guest-lib.sh"
# Per-test wall times under memcheck, as ci/guest-tests.sh keeps them (names "memcheck_BIN::TEST").
times="${CI_DEVICE_TIMES:-target/ci/logs/device-times.txt}"
mkdir -p "$(dirname "$times")"
limit="${CI_VALGRIND_TIMEOUT:-1800}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
# CI_VALGRIND_FILTERS: libtest name filters for every binary (space-separated; default none).
read -r -a filters <<<"${CI_VALGRIND_FILTERS:-}"
rc=0
command -v valgrind >/dev/null || { echo "[guest-valgrind] valgrind missing (ci/setup.sh installs it)"; rc=2; }
for bin in "$@"; do
  ((rc == 2)) && break
  name="$(basename "$bin")"
  vlog="/tmp/guest-valgrind.$name.log" # guest-only /tmp
  echo "[guest-valgrind] === valgrind $name --ignored --test-threads=1 ${filters[*]} (limit ${limit}s)"
  t0=$SECONDS
  timeout -k 10 "$limit" valgrind --tool=memcheck --error-exitcode=1 \
    --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
    --suppressions="$root/tests/valgrind.supp" --log-file="$vlog" \
    "$bin" --ignored --test-threads=1 "${filters[@]}" 2>&1 | stamp_lines "/tmp/guest-tests.memcheck_$name.log" "$times"
  r="${PIPESTATUS[0]}"
  cat "$vlog"
  errors="$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$vlog" | tail -1)"
  echo "[guest-valgrind] $name: exit $r, memcheck errors ${errors:-unknown}, $((SECONDS - t0))s"
  # The binary's own failures are counted by its own "test result:" line; this one is memcheck's:
  # clean when valgrind printed "0 errors" and did not exit with its error code.
  if ((r != 1)) && [[ "$errors" == 0 ]]; then
    echo "test result: ok. 1 passed; 0 failed; memcheck clean ($name)"
  else
    echo "test result: FAILED. 0 passed; 1 failed; memcheck ($name): exit $r, errors ${errors:-unknown}$( ((r == 124)) && echo ', timed out')"
  fi
  if ((r != 0)); then rc=1; fi
done
echo "[guest-valgrind] exit status $rc"
exit "$rc"
