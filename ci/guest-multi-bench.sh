#!/usr/bin/env bash
# ci/guest-multi-bench.sh [SENDERS] [MIB] — runs INSIDE the guest (after `cargo build --release`):
# one `rdmaxfer recv` serving SENDERS (default 8) `rdmaxfer send`s at once, MIB MiB in all (default
# 128, split evenly), tmpfs → tmpfs, every file verified (BLAKE3 by the receiver, then cmp here);
# next to one sender moving the same MIB MiB alone to the same receiver in the same guest.
# Prints the aggregate rate, the single sender's rate and their ratio (goal >= 0.9). Both rates
# are whole commands (start, connect, transfer, verified ACK, close), wall clock.
# Extra rdmaxfer flags for both sides in $FLAGS (e.g. FLAGS=--poll).
set -euo pipefail
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
n="${1:-8}"
mib="${2:-128}"
ip=198.18.0.1
port=18620
work="$(mktemp -d /tmp/rdmaxfer-mbench.XXXXXX)"
rpid=
cleanup() {
  if [[ -n "$rpid" ]]; then
    kill "$rpid" 2>/dev/null || true
    wait "$rpid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
mkdir -p "$work/src" "$work/out"
each=$(((mib << 20) / n))
head -c "$((mib << 20))" /dev/urandom >"$work/src/one.bin"
for ((i = 0; i < n; i++)); do
  head -c "$each" /dev/urandom >"$work/src/part$i.bin"
done

"$bin" recv --out "$work/out" --listen "$ip" -p "$port" --json --max-sessions "$n" ${FLAGS:-} \
  >"$work/recv.json" 2>"$work/recv.err" &
rpid=$!
wait_line "$work/recv.err" "$rpid"

t0="$(date +%s.%N)"
"$bin" send "$work/src/one.bin" "$ip:$port" --json ${FLAGS:-} >"$work/one.json" 2>"$work/one.err"
t1="$(date +%s.%N)"
cmp "$work/src/one.bin" "$work/out/one.bin"
rm -f "$work/out/one.bin"

pids=()
t2="$(date +%s.%N)"
for ((i = 0; i < n; i++)); do
  "$bin" send "$work/src/part$i.bin" "$ip:$port" --json ${FLAGS:-} \
    >"$work/part$i.json" 2>"$work/part$i.err" &
  pids+=($!)
done
fail=0
for ((i = 0; i < n; i++)); do
  wait "${pids[$i]}" || { fail=1; echo "!! sender $i failed: $(cat "$work/part$i.err")" >&2; }
done
t3="$(date +%s.%N)"
[[ "$fail" == 0 ]]
for ((i = 0; i < n; i++)); do
  cmp "$work/src/part$i.bin" "$work/out/part$i.bin"
done
# Every session's JSON line is complete on its own line and ok (1 + n sessions).
python3 - "$work/recv.json" "$((n + 1))" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(lines) == int(sys.argv[2]), f"{len(lines)} receiver JSON lines, expected {sys.argv[2]}"
assert all(l["result"] == "ok" for l in lines), lines
print(f"receiver: {len(lines)} sessions, all ok (one JSON line each)")
# Where a concurrent session's time goes: the receiver times each session from its admission.
many = [l["seconds"] for l in lines[1:]]
print(f"receiver: one sender's session {lines[0]['seconds']:.2f} s; the concurrent sessions "
      f"{min(many):.2f}..{max(many):.2f} s each")
PY
python3 - "$mib" "$n" "$t0" "$t1" "$t2" "$t3" "$work" <<'PY'
import json, sys
mib, n = float(sys.argv[1]), int(sys.argv[2])
t0, t1, t2, t3 = map(float, sys.argv[3:7])
work = sys.argv[7]
one = mib / (t1 - t0)
agg = mib / (t3 - t2)
one_data = json.load(open(f"{work}/one.json"))["data_mib_s"]
parts = [json.load(open(f"{work}/part{i}.json"))["data_mib_s"] for i in range(n)]
print(f"one sender:   {mib:.0f} MiB in {t1 - t0:.2f} s = {one:.1f} MiB/s (data phase {one_data:.1f} MiB/s)")
print(f"{n} senders:    {mib:.0f} MiB in {t3 - t2:.2f} s = {agg:.1f} MiB/s aggregate "
      f"(data phase per sender {min(parts):.1f}..{max(parts):.1f} MiB/s)")
print(f"aggregate / one sender = {agg / one:.2f}  (goal >= 0.9)")
PY
