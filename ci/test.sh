#!/usr/bin/env bash
# ci/test.sh — command 2, every test; ends "N passed, M failed" (CI runs it via .ci/run).
# Order: set-up; the test binaries (debug, all features, line tables only) built once; fmt,
# clippy, docs, examples, header check, host `cargo test`, a dependent project's check; the guest's build (opt-level 1), the
# CI image, the C library and examples, the fuzz targets; then one rxe guest runs every device
# test (ci/guest-tests.sh, the memcheck phase and the CI container's smoke set included); its
# output and counts, and the memcheck verdict.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"

logs="target/ci/logs"
mkdir -p "$logs"
passed=0
failed=0
report=()
failed_steps=()
declare -A bg_pid bg_t0
host_nice=0 # the steps' niceness: raised while the guest runs beside them

finish() {
  # What CI keeps of a run is its end: each failed step's last lines come before the summary.
  local name
  for name in "${failed_steps[@]}"; do
    ci_log "=== $name failed; the last lines of $logs/$name.log:"
    grep -E -m 20 'FAILED|panicked at|ERROR|^error' "$logs/$name.log" | sed 's/^/  ! /' || true
    grep -v '^test .* \.\.\. ok$' "$logs/$name.log" | tail -n "${CI_FAIL_TAIL:-25}" | sed 's/^/  | /' || true
  done
  ci_log "=== summary ($((SECONDS / 60)) min $((SECONDS % 60)) s in all)"
  printf '  %s\n' "${report[@]}"
  echo "$passed passed, $failed failed"
  if ((failed)); then exit 1; fi
  exit 0
}

# tally NAME RC T0 — adds the cargo-style "test result:" counts of $logs/NAME.log; a step that
# failed without reporting a failed test (build error, crash, lint) counts as one failure.
tally() {
  local name="$1" rc="$2" t0="$3" p f
  read -r p f < <(awk '
    /^test result: / { for (i = 2; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } }
    /^\[guest-tests\] .* FAILED without a test summary/ { f++ }
    END { print p + 0, f + 0 }' "$logs/$name.log")
  if ((rc != 0 && f == 0)); then f=1; fi
  passed=$((passed + p))
  failed=$((failed + f))
  if ((f)); then failed_steps+=("$name"); fi
  report+=("$(printf '%-14s %-4s %3s passed %3s failed  %4ss' "$name" "$( ((rc == 0)) && echo ok || echo FAIL)" "$p" "$f" "$((SECONDS - t0))")")
}

# step NAME CMD... — runs CMD (output shown and logged) and tallies it; returns CMD's status.
step() {
  local name="$1" rc t0="$SECONDS"
  shift
  ci_log "=== $name: $*"
  set +e
  nice -n "$host_nice" "$@" 2>&1 | tee "$logs/$name.log"
  rc="${PIPESTATUS[0]}"
  set -e
  tally "$name" "$rc" "$t0"
  return "$rc"
}

# step_bg NAME CMD... — starts CMD in the background, its output only in $logs/NAME.log.
step_bg() {
  local name="$1"
  shift
  ci_log "=== $name (background, joined later): $*"
  bg_t0[$name]="$SECONDS"
  (
    set +e
    "$@" >"$logs/$name.log" 2>&1
    echo "$?" >"$logs/$name.rc"
  ) &
  bg_pid[$name]="$!"
}

# step_join NAME — waits for a step_bg, shows its output and tallies it.
step_join() {
  local name="$1" rc
  wait "${bg_pid[$name]}" || true
  rc="$(cat "$logs/$name.rc" 2>/dev/null || echo 1)"
  ci_log "=== $name (joined, exit $rc): its output"
  cat "$logs/$name.log"
  tally "$name" "$rc" "${bg_t0[$name]}"
  return "$rc"
}

step setup bash ci/setup.sh || finish
ci_path
# Debug builds with line tables only, not full debug info: test binaries a third the size, which
# link faster, load faster over the guest's 9p and start faster under valgrind; backtraces and
# memcheck reports keep file:line. Every cargo call below sees it (one set of artifacts).
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
# A build from scratch gains nothing from incremental caches (and 16 codegen units, not 256).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# The test binaries, built once (the host run below finds them built).
step build-tests cargo test --all-features --no-run || finish
# The host's checks and tests next, on these artifacts as they are: the guest's build below
# writes target/debug's librdmaxfer.so (a cdylib's name has no hash) at opt-level 1, and a cargo
# step after it would rebuild the crate at 0 first.
step fmt cargo fmt --check || true
step clippy cargo clippy --all-targets --all-features -- -D warnings || true
# Rust docs (the guide's doc-tests run in host-tests) and examples/*.rs, async ones included.
step doc env RUSTDOCFLAGS="-D warnings" cargo doc --all-features --no-deps || true
step examples cargo build --examples --all-features || true
step header bash ci/gen-header.sh --check || true
step abi bash ci/abi-check.sh || true
step host-tests cargo test --all-features --no-fail-fast || true
# A Rust project depending on the library (default features): no CLI crates, no C exports.
step dependent bash ci/dependent.sh || true
# The crate as crates.io would get it: packaged, and built from the package.
step publish cargo publish --dry-run --locked --allow-dirty -p rdmaxfer || true
# What the guest runs: the device test binaries, the CLI and the C library, built again with the
# crate itself at opt-level 1 (its dependencies as above: the same units, not rebuilt). Measured
# from a clean clone on 2 cores: the guest's part 2180 s at opt-level 0, 1435 s at 1 (memcheck
# 255 -> 95 s, device_file 670 -> 435 s); this build costs 258 s, and the C examples' separate
# release build (269 s) goes (the step now takes 61 s). The guest runs hard links of them in
# target/ci/bin, so a later build on the host (ci/install.sh in a host test rebuilds
# target/debug/rdmaxfer without features) never swaps one under a running test. (One build at
# opt-level 1 for host and guest was tried: 636 s, as every test target is then optimised.)
json="target/ci/test-artifacts.json"
guest_build=(cargo test --all-features --no-run --message-format=json-render-diagnostics
  --config "profile.dev.package.rdmaxfer.opt-level=${CI_GUEST_OPT_LEVEL:-1}")
for d in tests/device_*/; do guest_build+=(--test "$(basename "$d")"); done
# The C library (librdmaxfer/: its test `exports` builds it) in the same build, features and all.
guest_build+=(-p rdmaxfer -p rdmaxfer-ffi --test exports)
step build-guest bash -c '"${@:2}" >"$1"' _ "$json" "${guest_build[@]}" || finish
mapfile -t found < <(python3 - "$json" <<'PY'
import json, sys
rows = set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t, exe = m.get("target", {}), m.get("executable")
    if m.get("reason") != "compiler-artifact":
        continue
    if "cdylib" in t.get("kind", []) and not m["profile"]["test"]:
        rows.update("lib\t" + f for f in m["filenames"] if f.endswith(".so"))
    if not exe:
        continue
    if "test" in t["kind"] and t["name"].startswith("device_") and m["profile"]["test"]:
        rows.add("dev\t" + exe)
    elif "bin" in t["kind"] and t["name"] == "rdmaxfer" and not m["profile"]["test"]:
        rows.add("bin\t" + exe)
print("\n".join(sorted(rows)))
PY
)
bindir="target/ci/bin"
rm -rf "$bindir"
mkdir -p "$bindir"
device_bins=()
capi_bins=()
RDMAXFER_BIN=""
CI_CAPI_LIB=""
for row in "${found[@]}"; do
  exe="${row#*$'\t'}"
  ln -f "$exe" "$bindir/$(basename "$exe")"
  case "$row" in
    dev$'\t'*device_capi*) capi_bins+=("$CI_ROOT/$bindir/$(basename "$exe")") ;;
    dev$'\t'*) device_bins+=("$CI_ROOT/$bindir/$(basename "$exe")") ;;
    bin$'\t'*) RDMAXFER_BIN="$CI_ROOT/$bindir/$(basename "$exe")" ;;
    lib$'\t'*) CI_CAPI_LIB="$CI_ROOT/$bindir/$(basename "$exe")" ;;
  esac
done
[[ -n "$RDMAXFER_BIN" ]] || ci_die "the rdmaxfer binary was not among the built artifacts"
[[ -n "${CI_CAPI_LIB:-}" ]] || ci_die "librdmaxfer.so was not among the built artifacts"
export CI_CAPI_LIB
export RDMAXFER_BIN
device_bins+=("${capi_bins[@]}")
if ((${#device_bins[@]} == 0)); then
  ci_log "FAIL: no device tests found (expected the tests/device_*/main.rs integration tests)"
  report+=("device-tests FAIL: no device tests found")
  failed=$((failed + 1))
  finish
fi
ci_log "device test binaries: ${device_bins[*]}; RDMAXFER_BIN=$RDMAXFER_BIN"

# One rxe guest runs every device binary
# (ci/guest-tests.sh): device_verbs, device_conn, device_file, device_cli, then device_capi (once
# CI_CAPI_READY says the C examples are built), the memcheck phase (device_verbs' verbs:: and rw::
# under valgrind: ci/guest-valgrind.sh, reported by the valgrind step) and the CI container's
# smoke set (device_verbs inside the image, once CI_IMAGE_READY says it is built: ci/image.sh,
# ci/guest-container.sh, docs/container.md). The guest starts after the host steps: the device
# tests are bound by the emulated CPU (a guest keeps about 1.2 of the two cores busy), and work
# beside it only slows it. Measured on this 2-core size: two guests at once took 1790 s and
# 2231 s where one guest had taken 1355 s for all of it; one guest beside the (niced) host steps
# ran its device binaries and the host steps each about twice as slow as alone. CI_OVERLAP=1
# still starts the guest before the image, C examples and fuzz steps, those niced
# (CI_HOST_NICE, default 10).
ordered=()
for pre in device_verbs device_conn device_file device_cli; do
  for b in "${device_bins[@]}"; do [[ "$(basename "$b")" == "$pre"-* ]] && ordered+=("$b"); done
done
verbs_bin=""
for b in "${device_bins[@]}"; do
  case "$(basename "$b")" in
    device_verbs-*) verbs_bin="$b" ;;
    device_conn-* | device_file-* | device_cli-*) ;;
    *) ordered+=("$b") ;; # device_capi and any other, last
  esac
done
export CI_CAPI_READY="$CI_ROOT/target/ci/capi.ready" CI_IMAGE_READY="$CI_ROOT/target/ci/image.ready"
valgrind_log="$CI_ROOT/$logs/valgrind-guest.log"
rm -f "$valgrind_log" "$CI_CAPI_READY" "$CI_IMAGE_READY" "$logs"/device-times*.txt
# Two lanes in the guest (ci/guest-tests.sh): device_verbs, device_conn, device_capi, then
# device_cli's cp:: tests and the container in the first; device_file, the rest of device_cli
# and the memcheck phase in the second. Measured from clean clones on 2 cores: the guest's part
# 1435 s in one lane, 690 s and 857 s in two (the whole run 38 min 37 s -> 25 min 20 s).
# CI_GUEST_PARALLEL="" runs one lane. The cp:: tests (ssh in the guest: some 150 s) moved when
# the second lane had grown to 1020 s beside the first's 572 s (CI_GUEST_SPLIT); device_verbs,
# the memcheck phase and the container, once run alone after the lanes (212 s), count only their
# own objects on the device.
export CI_GUEST_PARALLEL="${CI_GUEST_PARALLEL-device_file device_cli}"
export CI_GUEST_SPLIT="${CI_GUEST_SPLIT-device_cli:cp::}"
guest=(env CI_GUEST_TIMEOUT="${CI_GUEST_TIMEOUT:-2700}" CI_DEVICE_TIMES="$logs/device-times.txt"
  CI_VALGRIND_BINS="$verbs_bin" CI_VALGRIND_FILTERS="verbs:: rw::" CI_VALGRIND_LOG="$valgrind_log"
  CI_CONTAINER_BINS="$verbs_bin --skip errors::" CI_GUEST_ENV="${CI_GUEST_ENV:-} VALGRIND_OPTS"
  ci/guest.sh -- bash ci/guest-tests.sh "${ordered[@]}")
overlap="${CI_OVERLAP:-0}"
if ((overlap)); then
  step_bg device-tests "${guest[@]}"
  host_nice="${CI_HOST_NICE:-10}"
fi

# The image the guest's container step loads (Debian packages only; reused while its inputs hold).
if step image bash ci/image.sh; then echo ok >"$CI_IMAGE_READY"; else echo failed >"$CI_IMAGE_READY"; fi
# The C API as a C user gets it: install with PREFIX, build examples/c with pkg-config (the guest
# runs them from target/capi/bin: tests/device_capi). The marker lets the guest go on.
if step capi-examples bash ci/capi-examples.sh; then echo ok >"$CI_CAPI_READY"; else echo failed >"$CI_CAPI_READY"; fi
# AFL++ fuzz targets of the peer-input decoders (fuzz/, docs/fuzzing.md): fails on a crash.
step fuzz bash ci/fuzz.sh || true

if ((overlap)); then
  step_join device-tests || true
else
  step device-tests "${guest[@]}" || true
fi
ci_log "slowest device tests (seconds; all in $logs/device-times.txt):"
sort -rn "$logs"/device-times.txt 2>/dev/null | sed -n '1,15s/^/  /p'
step valgrind bash ci/guest-valgrind.sh --report "$valgrind_log" || true
# The two-host rig (ci/rig.sh: two guests on a wire, faults, soak, benchmark) takes ~20 min on a
# 2-core host (the 500-transfer soak ~11), more than this run's budget: opt in with CI_RIG=1 (RIG_SOAK_N shortens the soak).
if [[ "${CI_RIG:-0}" == 1 ]]; then
  step rig bash ci/rig.sh || true
else
  ci_log "two-host rig skipped (CI_RIG=1 runs it here, or run ci/rig.sh)"
fi
finish
