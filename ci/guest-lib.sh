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
