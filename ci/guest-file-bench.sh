#!/usr/bin/env bash
# ci/guest-file-bench.sh [MIB] [CHUNK] — runs INSIDE the guest: a MIB-MiB random file tmpfs → tmpfs,
# side by side: `rdmaxfer send` → `recv --once` (verified: BLAKE3 + cmp), rcopy (rsockets, no
# integrity check; cmp'd here) and ib_write_bw at the chunk size; prints the ratios.
# Extra rdmaxfer flags for both sides in $FLAGS (e.g. FLAGS=--event); SPARSE=1 uses a sparse
# source (peak RSS of big files without RAM); NO_ANCHOR=1 skips rcopy and ib_write_bw.
# Streams: the aggregate rate of `send --streams N` for N in $STREAMS (default "1 2 4"; empty:
# none), on rxe0 alone and, when rxe1 exists (ci/guest-init.sh), over both rails.
set -euo pipefail
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
mib="${1:-128}"
chunk="${2:-1048576}"
ip=198.18.0.1
port=18610
work="$(mktemp -d /tmp/rdmaxfer-fbench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/out" "$work/rcopy"
if [[ -n "${SPARSE:-}" ]]; then
  truncate -s "$((mib << 20))" "$work/src/f.bin"
else
  head -c "$((mib << 20))" /dev/urandom >"$work/src/f.bin"
fi
timer=()
[[ -x /usr/bin/time ]] && timer=(/usr/bin/time -f "peak RSS %M KiB, %e s elapsed, %U s user, %S s sys")

source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"

"${timer[@]}" "$bin" recv --out "$work/out" --listen "$ip" -p "$port" --once --json ${FLAGS:-} >"$work/recv.json" 2>"$work/recv.err" &
rpid=$!
wait_line "$work/recv.err" "$rpid"
t0="$(date +%s.%N)"
"${timer[@]}" "$bin" send "$work/src/f.bin" "$ip:$port" --chunk "$chunk" --json ${FLAGS:-} >"$work/send.json" 2>"$work/send.err"
t1="$(date +%s.%N)"
ours_cmd="$(python3 -c "print($mib / ($t1 - $t0))")"
wait "$rpid"
cmp "$work/src/f.bin" "$work/out/f.bin"
echo "sender:   $(cat "$work/send.json")"; grep -h "peak RSS" "$work/send.err" || true
echo "receiver: $(cat "$work/recv.json")"; grep -h "peak RSS" "$work/recv.err" || true
# The data phase (first chunk to the verified ACK), timed like perftest's transfers.
ours="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["data_mib_s"])' "$work/send.json")"
rm -f "$work/out/f.bin"

# send --streams N: one transfer over N connections (stripes of the one file); rate of the whole
# command and of the data phase. Both rails: stream i on rxe(i mod 2) to that rail's address.
streams_run() { # LABEL N SEND-ARGS...
  local label="$1" n="$2"; shift 2
  local p=$((port + 10 + n))
  "$bin" recv --out "$work/out" --listen -p "$p" --once --json ${FLAGS:-} >"$work/srecv.json" 2>"$work/srecv.err" &
  local rp=$!
  wait_line "$work/srecv.err" "$rp"
  local a b
  a="$(date +%s.%N)"
  "$bin" send "$work/src/f.bin" "$@" --streams "$n" --chunk "$chunk" --json ${FLAGS:-} \
    >"$work/ssend.json" 2>"$work/ssend.err" || { cat "$work/ssend.err" >&2; return 1; }
  b="$(date +%s.%N)"
  wait "$rp"
  cmp "$work/src/f.bin" "$work/out/f.bin"
  rm -f "$work/out/f.bin"
  python3 - "$label" "$n" "$mib" "$a" "$b" "$work/ssend.json" <<'PY'
import json, sys
label, n, mib, a, b, f = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
j = json.load(open(f))
print(f"streams {label:<10} N={n}: whole command {mib / (b - a):7.2f} MiB/s, data phase {j.get('data_mib_s', 0):7.2f} MiB/s")
PY
}
for n in ${STREAMS-1 2 4}; do
  streams_run rxe0 "$n" "$ip:$((port + 10 + n))"
done
if [[ -e /sys/class/infiniband/rxe1 ]]; then
  for n in ${STREAMS-1 2 4}; do
    [[ "$n" -ge 2 ]] || continue
    c0="$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts)"
    c1="$(cat /sys/class/infiniband/rxe1/ports/1/hw_counters/sent_pkts)"
    streams_run "rxe0+rxe1" "$n" "$ip:$((port + 10 + n)),198.18.1.1:$((port + 10 + n))" -d rxe0,rxe1
    echo "  sent_pkts: rxe0 +$(($(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts) - c0)), rxe1 +$(($(cat /sys/class/infiniband/rxe1/ports/1/hw_counters/sent_pkts) - c1))"
  done
fi
[[ -n "${NO_ANCHOR:-}" ]] && exit 0

# rcopy: the server keeps running after a copy; its rsocket listens through rdma_cm (not a TCP
# socket), so readiness is its cm_id in LISTEN state on our port.
(cd "$work/rcopy" && exec rcopy -p 7427) >"$work/rcopy.server" 2>&1 &
cpid=$!
wait_until "rcopy to listen" "$cpid" cm_listening 7427
t0="$(date +%s.%N)"
rcopy "$work/src/f.bin" "$ip:$work/rcopy/f.bin" -p 7427 >"$work/rcopy.client" 2>&1
t1="$(date +%s.%N)"
kill "$cpid" 2>/dev/null || true
wait "$cpid" 2>/dev/null || true
cmp "$work/src/f.bin" "$work/rcopy/f.bin"
rcopy_mib_s="$(python3 -c "print($mib / ($t1 - $t0))")"
echo "rcopy:    $mib MiB in $(python3 -c "print(round($t1 - $t0, 3))") s = $rcopy_mib_s MiB/s (whole command, incl. connect)"

ib_write_bw -d rxe0 -x 1 -F -s "$chunk" -n 200 -p 18611 >"$work/ibw.server" 2>&1 &
spid=$!
wait_tcp 18611 "$spid"
"${timer[@]}" ib_write_bw -d rxe0 -x 1 -F -s "$chunk" -n 200 -p 18611 "$ip" >"$work/ibw.client" 2>&1
wait "$spid" || true
grep -h "peak RSS" "$work/ibw.client" | sed 's/^/ib_write_bw client: /' || true
grep -A1 "#bytes" "$work/ibw.client"
ibw="$(awk '/#bytes/ { getline; print $4 }' "$work/ibw.client")"
python3 - "$ours" "$ours_cmd" "$rcopy_mib_s" "$ibw" "$mib" "$chunk" "$(nproc)" "$work" <<'PY'
import re, sys
ours, ours_cmd, rcopy, ibw, mib, chunk, ncpu = map(float, sys.argv[1:8])
work = sys.argv[8]
# Where the guest's CPU went (/usr/bin/time of each process): user + system seconds per GiB, and
# how busy the guest's vCPUs were while rdmaxfer ran.
def times(f):
    m = re.search(r"peak RSS (\d+) KiB, ([\d.]+) s elapsed, ([\d.]+) s user, ([\d.]+) s sys", open(f).read())
    return None if m is None else tuple(map(float, m.groups()[1:]))
s, r, w = times(f"{work}/send.err"), times(f"{work}/recv.err"), times(f"{work}/ibw.client")
if s and r:
    gib = mib / 1024
    print(f"CPU s/GiB: sender {(s[1] + s[2]) / gib:.2f} (user {s[1] / gib:.2f}, sys {s[2] / gib:.2f}), "
          f"receiver {(r[1] + r[2]) / gib:.2f} (user {r[1] / gib:.2f}, sys {r[2] / gib:.2f})")
    busy = (s[1] + s[2] + r[1] + r[2]) / (s[0] * ncpu)
    print(f"guest CPU busy during the send: {busy:.0%} of {ncpu:.0f} vCPUs over {s[0]:.2f} s")
if w:
    g = 200 * chunk / 2**30
    print(f"ib_write_bw CPU s/GiB: {(w[1] + w[2]) / g:.2f} (user {w[1] / g:.2f}, sys {w[2] / g:.2f})")
# vs rcopy: both whole client commands (start, connect, copy, close); vs ib_write_bw: the data
# phase (first chunk to the receiver's verified ACK; perftest also leaves out its set-up).
print(f"file (whole command) {ours_cmd:.2f} MiB/s / rcopy {rcopy:.2f} MiB/s = {ours_cmd / rcopy:.2f}  (goal >= 1.2)")
print(f"file (data phase) {ours:.2f} MiB/s / ib_write_bw {ibw:.2f} MiB/s = {ours / ibw:.2f}  (goal >= 0.9)")
PY
