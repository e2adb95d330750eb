#!/usr/bin/env bash
# ci/guest-stripe-stress.sh [RUNS] [STREAMS] [HOGS] [MIB] [CHUNK] [SLOTS] — INSIDE the guest
# (`ci/guest.sh -- bash ci/guest-stripe-stress.sh 10 4 2`): RUNS striped sends of a MIB-MiB random
# file over STREAMS streams (--chunk CHUNK, rings of SLOTS slots on both sides) to `recv --once`
# on rxe0, while HOGS busy loops compete for the guest's CPU. Per run: both exit codes, whether
# the file arrived identical, the sender's error if any, and the rxe0 counters that grew
# (completer_retry_err: the requester's retransmissions after an ACK timeout; duplicate_request:
# packets the responder got again). At the end the kernel's last messages. Prints
# "stress: N of RUNS ok". Binary: $RDMAXFER_BIN (default target/debug/rdmaxfer). With
# STRESS_LOGS=DIR (under the repo, which the guest writes), a failed run's send and receive logs
# are kept there (with RDMAXFER_TRACE_STREAMS=1 in CI_GUEST_ENV: the work-request trace).
set -uo pipefail

runs="${1:-10}" streams="${2:-4}" hogs="${3:-2}" mib="${4:-32}" chunk="${5:-64K}" slots="${6:-4}"
bin="${RDMAXFER_BIN:-target/debug/rdmaxfer}"
w="$(mktemp -d)"
head -c "$((mib << 20))" /dev/urandom >"$w/f.bin"

counters() {
  local f
  for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do printf '%s=%s ' "${f##*/}" "$(cat "$f")"; done
}
# grown BEFORE AFTER — the counters that grew (packet and byte counts left out).
grown() {
  python3 - "$1" "$2" <<'PY'
import sys
b = dict(kv.split("=") for kv in sys.argv[1].split())
a = dict(kv.split("=") for kv in sys.argv[2].split())
out = [f"{k} +{int(v) - int(b.get(k, 0))}" for k, v in sorted(a.items())
       if int(v) != int(b.get(k, 0)) and not k.endswith(("pkts", "bytes"))]
print(" ".join(out) or "none")
PY
}

pids=()
for _ in $(seq 1 "$hogs"); do
  (while :; do :; done) &
  pids+=("$!")
done
cleanup() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; rm -rf "$w"; }
trap cleanup EXIT

ok=0
for r in $(seq 1 "$runs"); do
  rm -rf "$w/out" && mkdir "$w/out"
  port=$((19000 + r))
  before="$(counters)"
  "$bin" recv --out "$w/out" --listen 198.18.0.1 -p "$port" --once --json --slots "$slots" >"$w/recv.log" 2>&1 &
  rp=$!
  for _ in $(seq 1 600); do # bounded wait for the listener (its own output line)
    grep -q "listening on" "$w/recv.log" 2>/dev/null && break
    kill -0 "$rp" 2>/dev/null || break
    sleep 0.1
  done
  timeout 600 "$bin" send "$w/f.bin" "198.18.0.1:$port" --json --streams "$streams" --chunk "$chunk" --slots "$slots" >"$w/send.log" 2>&1
  src=$?
  wait "$rp"
  rrc=$?
  same=no
  cmp -s "$w/f.bin" "$w/out/f.bin" && same=yes
  left="$(find "$w/out" -type f | wc -l)"
  [[ $src == 0 && $rrc == 0 && $same == yes ]] && ok=$((ok + 1))
  echo "run $r: send rc $src, recv rc $rrc, identical $same, files in out $left; rxe0 grown: $(grown "$before" "$(counters)")"
  if [[ $src != 0 || $rrc != 0 ]]; then
    grep -h "error" "$w/send.log" | grep -v '^{' | sed 's/^/  [send] /' | head -n 5
    grep -h "error" "$w/recv.log" | grep -v '^{' | sed 's/^/  [recv] /' | head -n 5
    if [[ -n "${STRESS_LOGS:-}" ]]; then
      mkdir -p "$STRESS_LOGS" && cp "$w/send.log" "$STRESS_LOGS/send-$r.log" && cp "$w/recv.log" "$STRESS_LOGS/recv-$r.log"
    fi
  fi
done
echo "--- dmesg (last 20 lines):"
dmesg | tail -n 20
echo "stress: $ok of $runs ok"
((ok == runs))
