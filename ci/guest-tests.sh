#!/usr/bin/env bash
# ci/guest-tests.sh BIN... — runs INSIDE the guest: each device test binary with --ignored --test-threads=1.
set -uo pipefail
(($#)) || { echo "[guest-tests] no test binaries given" >&2; exit 2; }
limit="${CI_DEVICE_TEST_TIMEOUT:-600}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
rc=0
for bin in "$@"; do
  name="$(basename "$bin")"
  log="/tmp/guest-tests.$name.log" # guest-only /tmp
  echo "[guest-tests] === $name --ignored --test-threads=1 (limit ${limit}s)"
  timeout -k 10 "$limit" "$bin" --ignored --test-threads=1 2>&1 | tee "$log"
  r="${PIPESTATUS[0]}"
  if ((r != 0)); then
    rc=1
    if grep -qE '^test result: .* [1-9][0-9]* failed' "$log"; then
      echo "[guest-tests] $name FAILED (exit $r)"
    else
      echo "[guest-tests] $name FAILED without a test summary (exit $r$( ((r == 124)) && echo ', timed out'))"
    fi
  fi
done
exit "$rc"
