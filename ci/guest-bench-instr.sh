#!/usr/bin/env bash
# ci/guest-bench-instr.sh OUTDIR [REPS] — runs INSIDE the guest: user-space instructions per
# ping-pong round trip, rdmaxfer pingpong (RDMA CM) next to ibv_rc_pingpong, and per 64 KiB work
# request, rdmaxfer bench write / send (--oob) next to ib_write_bw / ib_send_bw, counted by
# valgrind's callgrind. Each side of each tool runs with -n 1000 and with -n 3000 under callgrind
# (the other side runs natively), REPS times each (default 2); (min Ir(3000) - min Ir(1000)) / 2000
# is that side's count per round trip, with start-up and teardown cancelled out (and rdmaxfer's
# statistics after the loop left out). The bandwidth tools run with -n 1000 and -n 2000: the
# difference / 1000 is the count per work request (message), each side's. Unlike timings, these counts do not depend on how fast the
# emulated guest runs, except for busy-poll spins: a stall of the other side adds spins, and the
# minimum over the repetitions leaves such runs out. Soft-RoCE's protocol work runs in the kernel
# and is not counted.
# INSTR_PARTS="pp bw" (default) selects the ping-pong and/or bandwidth part.
# Needs valgrind and the release binary: cargo build --release --bin rdmaxfer (on the host).
set -euo pipefail
out="${1:-target/bench/instr}"
reps="${2:-2}"
mkdir -p "$out"
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
[[ -x "$bin" ]] || { echo "!! $bin missing: cargo build --release --bin rdmaxfer"; exit 2; }
command -v valgrind >/dev/null || { echo "!! valgrind missing: apt-get install valgrind (ci/setup.sh does)"; exit 2; }
ip=198.18.0.1
port=18700
fails=0
tsv="$out/instr.tsv"
printf 'tool\tsize\tside\titers\trep\tinstructions\n' >"$tsv"

source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"

# counted FILE — the profile's total instruction count, less rdmaxfer's statistics after the
# timed loop (pingpong::finish sorts the round-trip samples: work that grows with -n but that
# ibv_rc_pingpong, which keeps no samples, does not do).
counted() {
  local all stats
  all="$(awk '/^(summary|totals):/ {print $2; exit}' "$1")"
  stats="$(callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk '/xfer::pingpong::finish / {gsub(",", "", $1); print $1; exit}')"
  echo $((all - ${stats:-0}))
}

# run TOOL SIZE SIDE N REP — one run with SIDE (client|server) of TOOL under callgrind.
run() {
  local tool="$1" size="$2" side="$3" n="$4" r="$5" name spid src=0 crc=0
  name="$out/$tool.$size.$side.$n.$r"
  port=$((port + 1))
  local s=() c=() sv=() cv=() vg=(valgrind -q --tool=callgrind --callgrind-out-file="$name.callgrind")
  if [[ $tool == rdmaxfer ]]; then
    s=("$bin" pingpong --listen "$ip" -p "$port" --count 1 -s "$size" -n "$n" --timeout 120)
    c=("$bin" pingpong "$ip" -p "$port" -s "$size" -n "$n" --timeout 120)
  else
    s=(ibv_rc_pingpong -d rxe0 -g 1 -s "$size" -n "$n" -p "$port")
    c=(ibv_rc_pingpong -d rxe0 -g 1 -s "$size" -n "$n" -p "$port" "$ip")
  fi
  if [[ $side == server ]]; then sv=("${vg[@]}"); else cv=("${vg[@]}"); fi
  timeout 300 "${sv[@]}" "${s[@]}" >"$name.server.txt" 2>&1 &
  spid=$!
  if [[ $tool == rdmaxfer ]]; then
    wait_line "$name.server.txt" "$spid" || { fails=$((fails + 1)); return 1; }
  else
    wait_tcp "$port" "$spid" || { fails=$((fails + 1)); return 1; }
  fi
  timeout 300 "${cv[@]}" "${c[@]}" >"$name.client.txt" 2>&1 || crc=$?
  wait "$spid" || src=$?
  if ((src || crc)); then
    echo "!! $tool -s $size ($side under callgrind, -n $n): server rc $src, client rc $crc"
    tail -n 5 "$name".*.txt
    fails=$((fails + 1))
    return 1
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$size" "$side" "$n" "$r" "$(counted "$name.callgrind")" >>"$tsv"
}

# run_bw TOOL OP SIDE N REP — one bandwidth run (64 KiB messages) with SIDE under callgrind;
# TOOL is perftest (ib_OP_bw) or rdmaxfer (bench OP --oob, perftest's TCP exchange). OP send-e is
# SEND with both sides sleeping on completion events (ib_send_bw -e, bench send --event): no
# busy-poll spins in the count, which in poll mode measure how long the kernel took, not the
# work per message (perftest has events for SEND only).
run_bw() {
  local tool="$1" op="$2" side="$3" n="$4" r="$5" name spid src=0 crc=0 ev=()
  name="$out/bw.$tool.$op.$side.$n.$r"
  port=$((port + 1))
  local s=() c=() sv=() cv=() vg=(valgrind -q --tool=callgrind --callgrind-out-file="$name.callgrind")
  if [[ $op == send-e ]]; then
    op=send
    if [[ $tool == rdmaxfer ]]; then ev=(--event); else ev=(-e); fi
  fi
  if [[ $tool == rdmaxfer ]]; then
    s=("$bin" bench "$op" -d rxe0 --oob -s 65536 -n "$n" "${ev[@]}" --listen "$ip" --count 1 -p "$port")
    c=("$bin" bench "$op" -d rxe0 --oob -s 65536 -n "$n" "${ev[@]}" -p "$port" "$ip")
  else
    s=("ib_${op}_bw" -d rxe0 -x 1 -F -s 65536 -n "$n" "${ev[@]}" -p "$port")
    c=("ib_${op}_bw" -d rxe0 -x 1 -F -s 65536 -n "$n" "${ev[@]}" -p "$port" "$ip")
  fi
  if [[ $side == server ]]; then sv=("${vg[@]}"); else cv=("${vg[@]}"); fi
  timeout 300 "${sv[@]}" "${s[@]}" >"$name.server.txt" 2>&1 &
  spid=$!
  wait_tcp "$port" "$spid" || { fails=$((fails + 1)); return 1; }
  timeout 300 "${cv[@]}" "${c[@]}" >"$name.client.txt" 2>&1 || crc=$?
  wait "$spid" || src=$?
  if ((src || crc)); then
    echo "!! $tool $op (64 KiB, $side under callgrind, -n $n): server rc $src, client rc $crc"
    tail -n 5 "$name".*.txt
    fails=$((fails + 1))
    return 1
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$2" "$side" "$n" "$r" \
    "$(awk '/^(summary|totals):/ {print $2; exit}' "$name.callgrind")" >>"$bwtsv"
}

bwtsv="$out/instr-bw.tsv"
printf 'tool\top\tside\titers\trep\tinstructions\n' >"$bwtsv"

# INSTR_PARTS: which parts to run (default both): pp (ping-pong), bw (bandwidth).
parts=" ${INSTR_PARTS:-pp bw} "
for r in $(seq 1 "$reps"); do
  if [[ $parts == *" bw "* ]]; then
    for op in write send send-e; do
      for tool in perftest rdmaxfer; do
        for side in client server; do
          for n in 1000 2000; do
            run_bw "$tool" "$op" "$side" "$n" "$r" || true
          done
        done
      done
    done
  fi
  [[ $parts != *" pp "* ]] || for size in 2 4096; do
    for tool in ibv_rc_pingpong rdmaxfer; do
      for side in client server; do
        for n in 1000 3000; do
          run "$tool" "$size" "$side" "$n" "$r" || true
        done
      done
    done
  done
done

python3 - "$tsv" <<'PY' | tee "$out/instr-summary.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def least(tool, size, side, n):
    v = [int(r["instructions"]) for r in rows
         if (r["tool"], r["size"], r["side"], r["iters"]) == (tool, size, side, n)]
    return min(v) if v else None
def per_iter(tool, size, side):
    a, b = least(tool, size, side, "1000"), least(tool, size, side, "3000")
    return None if a is None or b is None else (b - a) / 2000
print("== user-space instructions per round trip (callgrind; (min Ir at -n 3000 - min Ir at -n 1000)")
print("   / 2000; rdmaxfer's statistics after the loop left out)")
print(f"{'size':>6} {'side':<7} {'ibv_rc_pingpong':>16} {'rdmaxfer':>10} {'ratio':>7}")
for size in ("2", "4096"):
    for side in ("client", "server"):
        a, r = per_iter("ibv_rc_pingpong", size, side), per_iter("rdmaxfer", size, side)
        f = lambda v: "n/a" if v is None else f"{v:.0f}"
        q = "n/a" if a is None or r is None or a <= 0 else f"{r / a:.2f}"
        print(f"{size:>6} {side:<7} {f(a):>16} {f(r):>10} {q:>7}")
PY
python3 - "$bwtsv" <<'PY' | tee -a "$out/instr-summary.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def least(tool, op, side, n):
    v = [int(r["instructions"]) for r in rows
         if (r["tool"], r["op"], r["side"], r["iters"]) == (tool, op, side, n)]
    return min(v) if v else None
def per_wr(tool, op, side):
    a, b = least(tool, op, side, "1000"), least(tool, op, side, "2000")
    return None if a is None or b is None else (b - a) / 1000
print("== user-space instructions per 64 KiB work request (callgrind; (min Ir at -n 2000 - min Ir")
print("   at -n 1000) / 1000). write and send busy-poll: their counts are mostly empty polls while")
print("   the kernel moves the data; send-e sleeps on events on both sides (ib_send_bw -e, --event)")
print(f"{'op':>6} {'side':<7} {'ib_*_bw':>16} {'rdmaxfer':>10} {'ratio':>7}")
for op in ("write", "send", "send-e"):
    for side in ("client", "server"):
        a, r = per_wr("perftest", op, side), per_wr("rdmaxfer", op, side)
        f = lambda v: "n/a" if v is None else f"{v:.0f}"
        q = "n/a" if a is None or r is None or a <= 0 else f"{r / a:.2f}"
        print(f"{op:>6} {side:<7} {f(a):>16} {f(r):>10} {q:>7}")
PY
echo "== instruction bench done: $fails failed run(s)"
exit $((fails > 0))
