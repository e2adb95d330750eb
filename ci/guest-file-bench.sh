#!/usr/bin/env bash
# ci/guest-file-bench.sh [OUTDIR] [ROUNDS] [MIB] [CHUNK] — runs INSIDE the guest (ci/file-bench.sh
# boots one): a MIB-MiB (default 128) random file tmpfs → tmpfs, verified, in ROUNDS (default 3)
# interleaved rounds of these rows, each `rdmaxfer send` → `recv --once` with /usr/bin/time on both:
#   default        send as a user runs it (default --streams and --verify)
#   N=1 N=2 N=4    --streams N on rxe0
#   rails N=2/N=4  --streams N over rxe0 + rxe1 (-d rxe0,rxe1; rxe counters show both carry traffic)
#   xxh3 blake3    default N, --verify xxh3 / blake3
# next to the anchors rcopy (whole command; server and client CPU) and ib_write_bw at CHUNK
# (default 1 MiB). Then, once, peak RSS of every N for a 16 MiB and a 1 GiB SPARSE source.
# Prints the median and spread (min..max) of every figure and of the per-round ratios (goals):
# data phase / ib_write_bw (>= 0.9), whole / rcopy (>= 1.2), N / N=1 data phase (>= 0.95),
# CPU s/GiB sender + receiver / rcopy client + server (<= 1.2). Raw figures: OUTDIR/file-runs.tsv.
# Env: FLAGS (extra rdmaxfer flags for both sides), NO_RSS=1 (skip the RSS part), RSS_BIG_MIB (1024:
# the big sparse source), ROWS (a subset of the steps, e.g. ROWS="n1 n2 rcopy ibw"), BIN_B (another
# rdmaxfer binary, e.g. of the base branch, for A/B runs in one guest: row "B" sends and receives
# with it as row "default" does with RDMAXFER_BIN; add it to ROWS, e.g. ROWS="default B rcopy").
set -euo pipefail
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then # the former interface was [MIB] [CHUNK]
  echo "!! usage: ci/guest-file-bench.sh [OUTDIR] [ROUNDS] [MIB] [CHUNK] (or ci/file-bench.sh [ROUNDS] [MIB] on the host)" >&2
  exit 2
fi
out="$(realpath -m "${1:-target/bench/file}")"
rounds="${2:-3}"
mib="${3:-128}"
chunk="${4:-1048576}"
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
[[ -x "$bin" ]] || { echo "!! $bin missing: cargo build --release --features cli --bin rdmaxfer"; exit 2; }
[[ -x /usr/bin/time ]] || { echo "!! /usr/bin/time missing (CPU and RSS figures need it)"; exit 2; }
ip=198.18.0.1
ip1=198.18.1.1
port=18700
fails=0
mkdir -p "$out"
tsv="$out/file-runs.tsv"
printf 'round\trow\tmetric\tvalue\n' >"$tsv"
work="$(mktemp -d /tmp/rdmaxfer-fbench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/out" "$work/rcopy"
head -c "$((mib << 20))" /dev/urandom >"$work/src/f.bin"
timer=(/usr/bin/time -f "peak RSS %M KiB, %e s elapsed, %U s user, %S s sys")
rails=0
[[ -e /sys/class/infiniband/rxe1 ]] && rails=1

source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$tsv"; }
sent_pkts() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/sent_pkts"; }

# xfer ROUND ROW SRC MIB SEND-ARGS... — one verified transfer of SRC (MIB MiB), receiver --once;
# records whole-command and data-phase rates, CPU s/GiB of both sides, peak RSS, the number of
# connections the receiver served and the time spent outside the data phase.
xfer() {
  local r="$1" row="$2" src="$3" m="$4" rp a b src_rc=0 rrc=0 tag
  shift 4
  tag="$out/$row.$r"
  tag="${tag// /_}"
  port=$((port + 1))
  timeout 600 "${timer[@]}" "${xbin:-$bin}" recv --out "$work/out" --listen -p "$port" --once --json ${FLAGS:-} \
    >"$tag.recv.json" 2>"$tag.recv.err" &
  rp=$!
  wait_line "$tag.recv.err" "$rp" || { echo "!! $row: receiver never listened"; cat "$tag.recv.err"; fails=$((fails + 1)); return 1; }
  a="$(date +%s.%N)"
  timeout 600 "${timer[@]}" "${xbin:-$bin}" send "$src" "$@" --chunk "$chunk" --json ${FLAGS:-} \
    >"$tag.send.json" 2>"$tag.send.err" || src_rc=$?
  b="$(date +%s.%N)"
  wait "$rp" || rrc=$?
  if ((src_rc || rrc)); then
    echo "!! $row round $r: sender rc $src_rc, receiver rc $rrc"; tail -n 5 "$tag.send.err" "$tag.recv.err"
    fails=$((fails + 1)); rm -f "$work/out/"*; return 1
  fi
  # A sparse source is checked by the transfer's own verification (cmp would read 2 GiB).
  if [[ "$src" == "$work/src/f.bin" ]] && ! cmp -s "$src" "$work/out/$(basename "$src")"; then
    echo "!! $row round $r: received file differs"; fails=$((fails + 1))
  fi
  rm -f "$work/out/"*
  python3 - "$r" "$row" "$m" "$a" "$b" "$tag" >>"$tsv" <<'PY'
import json, re, sys
r, row, mib, a, b, tag = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
def times(f):
    m = re.search(r"peak RSS (\d+) KiB, ([\d.]+) s elapsed, ([\d.]+) s user, ([\d.]+) s sys", open(f).read())
    return None if m is None else tuple(map(float, m.groups()))
out = []
s = json.load(open(f"{tag}.send.json"))
whole = b - a
out += [("whole_mib_s", mib / whole), ("data_mib_s", s.get("data_mib_s", 0)),
        ("outside_data_s", whole - s.get("data_seconds", 0))]
out.append(("streams", sum(1 for l in open(f"{tag}.recv.json") if l.startswith("{"))))
gib = mib / 1024
for side, f in (("send", f"{tag}.send.err"), ("recv", f"{tag}.recv.err")):
    t = times(f)
    if t:
        out += [(f"{side}_cpu_s_gib", (t[2] + t[3]) / gib), (f"{side}_sys_s_gib", t[3] / gib),
                (f"{side}_rss_kib", t[0])]
for k, v in out:
    print(f"{r}\t{row}\t{k}\t{v}")
PY
}

# rcopy ROUND — the rsockets copy tool: server (cwd $work/rcopy) and client both under
# /usr/bin/time; the server keeps running after a copy: SIGTERM makes time report it.
step_rcopy() {
  local r="$1" tp cp a b
  rm -f "$work/rcopy/f.bin"
  (cd "$work/rcopy" && exec "${timer[@]}" rcopy -p 7427) >"$out/rcopy.$r.server" 2>&1 &
  tp=$!
  wait_until "rcopy to listen" "$tp" cm_listening 7427 || { fails=$((fails + 1)); return 1; }
  a="$(date +%s.%N)"
  "${timer[@]}" rcopy "$work/src/f.bin" "$ip:$work/rcopy/f.bin" -p 7427 >"$out/rcopy.$r.client" 2>&1 || { echo "!! rcopy round $r failed"; fails=$((fails + 1)); }
  b="$(date +%s.%N)"
  cp="$(pgrep -P "$tp" -x rcopy || true)"
  [[ -n "$cp" ]] && kill "$cp" 2>/dev/null
  wait "$tp" 2>/dev/null || true
  cmp -s "$work/src/f.bin" "$work/rcopy/f.bin" || { echo "!! rcopy round $r: copy differs"; fails=$((fails + 1)); return 1; }
  python3 - "$r" "$mib" "$a" "$b" "$out/rcopy.$r" >>"$tsv" <<'PY'
import re, sys
r, mib, a, b, tag = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
def cpu(f):
    m = re.search(r"peak RSS (\d+) KiB, ([\d.]+) s elapsed, ([\d.]+) s user, ([\d.]+) s sys", open(f).read())
    return None if m is None else float(m.group(3)) + float(m.group(4))
print(f"{r}\trcopy\twhole_mib_s\t{mib / (b - a)}")
c, s = cpu(f"{tag}.client"), cpu(f"{tag}.server")
if c is not None and s is not None:
    print(f"{r}\trcopy\tcpu_s_gib\t{(c + s) / (mib / 1024)}")
    print(f"{r}\trcopy\tclient_cpu_s_gib\t{c / (mib / 1024)}")
PY
}

step_ibw() {
  local r="$1" sp
  port=$((port + 1))
  ib_write_bw -d rxe0 -x 1 -F -s "$chunk" -n 200 -p "$port" >"$out/ibw.$r.server" 2>&1 &
  sp=$!
  wait_tcp "$port" "$sp" || { fails=$((fails + 1)); return 1; }
  "${timer[@]}" ib_write_bw -d rxe0 -x 1 -F -s "$chunk" -n 200 -p "$port" "$ip" >"$out/ibw.$r.client" 2>&1 || true
  wait "$sp" || true
  local bw
  bw="$(awk '/#bytes/ { getline; print $4 }' "$out/ibw.$r.client")"
  [[ -n "$bw" ]] || { echo "!! ib_write_bw round $r: no figure"; fails=$((fails + 1)); return 1; }
  record "$r" ib_write_bw bw_mib_s "$bw"
  python3 - "$r" "$((200 * chunk))" "$out/ibw.$r.client" >>"$tsv" <<'PY'
import re, sys
m = re.search(r"peak RSS (\d+) KiB, ([\d.]+) s elapsed, ([\d.]+) s user, ([\d.]+) s sys", open(sys.argv[3]).read())
if m:
    print(f"{sys.argv[1]}\tib_write_bw\tclient_cpu_s_gib\t{(float(m.group(3)) + float(m.group(4))) / (int(sys.argv[2]) / 2**30)}")
PY
}

step_rails() {
  local r="$1" n="$2" c0 c1
  c0="$(sent_pkts rxe0)" c1="$(sent_pkts rxe1)"
  xfer "$r" "rails N=$n" "$work/src/f.bin" "$mib" "$ip:$((port + 1)),$ip1:$((port + 1))" --streams "$n" -d rxe0,rxe1 || return 0
  record "$r" "rails N=$n" rxe0_sent_pkts "$(($(sent_pkts rxe0) - c0))"
  record "$r" "rails N=$n" rxe1_sent_pkts "$(($(sent_pkts rxe1) - c1))"
}

# One round: every row once; the order rotates with the round so no row always runs first.
steps=(default n1 n2 n4 rails2 rails4 xxh3 blake3 rcopy ibw)
[[ -n "${ROWS:-}" ]] && read -r -a steps <<<"$ROWS"
run_step() {
  local r="$1" target="$ip:$((port + 1))"
  case "$2" in
    default) xfer "$r" default "$work/src/f.bin" "$mib" "$target" || true ;;
    B) if [[ -x "${BIN_B:-}" ]]; then xbin="$BIN_B" xfer "$r" B "$work/src/f.bin" "$mib" "$target" || true; else echo "!! row B needs BIN_B"; fi ;;
    n[0-9]*) xfer "$r" "N=${2#n}" "$work/src/f.bin" "$mib" "$target" --streams "${2#n}" || true ;;
    rails[0-9]*) if ((rails)); then step_rails "$r" "${2#rails}"; fi ;;
    xxh3 | blake3) xfer "$r" "$2" "$work/src/f.bin" "$mib" "$target" --verify "$2" || true ;;
    rcopy) step_rcopy "$r" || true ;;
    ibw) step_ibw "$r" || true ;;
  esac
}
((rails)) || echo "   (no rxe1: the rails rows are skipped)"
[[ -n "${BIN_B:-}" ]] && echo "   row B: $BIN_B (row default: $bin)"
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r/$rounds ($(date +%T))"
  k=$(((r - 1) % ${#steps[@]}))
  for ((i = 0; i < ${#steps[@]}; i++)); do
    run_step "$r" "${steps[$(((i + k) % ${#steps[@]}))]}"
  done
done

# Peak RSS against file size: 16 MiB vs 1 GiB sparse sources, every N (once: RSS is not noisy).
if [[ -z "${NO_RSS:-}" ]]; then
  big="${RSS_BIG_MIB:-1024}"
  echo "== peak RSS, 16 MiB vs $big MiB sparse ($(date +%T))"
  truncate -s 16M "$work/src/s16.bin"
  truncate -s "${big}M" "$work/src/s$big.bin"
  for n in 1 2 4; do
    for m in 16 "$big"; do
      xfer 0 "rss N=$n ${m}M" "$work/src/s$m.bin" "$m" "$ip:$((port + 1))" --streams "$n" || true
    done
  done
fi

python3 - "$tsv" "$mib" "$(nproc)" "${RSS_BIG_MIB:-1024}" <<'PY' | tee "$out/file-summary.txt"
import collections, statistics, sys
tsv, mib, ncpu, big = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
v = collections.defaultdict(dict)  # (row, metric) -> {round: value}
for line in open(tsv).read().splitlines()[1:]:
    r, row, k, x = line.split("\t")
    v[(row, k)][r] = float(x)

def spread(xs, f="{:.2f}"):
    xs = sorted(xs)
    return f"{f.format(statistics.median(xs))} ({f.format(xs[0])}..{f.format(xs[-1])})" if xs else "missing"

def per_round(num, den, fn=lambda a, b: a / b):
    """The per-round ratios of two figures measured in the same round."""
    return [fn(num[r], den[r]) for r in num if r in den and den[r]]

print(f"== file transfer, {mib:.0f} MiB tmpfs -> tmpfs in one guest ({ncpu} vCPUs); median (min..max) over rounds")
ibw, rc = v[("ib_write_bw", "bw_mib_s")], v[("rcopy", "whole_mib_s")]
rc_cpu = v[("rcopy", "cpu_s_gib")]
print(f"ib_write_bw {spread(ibw.values())} MiB/s (client CPU {spread(v[('ib_write_bw', 'client_cpu_s_gib')].values())} s/GiB); rcopy whole command {spread(rc.values())} MiB/s, "
      f"CPU client + server {spread(rc_cpu.values())} s/GiB (client {spread(v[('rcopy', 'client_cpu_s_gib')].values())})")
rows = [r for r in dict.fromkeys(row for row, _ in v) if r not in ("ib_write_bw", "rcopy") and not r.startswith("rss")]
n1 = v[("N=1", "data_mib_s")]
for row in rows:
    g = lambda k: v[(row, k)]
    cpu = {r: g("send_cpu_s_gib")[r] + g("recv_cpu_s_gib")[r] for r in g("send_cpu_s_gib") if r in g("recv_cpu_s_gib")}
    print(f"-- {row} (streams served: {spread(g('streams').values(), '{:.0f}')})")
    print(f"   data phase {spread(g('data_mib_s').values())} MiB/s, whole command {spread(g('whole_mib_s').values())} MiB/s, "
          f"outside the data phase {spread(g('outside_data_s').values())} s")
    print(f"   CPU s/GiB sender {spread(g('send_cpu_s_gib').values())} (sys {spread(g('send_sys_s_gib').values())}), "
          f"receiver {spread(g('recv_cpu_s_gib').values())} (sys {spread(g('recv_sys_s_gib').values())}); "
          f"peak RSS sender {spread(g('send_rss_kib').values(), '{:.0f}')} KiB, receiver {spread(g('recv_rss_kib').values(), '{:.0f}')} KiB")
    print(f"   data / ib_write_bw {spread(per_round(g('data_mib_s'), ibw), '{:.3f}')} (goal >= 0.9); "
          f"whole / rcopy {spread(per_round(g('whole_mib_s'), rc), '{:.3f}')} (goal >= 1.2); "
          f"CPU / rcopy {spread(per_round(cpu, rc_cpu), '{:.3f}')} (goal <= 1.2)")
    if row != "N=1" and row not in ("xxh3", "blake3"):
        print(f"   data / N=1 data {spread(per_round(g('data_mib_s'), n1), '{:.3f}')} (goal >= 0.95)")
    if (row, "rxe1_sent_pkts") in v:
        print(f"   rxe counters sent_pkts: rxe0 +{spread(g('rxe0_sent_pkts').values(), '{:.0f}')}, rxe1 +{spread(g('rxe1_sent_pkts').values(), '{:.0f}')}"
              f" (both carry traffic: {'yes' if min(g('rxe0_sent_pkts').values()) > 0 and min(g('rxe1_sent_pkts').values()) > 0 else 'NO'})")
rss = [r for r in dict.fromkeys(row for row, _ in v) if r.startswith("rss")]
if rss:
    print(f"-- peak RSS (KiB), sender / receiver: 16 MiB vs {big} MiB sparse source (flat in file size)")
    for n in (1, 2, 4):
        s16, r16, s1g, r1g = (v.get((f"rss N={n} {m}M", k), {}).get("0") for m in (16, big) for k in ("send_rss_kib", "recv_rss_kib"))
        f = lambda x: "missing" if x is None else f"{x:.0f}"
        print(f"   N={n}: 16 MiB {f(s16)} / {f(r16)}, {big} MiB {f(s1g)} / {f(r1g)}"
              + (f"  (big / small: sender {s1g / s16:.2f}, receiver {r1g / r16:.2f})" if None not in (s16, r16, s1g, r1g) else ""))
PY
echo "file bench: $fails failure(s); raw figures $tsv"
((fails == 0))
