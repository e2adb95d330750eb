# ci/guest-lib.sh — helpers for the scripts that run INSIDE the guest (sourced, never run on its own).
# Every wait is a bounded poll of a condition (50 ms steps, 30 s at most), never a fixed sleep.

# wait_until DESC PID CMD... — poll CMD until it succeeds; fail early if process PID (or "-") died.
wait_until() {
  local desc="$1" pid="$2" i
  shift 2
  for ((i = 0; i < 600; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    if [[ "$pid" != - ]] && ! kill -0 "$pid" 2>/dev/null; then
      echo "!! gave up waiting for $desc: process $pid ended" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "!! timed out waiting for $desc" >&2
  return 1
}

# tcp_listening PORT — something listens on TCP PORT.
tcp_listening() { ss -Hltn "sport = :$1" | grep -q .; }

# wait_tcp PORT PID — until something listens on TCP PORT (server PID must stay alive).
wait_tcp() { wait_until "a TCP listener on port $1" "$2" tcp_listening "$1"; }

# wait_line FILE PID — until rdmaxfer's "listening on" line is in FILE (PID must stay alive).
wait_line() { wait_until "\"listening on\" in $1" "$2" grep -q "listening on" "$1"; }

# cm_listening PORT — an rdma_cm id listens on PORT (rsockets servers such as rcopy).
cm_listening() { rdma resource show cm_id | grep -q "LISTEN.*:$1\b"; }

# ---- crash capture (core dumps and their backtraces) ----------------------------------------
# cores_enable DIR — every process that crashes from now on in this guest (test binaries, the
# rdmaxfer processes and C examples they spawn) leaves DIR/core.EXE.PID.SIG, EXE being the
# crashed executable's path with '/' as '!' (core(5) %E). Needs root (the guest is).
cores_enable() {
  local dir="$1" pattern
  mkdir -p "$dir" || return 1
  pattern="$(cd "$dir" && pwd)/core.%E.%p.%s"
  # The kernel truncates core_pattern at 127 bytes (CORENAME_MAX_SIZE): refuse rather than
  # write cores somewhere nobody looks.
  if ((${#pattern} > 127)); then
    echo "!! core capture off: core_pattern '$pattern' is longer than 127 bytes" >&2
    return 1
  fi
  ulimit -c unlimited || return 1
  echo "$pattern" >/proc/sys/kernel/core_pattern || return 1
  echo "[cores] core dumps on (ulimit -c $(ulimit -c)): $(cat /proc/sys/kernel/core_pattern)"
}

# cores_list DIR — the names of the cores now in DIR (for cores_report).
cores_list() { find "$1" -maxdepth 1 -type f -name 'core.*' -printf '%f\n' 2>/dev/null | sort; }

# cores_report DIR BEFORE — for each core in DIR not named in file BEFORE (a cores_list): its
# path, and the backtrace of every thread (gdb -batch, if installed) on stdout. Returns 1 if
# there was any. (Names, not times: the guest's clock and the shared directory's may differ.)
cores_report() {
  local dir="$1" before="$2" base core exe found=0
  while IFS= read -r base; do
    found=1
    core="$(realpath "$dir/$base")"
    exe="${base#core.}"
    exe="${exe%.*.*}"
    exe="${exe//!//}"
    echo "[cores] CRASH: core $core (executable $exe; pid and signal end the name)"
    if ! command -v gdb >/dev/null 2>&1; then
      echo "[cores] gdb not installed: the core is kept; open it with: gdb $exe $core"
    elif [[ ! -x "$exe" ]]; then
      echo "[cores] $exe is gone: the core is kept, no backtrace"
    else
      timeout -k 10 600 gdb -batch -nx -q -ex 'set pagination off' -ex 'info threads' \
        -ex 'thread apply all bt' "$exe" "$core" 2>&1 | sed 's/^/[cores] /'
      echo "[cores] (core kept: gdb $exe $core)"
    fi
  done < <(cores_list "$dir" | comm -13 "$before" -)
  return $((found ? 1 : 0))
}

# stamp_lines LOG TIMES — copies stdin to stdout and to LOG; for each "test NAME ... RESULT"
# line, appends "SECONDS BINARY::NAME RESULT" to TIMES, SECONDS being the time since the result
# or "running N tests" line before it (with one test thread, libtest prints a test's result
# line when it ends).
stamp_lines() {
  local log="$1" times="$2" line prev="$EPOCHREALTIME" now bin
  bin="$(basename "$log" .log)"
  bin="${bin#guest-tests.}"
  bin="${bin%-*}"
  : >"$log"
  while IFS= read -r line || [[ -n "$line" ]]; do
    printf '%s\n' "$line"
    printf '%s\n' "$line" >>"$log"
    now="$EPOCHREALTIME"
    if [[ "$line" =~ ^test\ ([^ ]+)\ \.\.\.\ (ok|FAILED|ignored) ]]; then
      awk -v a="$prev" -v b="$now" -v n="$bin::${BASH_REMATCH[1]}" -v r="${BASH_REMATCH[2]}" \
        'BEGIN { printf "%.1f %s %s\n", b - a, n, r }' >>"$times"
      prev="$now"
    elif [[ "$line" =~ ^running\  ]]; then
      prev="$now"
    fi
  done
}
