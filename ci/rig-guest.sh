# ci/rig-guest.sh — sourced by every command ci/rig.sh runs INSIDE a rig guest (never run on its own).
# Gives: BIN (rdmaxfer), W (guest-local tmpfs work dir), NIC and NIC2 (the two wires' interfaces,
# from the agent) and small helpers.

W=/tmp/rig
mkdir -p "$W"
cd "$W" || exit 1
ulimit -l unlimited
# The agent copied the binary to tmpfs: exec over 9p costs ~0.1 s more per process (the soak starts 500).
BIN="$W/rdmaxfer"
# rdmaxfer's wait mode: one vCPU per guest, and busy-polling it starves rxe (in the same kernel)
# of the CPU: -e (sleep on the completion channel) unless RIG_POLL=1.
if [[ "${RIG_POLL:-0}" == 1 ]]; then EV=""; else EV="-e"; fi
# RIG_TRACE_STREAMS=1: every post and completion of rdmaxfer's QPs goes to its log (stderr).
[[ "${RIG_TRACE_STREAMS:-0}" == 1 ]] && export RDMAXFER_TRACE_STREAMS=1

# netem ARGS... — the root qdisc of the wire NIC becomes a fresh netem ARGS (e.g. "loss 1%"). Not
# `tc qdisc replace`: that keeps options of the previous netem that ARGS does not name (a `rate`).
netem() {
  tc qdisc del dev "$NIC" root 2>/dev/null
  tc qdisc add dev "$NIC" root netem "$@" && echo "[$(hostname)] netem on $NIC: $*"
}
# netem_off — back to the default qdisc.
netem_off() { tc qdisc del dev "$NIC" root 2>/dev/null || true; }

# mkrand FILE MIB — a random file (kept: callers reuse it across tests).
mkrand() { [[ -s "$1" ]] || head -c "$(($2 << 20))" /dev/urandom >"$1"; }

# wait_size GLOB BYTES SECS — poll until a file matching GLOB (in the current dir) has at least
# BYTES bytes; fails after SECS.
wait_size() {
  local end=$((SECONDS + $3)) f
  while ((SECONDS < end)); do
    for f in $1; do
      [[ -f "$f" ]] && (($(stat -c %s "$f") >= $2)) && { echo "wait_size: $f has $(stat -c %s "$f") bytes"; return 0; }
    done
    sleep 0.05
  done
  echo "wait_size: no $1 with $2 bytes after $3 s: $(ls -la $(dirname "$1") 2>&1)"
  return 1
}

# rxe_active SECS [DEV] — poll until DEV's (rxe0's) port is ACTIVE and GID index 1 is back
# (after link down).
rxe_active() {
  local end=$((SECONDS + $1)) dev="${2:-rxe0}"
  while ((SECONDS < end)); do
    rdma link show "$dev/1" | grep -q 'state ACTIVE' &&
      grep -q ffff "/sys/class/infiniband/$dev/ports/1/gids/1" && return 0
    sleep 0.1
  done
  echo "rxe_active: $dev not ACTIVE with its IPv4 GID after $1 s: $(rdma link show "$dev/1")"
  return 1
}

# wait_pkts DEV N SECS — poll until DEV's port has sent N packets more than when called (a
# stream moves data on that rail); fails after SECS.
wait_pkts() {
  local f="/sys/class/infiniband/$1/ports/1/hw_counters/sent_pkts" end=$((SECONDS + $3)) base
  base="$(cat "$f")" || return 1
  while ((SECONDS < end)); do
    (($(cat "$f") >= base + $2)) && { echo "wait_pkts: $1 sent $(($(cat "$f") - base)) packets"; return 0; }
    sleep 0.05
  done
  echo "wait_pkts: $1 sent $(($(cat "$f") - base)) of $2 packets in $3 s"
  return 1
}

# peer_reachable IP SECS — poll until IP answers a TCP probe (a refused connect counts: it came
# back; no ping in the guest): after a link flap the neighbour entry may be stale, and the next
# connection's first packets would be lost until it is re-resolved.
peer_reachable() {
  local end=$((SECONDS + $2)) rc
  while ((SECONDS < end)); do
    rc=0
    timeout 1 bash -c "exec 3<>/dev/tcp/$1/9" 2>/dev/null || rc=$?
    ((rc != 124)) && return 0
  done
  echo "peer_reachable: $1 does not answer after $2 s"
  return 1
}

# proc_sample PID — "rss_kib fds" of a process.
proc_sample() { echo "$(awk '/^VmRSS/ {print $2}' "/proc/$1/status") $(ls "/proc/$1/fd" | wc -l)"; }

# rxe_counters — rxe0's hardware counters on one line, NAME=VALUE … (out_of_seq_request,
# duplicate_request: packets the responder got out of order / again; rcvd_seq_err: sequence NAKs
# the requester got; completer_retry_err: its retransmissions; …).
rxe_counters() {
  local f
  for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do printf '%s=%s ' "${f##*/}" "$(cat "$f")"; done
  echo
}

# fault_evidence — what the kernel saw around a failed transfer: its last messages (rxe's
# warnings), the qdiscs' drops (a packet dropped on the way out makes rxe resend it) and the
# links' counters.
fault_evidence() {
  echo "--- dmesg (last 40 lines):"
  dmesg | tail -n 40
  echo "--- tc -s qdisc show:"
  tc -s qdisc show
  echo "--- ip -s link show:"
  ip -s link show
}

# rdma_res — the resource counts of rxe0 (pd, cq, qp, cm_id, mr, ctx, …) on one line.
rdma_res() { rdma resource show | grep rxe0 | tr -s ' '; }

# serve_tcp PORT CMD... — run a server that prints nothing when ready (perftest): start it, poll
# until something listens on TCP PORT, say "listening on", then wait for it and return its status.
serve_tcp() {
  local p="$1" pid end=$((SECONDS + 30))
  shift
  "$@" &
  pid=$!
  while ((SECONDS < end)) && kill -0 "$pid" 2>/dev/null; do
    ss -Hltn "sport = :$p" | grep -q . && { echo "listening on tcp port $p"; break; }
    sleep 0.05
  done
  wait "$pid"
}
