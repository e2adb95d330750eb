#!/usr/bin/env bash
# ci/fuzz.sh — build the AFL++ fuzz targets (fuzz/, cargo-afl) and run each briefly from its seeds;
# fails on any crash. One cargo-style "test result:" line per target (ci/test.sh counts them).
# Env: FUZZ_SECONDS (per target, default 5), FUZZ_EXECS (stop a target after this many
# executions; unset: time only), FUZZ_TARGETS (names; default every fuzz/src/bin/*.rs),
# FUZZ_OUT (default fuzz/out/ci; each target's AFL output folder is FUZZ_OUT/<target>).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ci_path
cd "$CI_ROOT/fuzz"

have="$(cargo afl --version 2>/dev/null || true)"
[[ "$have" == "cargo-afl $CARGO_AFL_VERSION "* ]] ||
  ci_die "cargo-afl $CARGO_AFL_VERSION not found (got '${have:-nothing}'): run ci/setup.sh"

secs="${FUZZ_SECONDS:-5}"
out_root="${FUZZ_OUT:-$PWD/out/ci}"
if [[ -n "${FUZZ_TARGETS:-}" ]]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  targets=()
  for f in src/bin/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

t0="$SECONDS"
# cargo-afl compiles every crate with one codegen unit at AFL_OPT_LEVEL (its default 3): on two
# cores the rdmaxfer crate alone then took over 20 min (over 9 at level 1), at level 0 the whole
# cold build 125 s. These runs are seconds long, so the build matters more than the speed of an
# execution; fuzz/Cargo.toml's overflow and debug-assertion checks stay on at every level.
export AFL_OPT_LEVEL="${AFL_OPT_LEVEL:-0}"
ci_log "fuzz: cargo afl build --release, AFL_OPT_LEVEL=$AFL_OPT_LEVEL (${targets[*]})"
# fuzz/Cargo.lock pins the fuzz build; it also lists rdmaxfer's own dependencies, so a dependency
# added to the main crate must be added here too (`cd fuzz && cargo update -w`), or this fails.
cargo afl build --release --locked --bins ||
  ci_die "fuzz build failed (if it says the lock file needs updating: cd fuzz && cargo update -w, and commit fuzz/Cargo.lock)"
ci_log "fuzz: built in $((SECONDS - t0)) s"

# AFL++ on a shared CI host: no UI, no CPU pinning (cores may all be taken), no core_pattern or
# governor demands, no update check.
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
export AFL_QUIET=1 AFL_NO_STARTUP_CALIBRATION=1

afl_stat() { awk -v k="$1" '$1 == k { print $3 }' "$2"; }

fails=0
for t in "${targets[@]}"; do
  out="$out_root/$t"
  rm -rf "$out"
  mkdir -p "$out"
  args=(-i "seeds/$t" -o "$out" -V "$secs" -t 1000)
  [[ -n "${FUZZ_EXECS:-}" ]] && args+=(-E "$FUZZ_EXECS")
  ts="$SECONDS"
  set +e
  nice -n 19 cargo afl fuzz "${args[@]}" "target/release/$t" >"$out/afl.log" 2>&1
  rc=$?
  set -e
  stats="$out/default/fuzzer_stats"
  if [[ ! -f "$stats" ]]; then
    tail -n 30 "$out/afl.log"
    echo "fuzz $t: AFL++ did not start (rc $rc; log $out/afl.log)"
    echo "test result: FAILED. 0 passed; 1 failed"
    fails=$((fails + 1))
    continue
  fi
  execs="$(afl_stat execs_done "$stats")"
  crashes="$(afl_stat saved_crashes "$stats")"
  hangs="$(afl_stat saved_hangs "$stats")"
  paths="$(afl_stat corpus_count "$stats")"
  echo "fuzz $t: ${execs} execs in $((SECONDS - ts)) s, ${crashes} crashes, ${hangs} hangs, ${paths} paths (rc $rc)"
  if ((rc != 0 || crashes != 0)); then
    for c in "$out"/default/crashes/id*; do
      [[ -f "$c" ]] || continue
      echo "crashing input $c:"
      od -A d -t x1 "$c" | head -n 8
    done
    echo "test result: FAILED. 0 passed; 1 failed"
    fails=$((fails + 1))
  else
    echo "test result: ok. 1 passed; 0 failed"
  fi
done
ci_log "fuzz: ${#targets[@]} targets, $fails failed, $((SECONDS - t0)) s in all"
((fails == 0))
