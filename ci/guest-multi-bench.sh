#!/usr/bin/env bash
# ci/guest-multi-bench.sh [SENDERS] [MIB] [ROUNDS] — runs INSIDE the guest (after `cargo build
# --release`): one `rdmaxfer recv` serving SENDERS (default 8) `rdmaxfer send`s at once, MIB MiB
# in all (default 256, split evenly), tmpfs → tmpfs, every file verified (by the receiver with
# the default digest, XXH3-128, then cmp here); next to one sender moving the same MIB MiB alone to the same
# receiver in the same guest. ROUNDS (default 3) interleaved rounds of both; prints each round,
# then the medians and spread of the aggregate rate, the single sender's rate and their ratio
# (goal >= 0.9). Both rates are whole commands (start, connect, transfer, verified ACK, close),
# wall clock. Also printed: what a sender process costs before any data (a send of an empty
# file, median of 5), which SENDERS processes pay SENDERS times in the concurrent run (in this
# guest, exec and library loading read the host's root over 9p under TCG: far more than on a
# real host), and the receiver's own aggregate (first session start to last session end).
# Extra rdmaxfer flags for both sides in $FLAGS (e.g. FLAGS=--poll).
set -euo pipefail
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
n="${1:-8}"
mib="${2:-256}"
rounds="${3:-3}"
ip=198.18.0.1
port=18620
work="$(mktemp -d /tmp/rdmaxfer-mbench.XXXXXX)"
rpid=
cleanup() {
  local st=$?
  if [[ "$st" != 0 && -f "$work/recv.err" ]]; then
    echo "!! the receiver's last lines:" >&2
    tail -n 20 "$work/recv.err" >&2
  fi
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
: >"$work/src/empty.bin"

"$bin" recv --out "$work/out" --listen "$ip" -p "$port" --json --max-sessions "$((n + 1))" --force \
  ${FLAGS:-} >"$work/recv.json" 2>"$work/recv.err" &
rpid=$!
wait_line "$work/recv.err" "$rpid"

now() { date +%s.%N; }
: >"$work/times"
for ((k = 0; k < 5; k++)); do
  a="$(now)"
  "$bin" send "$work/src/empty.bin" "$ip:$port" ${FLAGS:-} >/dev/null 2>"$work/empty.err"
  echo "empty $a $(now)" >>"$work/times"
done
for ((r = 1; r <= rounds; r++)); do
  a="$(now)"
  "$bin" send "$work/src/one.bin" "$ip:$port" --json --streams 1 ${FLAGS:-} >"$work/one.json" 2>"$work/one.err"
  b="$(now)"
  cmp "$work/src/one.bin" "$work/out/one.bin"
  rm -f "$work/out/one.bin"
  echo "one $a $b" >>"$work/times"

  pids=()
  a="$(now)"
  for ((i = 0; i < n; i++)); do
    "$bin" send "$work/src/part$i.bin" "$ip:$port" --json --streams 1 ${FLAGS:-} \
      >"$work/part$i.json" 2>"$work/part$i.err" &
    pids+=($!)
  done
  fail=0
  for ((i = 0; i < n; i++)); do
    wait "${pids[$i]}" || { fail=1; echo "!! sender $i failed: $(cat "$work/part$i.err")" >&2; }
  done
  b="$(now)"
  [[ "$fail" == 0 ]]
  for ((i = 0; i < n; i++)); do
    cmp "$work/src/part$i.bin" "$work/out/part$i.bin"
    rm -f "$work/out/part$i.bin"
  done
  echo "many $a $b" >>"$work/times"
done

python3 - "$mib" "$n" "$rounds" "$work" <<'PY'
import json, statistics as st, sys
mib, n, rounds, work = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [l.split() for l in open(f"{work}/times")]
empty = [float(b) - float(a) for k, a, b in rows if k == "empty"]
one = [mib / (float(b) - float(a)) for k, a, b in rows if k == "one"]
many = [mib / (float(b) - float(a)) for k, a, b in rows if k == "many"]
# The receiver's JSON lines: 5 empty sends, then per round 1 + n sessions, all ok.
lines = [json.loads(l) for l in open(f"{work}/recv.json") if l.strip()]
assert len(lines) == 5 + rounds * (1 + n), f"{len(lines)} receiver JSON lines"
assert all(l["result"] == "ok" for l in lines), [l for l in lines if l["result"] != "ok"]
print(f"receiver: {len(lines)} sessions, all ok (one JSON line each); every file cmp-verified")
print(f"one sender process before any data (send of an empty file): median {st.median(empty):.2f} s "
      f"({min(empty):.2f}..{max(empty):.2f}), paid {n} times at once in the concurrent run")
ratios = []
for r in range(rounds):
    sess = lines[5 + r * (1 + n) + 1: 5 + (r + 1) * (1 + n)]
    ratios.append(many[r] / one[r])
    print(f"round {r + 1}: one sender {one[r]:.1f} MiB/s; {n} senders {many[r]:.1f} MiB/s aggregate; "
          f"ratio {ratios[-1]:.3f}; the receiver's sessions took {min(s['seconds'] for s in sess):.2f}.."
          f"{max(s['seconds'] for s in sess):.2f} s (one sender's: {lines[5 + r * (1 + n)]['seconds']:.2f} s)")
def m(v): return f"median {st.median(v):.3f} (spread {min(v):.3f}..{max(v):.3f})"
print(f"one sender:  {mib:.0f} MiB, MiB/s {m(one)}")
print(f"{n} senders:   {mib:.0f} MiB in all, aggregate MiB/s {m(many)}")
print(f"aggregate / one sender: {m(ratios)}  (goal >= 0.9)")
PY
