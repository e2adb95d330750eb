#!/usr/bin/env bash
# ci/guest-tests.sh BIN... — runs INSIDE the guest: each device test binary with --ignored
# --test-threads=1, its output shown, its per-test wall times in CI_DEVICE_TIMES (default
# target/ci/logs/device-times.txt).
# Optional, by environment (ci/test.sh sets them):
# - CI_VALGRIND_BINS="BIN..." (paths without spaces), CI_VALGRIND_LOG=FILE, CI_VALGRIND_FILTERS:
#   the memcheck phase, ci/guest-valgrind.sh BIN... in this boot with its output in FILE, after
#   the binaries (before them with CI_VALGRIND_FIRST=1); it does not change this script's status
#   (ci/test.sh's valgrind step reports it: ci/guest-valgrind.sh --report FILE).
# - CI_CAPI_READY=FILE: a device_capi* binary first waits (bounded) until FILE exists; the host
#   builds the C examples meanwhile, then writes "ok" (or "failed") there.
# - CI_CONTAINER_BINS="BIN [FILTER...][;BIN [FILTER...]]...": at the end, those binaries
#   again inside the CI image, each with its libtest filters (ci/guest-container.sh,
#   docs/container.md), once CI_IMAGE_READY says the image is built.
# Any process that crashes meanwhile (a test binary, or an rdmaxfer or C example it spawned)
# leaves a core in CI_CORE_DIR (default target/ci/cores); after each test binary the backtraces
# of the new cores are printed here ("[cores] CRASH: ..."), and a crash fails the run.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
(($#)) || [[ -n "${CI_VALGRIND_BINS:-}${CI_CONTAINER_BINS:-}" ]] || { echo "[guest-tests] no test binaries given" >&2; exit 2; }
limit="${CI_DEVICE_TEST_TIMEOUT:-1200}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
# Every valgrind run here (the memcheck phase, the C examples' tests) without inlined frames: it
# halves valgrind's start (reading a Rust library's inline info), which on the emulated CPU is
# some 13 s a run; reports keep each function's own file:line. VALGRIND_OPTS="" restores them.
export VALGRIND_OPTS="${VALGRIND_OPTS---read-inline-info=no}"
cores="${CI_CORE_DIR:-target/ci/cores}"
cores_enable "$cores" || echo "[guest-tests] WARNING: crashes will leave no core" >&2
# Per-test wall times (a test's result line is stamped when it ends; with one test thread its
# time is the gap since the line before): every binary's in $times, the slowest at the end.
times="${CI_DEVICE_TIMES:-target/ci/logs/device-times.txt}"
mkdir -p "$(dirname "$times")"
: >"$times"
rc=0
# ready VAR WHAT — with the variable named VAR set to a file (ci/test.sh builds WHAT on the host
# meanwhile, then writes "ok" or "failed" there), waits until the file is there (bounded) and
# says whether it reads "ok"; with VAR unset, true at once.
ready() {
  local file="${!1:-}" i t0=$SECONDS
  [[ -z "$file" ]] && return 0
  for ((i = 0; i < ${CI_READY_WAIT:-1800}; i++)); do
    [[ -s "$file" ]] && break
    sleep 1
  done
  echo "[guest-tests] waited $((SECONDS - t0))s for $2"
  if [[ "$(cat "$file" 2>/dev/null)" != ok ]]; then
    echo "[guest-tests] $2: not built ($file: $(cat "$file" 2>/dev/null || echo missing))"
    return 1
  fi
}
# memcheck_phase — with CI_VALGRIND_BINS="BIN..." (paths without spaces) and CI_VALGRIND_LOG=FILE,
# runs ci/guest-valgrind.sh BIN... with its output in FILE; that does not change this script's
# status (ci/test.sh's valgrind step reports it). CI_VALGRIND_FIRST=1 runs it before the rest.
memcheck_phase() {
  [[ -n "${CI_VALGRIND_BINS:-}" ]] || return 0
  local vlog="${CI_VALGRIND_LOG:?CI_VALGRIND_LOG must name the log of the memcheck phase}" t0=$SECONDS
  echo "[guest-tests] === memcheck phase: ci/guest-valgrind.sh $CI_VALGRIND_BINS > $vlog"
  # shellcheck disable=SC2086 # a space-separated list of paths
  bash "$(dirname "${BASH_SOURCE[0]}")/guest-valgrind.sh" $CI_VALGRIND_BINS >"$vlog" 2>&1
  echo "[guest-tests] memcheck phase: exit $? after $((SECONDS - t0))s (reported by its own step)"
}
valgrind_first="${CI_VALGRIND_FIRST:-0}"
if ((valgrind_first)); then memcheck_phase; fi
# run_bin BIN [ARG...] — one device test binary (ARGs: libtest's filters, e.g. `cp::` or
# `--skip cp::`), its output shown and its per-test times appended to $times; sets rc=1 if it
# failed or a process crashed.
run_bin() {
  local bin="$1" name log before r tag
  shift
  name="$(basename "$bin")"
  tag="$name${1:+.$(printf '%s' "$*" | tr -c 'A-Za-z0-9_\n' '_')}"
  case "$name" in
    device_capi*)
      ready CI_CAPI_READY "the C examples" ||
        echo "[guest-tests] $name: running it anyway: its C-example tests will fail"
      ;;
  esac
  log="/tmp/guest-tests.$tag.log" # guest-only /tmp
  before="/tmp/guest-tests.$tag.cores"
  cores_list "$cores" >"$before"
  echo "[guest-tests] === $name --ignored --test-threads=1 $* (limit ${limit}s)"
  timeout -k 10 "$limit" "$bin" --ignored --test-threads=1 "$@" 2>&1 | stamp_lines "$log" "$times"
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
}
# container_phase — the CI container (ci/image.sh, docs/container.md): with CI_CONTAINER_BINS,
# those binaries run again inside the image, in this guest; their results count like the rest.
container_phase() {
  [[ -n "${CI_CONTAINER_BINS:-}" ]] || return 0
  echo "[guest-tests] === the CI container: ci/guest-container.sh $CI_CONTAINER_BINS"
  if ready CI_IMAGE_READY "the CI image"; then
    local specs
    IFS=';' read -r -a specs <<<"$CI_CONTAINER_BINS"
    bash "$(dirname "${BASH_SOURCE[0]}")/guest-container.sh" "${specs[@]}" || rc=1
  else
    echo "[guest-tests] the CI container FAILED without a test summary (no image)"
    rc=1
  fi
}
# CI_GUEST_PARALLEL="NAME..." (binary names without cargo's hash, e.g. device_file): those run
# in a second lane beside the rest, one after another, their output held back and shown after
# the first lane's (and kept in CI_LANE2_LOG), their times in $times all the same. Two lanes keep
# both vCPUs busy where one test binary keeps about one. The memcheck phase ends the second lane
# and the container phase the first. Device tests count only their own objects on the device
# (`rdma resource show`, by thread), so they may run beside each other.
# A crash in either lane may be reported by both (each looks for new cores).
# CI_GUEST_SPLIT="NAME:FILTER..." (e.g. device_cli:cp::): a second-lane binary's tests that
# FILTER matches run at the end of the first lane instead (`FILTER`, and `--skip FILTER` in the
# second), which evens the lanes out. Lanes hold "BIN [ARG...]" (paths without spaces).
lane2=()
lane1=()
lane1_end=()
for bin in "$@"; do
  n="$(basename "$bin")"
  if [[ " ${CI_GUEST_PARALLEL:-} " == *" ${n%-*} "* ]]; then
    skip=""
    for split in ${CI_GUEST_SPLIT:-}; do
      if [[ "${split%%:*}" == "${n%-*}" ]]; then
        skip+=" --skip ${split#*:}"
        lane1_end+=("$bin ${split#*:}")
      fi
    done
    lane2+=("$bin$skip")
  else
    lane1+=("$bin")
  fi
done
if ((${#lane2[@]})); then
  # Under the repo (the guest writes there), so it outlives a guest that is stopped.
  lane2_out="${CI_LANE2_LOG:-target/ci/logs/guest-lane2.log}" lane2_rc="/tmp/guest-tests.lane2.rc"
  mkdir -p "$(dirname "$lane2_out")"
  echo "[guest-tests] second lane beside the first: ${lane2[*]}"
  (
    rc=0
    times="$times.lane2"
    : >"$times"
    for job in "${lane2[@]}"; do
      read -ra words <<<"$job"
      run_bin "${words[@]}"
    done
    if ((!valgrind_first)); then memcheck_phase; fi
    echo "$rc" >"$lane2_rc"
  ) >"$lane2_out" 2>&1 &
  lane2_pid=$!
fi
for job in "${lane1[@]}" "${lane1_end[@]}"; do
  read -ra words <<<"$job"
  run_bin "${words[@]}"
done
if ((${#lane2[@]})); then
  container_phase
  wait "$lane2_pid"
  echo "[guest-tests] === the second lane's output"
  cat "$lane2_out"
  cat "$times.lane2" >>"$times"
  rm -f "$times.lane2"
  [[ "$(cat "$lane2_rc" 2>/dev/null)" == 0 ]] || rc=1
fi
echo "[guest-tests] slowest device tests (seconds; all in $times):"
sort -rn "$times" | sed -n '1,15s/^/[guest-tests]   /p'
if ((!${#lane2[@]})); then
  if ((!valgrind_first)); then memcheck_phase; fi
  container_phase
fi
exit "$rc"
