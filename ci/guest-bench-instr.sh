#!/usr/bin/env bash
# ci/guest-bench-instr.sh OUTDIR [REPS] — runs INSIDE the guest: user-space instructions per
# ping-pong round trip, rdmaxfer pingpong (RDMA CM) next to ibv_rc_pingpong, and per 64 KiB work
# request, rdmaxfer bench write / send (--oob) next to ib_write_bw / ib_send_bw, counted by
# valgrind's callgrind. Each side of each tool runs with -n 1000 and with -n 3000 under callgrind
# (the other side runs natively), REPS times each (default 2); (min Ir(3000) - min Ir(1000)) / 2000
# is that side's count per round trip, with start-up and teardown cancelled out (and rdmaxfer's
# statistics after the loop left out). The bandwidth tools run with -n 1000 and -n 2000: the
# difference / 1000 is the count per work request (message), each side's. Unlike timings, these
# counts do not depend on how fast the emulated guest runs, except for busy-poll spins: every
# empty look at the CQ counts, so a slow peer (a busy host) adds instructions; the minimum over
# the repetitions leaves the worst runs out, and the event-mode rows (both tools with -e: they
# sleep instead of spinning) have no spins at all. Soft-RoCE's protocol work runs in the kernel
# and is not counted.
# Ping-pong method: the goal (<= 1.3 x ibv_rc_pingpong) is read from the last ping-pong table,
# event mode at one sleep per round trip. An -e count still moves with how often a side sleeps,
# which is timing, not code (ibv_rc_pingpong wakes 1 to 2 times per round trip), at ~280
# instructions a sleep (ibv_req_notify_cq ~240, ibv_get_cq_event ~40); so each tool's sleep
# machinery (ci/callgrind-sleeps.py: the sleeps and sleep_instructions columns) is taken out of
# its difference and one sleep at its own mean cost per sleep put back.
# Bandwidth method: the per-work-request figure is the plain table's
# (min Ir at -n 2000 - min Ir at -n 1000) / 1000 with both tools' one-off reporting work out of
# it: perftest runs with -N (its peak bandwidth is an O(n^2) search over every (post, completion)
# pair: ~15,000 instructions per work request at these counts, which made earlier anchors
# meaningless), and its clock calibration (get_cpu_mhz, a gettimeofday loop of varying length,
# once per run: +-200 per work request of noise) is subtracted (the calib column, from
# ci/callgrind-polls.py); rdmaxfer's report keeps one mark per completion, not per message.
# send-e: both tools sleep on events (ib_send_bw -e, --event). write-e: ib_write_bw has no event
# mode, so it busy-polls while rdmaxfer sleeps (--event); its provider calls per work request are
# in the ex-poll table (1.0 when its polls are no more than its posts: then its count holds
# little spin, and what spin it holds counts for the anchor, against rdmaxfer). The goal
# (<= 1.3 x the anchor) is read from the send-e and write-e rows of the plain table; busy-poll
# rows (write, send) measure how long a side waited, not its work. The ex-poll table takes each
# profile's instructions inside the provider's most-called function out (a poll, or perftest's
# per-work-request post when it polls less often than it posts: then that row compares nothing).
# INSTR_PARTS="pp ppe bw" (default) selects the parts: ping-pong busy-polling, ping-pong with -e,
# bandwidth. INSTR_TOOLS="anchors rdmaxfer" (default) selects the tools: with only rdmaxfer the
# anchors (ibv_rc_pingpong, perftest) are not run again but their rows are read from
# OUTDIR.anchors/, which every run that counts them rewrites (count the anchors once, then
# iterate on rdmaxfer). INSTR_OPS="write-e send-e" (default) selects the bandwidth cases (also write, send),
# INSTR_SIZES="2 4096" (default) the ping-pong message sizes, INSTR_SIDES="client server"
# (default) the sides counted; INSTR_RUN_TIMEOUT (default 300 s) bounds each run (a loaded host
# needs more for the -n 2000 runs); INSTR_VG_EXTRA adds callgrind options (e.g. --dump-instr=yes
# for per-instruction counts). A row whose runs were skipped prints n/a.
# Needs valgrind and the release binary: cargo build --release --features cli --bin rdmaxfer (on the host).
set -euo pipefail
out="${1:-target/bench/instr}"
reps="${2:-2}"
mkdir -p "$out"
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
[[ -x "$bin" ]] || { echo "!! $bin missing: cargo build --release --features cli --bin rdmaxfer"; exit 2; }
command -v valgrind >/dev/null || { echo "!! valgrind missing: apt-get install valgrind (ci/setup.sh does)"; exit 2; }
ip=198.18.0.1
port=18700
fails=0
tsv="$out/instr.tsv"
printf 'tool\tcase\tside\titers\trep\tinstructions\tsleeps\tsleep_instructions\n' >"$tsv"

source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"

tools=" ${INSTR_TOOLS:-anchors rdmaxfer} "
anchors="$out.anchors" # the anchors' rows, kept across runs (OUTDIR itself is made afresh)
mkdir -p "$anchors"
# wanted TOOL — TOOL is selected (perftest and ibv_rc_pingpong are the anchors).
wanted() {
  case "$1" in
  rdmaxfer) [[ $tools == *" rdmaxfer "* ]] ;;
  *) [[ $tools == *" anchors "* || $tools == *" $1 "* ]] ;;
  esac
}

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

# measure NAME SIDE HOW — runs the server command s[@], then the client c[@] (arrays the caller
# sets), SIDE under callgrind (profile NAME.callgrind, output NAME.server.txt / .client.txt);
# HOW tells when the server is up: line (rdmaxfer's "listening on") or tcp (a listener on $port).
measure() {
  local name="$1" side="$2" how="$3" spid src=0 crc=0 sv=() cv=()
  local vg=(valgrind -q --tool=callgrind --callgrind-out-file="$name.callgrind" ${INSTR_VG_EXTRA:-})
  if [[ $side == server ]]; then sv=("${vg[@]}"); else cv=("${vg[@]}"); fi
  timeout "${INSTR_RUN_TIMEOUT:-300}" "${sv[@]}" "${s[@]}" >"$name.server.txt" 2>&1 &
  spid=$!
  if [[ $how == line ]]; then wait_line "$name.server.txt" "$spid"; else wait_tcp "$port" "$spid"; fi ||
    { fails=$((fails + 1)); return 1; }
  timeout "${INSTR_RUN_TIMEOUT:-300}" "${cv[@]}" "${c[@]}" >"$name.client.txt" 2>&1 || crc=$?
  wait "$spid" || src=$?
  if ((src || crc)); then
    echo "!! ${name##*/} ($side under callgrind): server rc $src, client rc $crc"
    tail -n 5 "$name".*.txt
    fails=$((fails + 1))
    return 1
  fi
}

# run TOOL SIZE SIDE N REP [-e] — one ping-pong run with SIDE (client|server) of TOOL under
# callgrind; with -e both sides sleep on completion events.
run() {
  local tool="$1" size="$2" side="$3" n="$4" r="$5" ev=("${@:6}") name label s=() c=() how=tcp
  label="$size${ev[*]:+-e}"
  name="$out/$tool.$label.$side.$n.$r"
  port=$((port + 1))
  if [[ $tool == rdmaxfer ]]; then
    s=("$bin" pingpong --listen "$ip" -p "$port" --count 1 -s "$size" -n "$n" "${ev[@]}" --timeout 120)
    c=("$bin" pingpong "$ip" -p "$port" -s "$size" -n "$n" "${ev[@]}" --timeout 120)
    how=line
  else
    s=(ibv_rc_pingpong -d rxe0 -g 1 -s "$size" -n "$n" "${ev[@]}" -p "$port")
    c=(ibv_rc_pingpong -d rxe0 -g 1 -s "$size" -n "$n" "${ev[@]}" -p "$port" "$ip")
  fi
  measure "$name" "$side" "$how" || return 1
  local all check sleeps
  all="$(counted "$name.callgrind")"
  # Wake-ups from the completion channel and the instructions of the sleep machinery (see the
  # header): "SLEEPS<tab>SLEEP_IR".
  sleeps="$(python3 "$(dirname "${BASH_SOURCE[0]}")/callgrind-sleeps.py" "$name.callgrind" | tr ' ' '\t')" ||
    sleeps=$'\t' # unknown
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$label" "$side" "$n" "$r" "$all" "$sleeps" >>"$tsv"
  if [[ $tool == rdmaxfer && $side == client ]]; then
    # The client's pong checks (xfer::pingpong::pong_check_full, kept out of line; a pong of at
    # most 8 bytes is its stamp, checked in line and counted): the goal lets the 4 KiB client add
    # them, so its count is also given without them.
    check="$(callgrind_annotate --inclusive=yes --threshold=100 "$name.callgrind" 2>/dev/null |
      awk '/xfer::pingpong::pong_check_full / {gsub(",", "", $1); print $1; exit}')"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' rdmaxfer-nocheck "$label" "$side" "$n" "$r" \
      "$((all - ${check:-0}))" "$sleeps" >>"$tsv"
  fi
}

# run_bw TOOL OP SIDE N REP — one bandwidth run (64 KiB messages) with SIDE under callgrind;
# TOOL is perftest (ib_OP_bw) or rdmaxfer (bench OP --oob, perftest's TCP exchange). OP send-e is
# SEND with both sides sleeping on completion events (ib_send_bw -e, bench send --event): no
# busy-poll spins in the count, which in poll mode measure how long the kernel took, not the
# work per message (perftest has events for SEND only).
run_bw() {
  local tool="$1" op="$2" side="$3" n="$4" r="$5" name ev=() s=() c=()
  name="$out/bw.$tool.$op.$side.$n.$r"
  port=$((port + 1))
  if [[ $op == *-e ]]; then
    op=${op%-e}
    # perftest has events for SEND only: ib_write_bw busy-polls in write-e (see the header).
    if [[ $tool == rdmaxfer ]]; then ev=(--event); elif [[ $op == send ]]; then ev=(-e); fi
  fi
  if [[ $tool == rdmaxfer ]]; then
    # --timeout 120: a side under callgrind on a busy host can take over 10 s to set up.
    # INSTR_BW_FLAGS: more rdmaxfer bench flags for both sides (e.g. --per-message).
    s=("$bin" bench "$op" -d rxe0 --oob -s 65536 -n "$n" "${ev[@]}" ${INSTR_BW_FLAGS:-} --timeout 120 --listen "$ip" --count 1 -p "$port")
    c=("$bin" bench "$op" -d rxe0 --oob -s 65536 -n "$n" "${ev[@]}" ${INSTR_BW_FLAGS:-} --timeout 120 -p "$port" "$ip")
  else
    # -N (no peak): perftest's peak bandwidth is an O(n^2) search over every (post, completion)
    # pair after the loop, which would add ~n/2 iterations per work request to the difference.
    s=("ib_${op}_bw" -d rxe0 -x 1 -F -N -s 65536 -n "$n" "${ev[@]}" -p "$port")
    c=("ib_${op}_bw" -d rxe0 -x 1 -F -N -s 65536 -n "$n" "${ev[@]}" -p "$port" "$ip")
  fi
  measure "$name" "$side" tcp || return 1
  # The total, then the provider's CQ poll: calls and the instructions inside them.
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$2" "$side" "$n" "$r" \
    "$(awk '/^(summary|totals):/ {print $2; exit}' "$name.callgrind")" \
    "$(python3 "$(dirname "${BASH_SOURCE[0]}")/callgrind-polls.py" "$name.callgrind" | tr ' ' '\t')" >>"$bwtsv"
}

bwtsv="$out/instr-bw.tsv"
printf 'tool\tcase\tside\titers\trep\tinstructions\tpolls\tpoll_instructions\tcalib\n' >"$bwtsv"

parts=" ${INSTR_PARTS:-pp ppe bw} "
# Anchor rows this run does not count come from the last run that did.
for f in "$tsv" "$bwtsv"; do
  for tool in ibv_rc_pingpong perftest; do
    if ! wanted "$tool" && [[ -f "$anchors/${f##*/}" ]]; then
      awk -F'\t' -v t="$tool" '$1 == t' "$anchors/${f##*/}" >>"$f"
      echo "== $tool: rows of an earlier run ($anchors/${f##*/})"
    fi
  done
done
for r in $(seq 1 "$reps"); do
  if [[ $parts == *" bw "* ]]; then
    for op in ${INSTR_OPS:-write-e send-e}; do
      for tool in perftest rdmaxfer; do
        wanted "$tool" || continue
        for side in ${INSTR_SIDES:-client server}; do
          for n in 1000 2000; do
            run_bw "$tool" "$op" "$side" "$n" "$r" || true
          done
        done
      done
    done
  fi
  for ev in "" -e; do
    [[ $parts == *" pp${ev:+e} "* ]] || continue
    for size in ${INSTR_SIZES:-2 4096}; do
      for tool in ibv_rc_pingpong rdmaxfer; do
        wanted "$tool" || continue
        for side in ${INSTR_SIDES:-client server}; do
          for n in 1000 3000; do
            run "$tool" "$size" "$side" "$n" "$r" $ev || true
          done
        done
      done
    done
  done
done

# Keep the anchors' rows counted now for the runs that skip them.
for f in "$tsv" "$bwtsv"; do
  for tool in ibv_rc_pingpong perftest; do
    wanted "$tool" || continue
    rows="$(awk -F'\t' -v t="$tool" '$1 == t' "$f")"
    [[ -n $rows ]] || continue
    keep="$anchors/${f##*/}"
    # This run's header (older files may lack columns: their rows read as unknown there).
    {
      head -n 1 "$f"
      if [[ -f $keep ]]; then awk -F'\t' -v t="$tool" 'NR > 1 && $1 != t' "$keep"; fi
    } >"$keep.new"
    printf '%s\n' "$rows" >>"$keep.new"
    mv "$keep.new" "$keep"
  done
done

python3 - "$tsv" "$bwtsv" <<'PY' | tee "$out/instr-summary.txt"
import csv, sys
def table(path, anchor, cases, n1, n2, head, unit, goal=None):
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    def least(tool, case, side, n):
        # Less perftest's clock calibration (calib: once per run, of varying length).
        v = [int(r["instructions"]) - int(r.get("calib") or 0) for r in rows
             if (r["tool"], r["case"], r["side"], r["iters"]) == (tool, case, side, n)]
        return min(v) if v else None
    def per(tool, case, side):
        a, b = least(tool, case, side, n1), least(tool, case, side, n2)
        return None if a is None or b is None else (b - a) / (int(n2) - int(n1))
    print(f"== user-space instructions per {unit} (callgrind; (min Ir at -n {n2} - min Ir at -n {n1})")
    print(f"   / {int(n2) - int(n1)}){head}")
    print(f"{'case':>8} {'side':<7} {anchor:>16} {'rdmaxfer':>10} {'ratio':>7}"
          + (f"  goal <= {goal}" if goal else ""))
    for case in cases:
        for side in ("client", "server"):
            a, r = per(anchor, case, side), per("rdmaxfer", case, side)
            f = lambda v: "n/a" if v is None else f"{v:.0f}"
            q = "n/a" if a is None or r is None or a <= 0 else f"{r / a:.2f}"
            mark = ""
            if goal and q != "n/a":
                mark = "  met" if r / a <= goal else f"  {r - goal * a:+.0f} over"
            print(f"{case:>8} {side:<7} {f(a):>16} {f(r):>10} {q:>7}{mark}")
table(sys.argv[1], "ibv_rc_pingpong", ("2", "4096", "2-e", "4096-e"), "1000", "3000",
      "; rdmaxfer's statistics after the loop left out;\n   -e: both sides sleep on events"
      " (as many times as the timing makes them: the goal\n   is read at one sleep per round"
      " trip, in the last ping-pong table)",
      "round trip")
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def pp_least(tool, case, n):
    v = [int(r["instructions"]) for r in rows
         if (r["tool"], r["case"], r["side"], r["iters"]) == (tool, case, "client", n)]
    return min(v) if v else None
for case in ("2-e", "4096-e"):
    a1, a2 = pp_least("ibv_rc_pingpong", case, "1000"), pp_least("ibv_rc_pingpong", case, "3000")
    r1, r2 = pp_least("rdmaxfer-nocheck", case, "1000"), pp_least("rdmaxfer-nocheck", case, "3000")
    if None in (r1, r2):
        continue
    r = (r2 - r1) / 2000
    q = "n/a" if None in (a1, a2) or a2 <= a1 else f"{r / ((a2 - a1) / 2000):.2f}"
    print(f"{case:>8} client without its pong checks: {r:.0f} (ratio {q})")

# Event mode at one sleep per round trip (see the header): the work without the sleep machinery
# (callgrind-sleeps.py) plus one sleep at the tool's own mean cost per sleep. Rows without the
# sleep columns (an older run's anchors) are unknown.
def known(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
def sleep_runs(tool, case, side, n):
    """[(Ir, sleeps, sleep Ir)] of the runs (None: unknown)."""
    return [(int(r["instructions"]), known(r.get("sleeps")), known(r.get("sleep_instructions")))
            for r in rows if (r["tool"], r["case"], r["side"], r["iters"]) == (tool, case, side, n)]
def total(tool, case, side):
    a, b = (sleep_runs(tool, case, side, n) for n in ("1000", "3000"))
    return (min(x[0] for x in b) - min(x[0] for x in a)) / 2000 if a and b else None
def one_sleep(tool, case, side):
    """(sleeps per round trip, work + one sleep), or None."""
    best, runs = {}, []
    for n in ("1000", "3000"):
        v = sleep_runs(tool, case, side, n)
        if not v or any(None in x for x in v):
            return None
        runs += v
        best[n] = min(v, key=lambda x: x[0] - x[2])
    slept = sum(x[1] for x in runs)
    if not slept:
        return None
    (i1, s1, e1), (i2, s2, e2) = best["1000"], best["3000"]
    return (s2 - s1) / 2000, ((i2 - e2) - (i1 - e1)) / 2000 + sum(x[2] for x in runs) / slept
def versus(r, a):
    if r is None or a is None or a[1] <= 0:
        return "n/a", ""
    q = r[1] / a[1]
    return f"{q:.2f}", "  met" if q <= 1.3 else f"  {r[1] - 1.3 * a[1]:+.0f} over"
print("== per round trip at one sleep per round trip (event mode; the goal, within 1.3 x, is read here):")
print("   normalised: (min (Ir - sleep Ir) at -n 3000 - the same at -n 1000) / 2000 + one sleep at")
print("   the tool's mean sleep Ir per sleep (callgrind-sleeps.py); total: as above; sleeps/rt:")
print("   ibv_get_cq_event calls per round trip in the runs used; ratio: of the normalised counts")
print(f"{'':16} {'------ ibv_rc_pingpong ------':>28} {'---------- rdmaxfer ----------':>29}")
print(f"{'case':>8} {'side':<7} {'total':>7} {'sleeps/rt':>9} {'normalised':>10} {'total':>8}"
      f" {'sleeps/rt':>9} {'normalised':>10} {'ratio':>7}  goal <= 1.3")
f0 = lambda v: "n/a" if v is None else f"{v:.0f}"
for case in ("2-e", "4096-e"):
    for side in ("client", "server"):
        a, r = one_sleep("ibv_rc_pingpong", case, side), one_sleep("rdmaxfer", case, side)
        q, mark = versus(r, a)
        g = lambda v, i: "n/a" if v is None else (f"{v[i]:.2f}" if i == 0 else f"{v[i]:.0f}")
        print(f"{case:>8} {side:<7} {f0(total('ibv_rc_pingpong', case, side)):>7} {g(a, 0):>9}"
              f" {g(a, 1):>10} {f0(total('rdmaxfer', case, side)):>8} {g(r, 0):>9} {g(r, 1):>10}"
              f" {q:>7}{mark}")
for case in ("2-e", "4096-e"):
    r = one_sleep("rdmaxfer-nocheck", case, "client")
    if r is None:
        continue
    q, mark = versus(r, one_sleep("ibv_rc_pingpong", case, "client"))
    print(f"{case:>8} client without its pong checks: {f0(total('rdmaxfer-nocheck', case, 'client'))},"
          f" normalised {r[1]:.0f} (ratio {q}{mark and ',' + mark[1:]})")
table(sys.argv[2], "perftest", ("write", "write-e", "send", "send-e"), "1000", "2000",
      "; perftest -N, less its clock calibration.\n   send-e: both sleep on events (ib_send_bw "
      "-e, --event); write-e: rdmaxfer sleeps (--event),\n   ib_write_bw busy-polls (it has no "
      "events; its polls/WR are in the ex-poll table); write and\n   send: both busy-poll (a "
      "measure of the wait, not the work)",
      "64 KiB work request")

# Bandwidth without busy-poll spins: per work request, (instructions - those inside the provider's
# CQ poll) + polls that found something x the cost of one such poll is not knowable from a
# profile, so the settled figure is the count with every provider poll taken out ("ex-poll"), for
# both tools alike; polls/WR says how much spinning was removed. See the header.
rows = list(csv.DictReader(open(sys.argv[2]), delimiter="\t"))
def bw_per(tool, case, side):
    best = {}
    for n in ("1000", "2000"):
        v = [r for r in rows if (r["tool"], r["case"], r["side"], r["iters"]) == (tool, case, side, n)
             and r.get("polls") not in (None, "")]
        if not v:
            return None
        ex = lambda r: (int(r["instructions"]) - int(r["poll_instructions"])
                        - int(r.get("calib") or 0))
        r = min(v, key=ex)
        best[n] = (ex(r), int(r["polls"]))
    return tuple((best["2000"][i] - best["1000"][i]) / 1000 for i in (0, 1))
print("== per 64 KiB work request without the provider's CQ polls (ex-poll; polls/WR: calls removed)")
print(f"{'case':>8} {'side':<7} {'perftest':>10} {'polls/WR':>9} {'rdmaxfer':>10} {'polls/WR':>9} {'ratio':>7}")
for case in ("write", "write-e", "send", "send-e"):
    for side in ("client", "server"):
        a, r = bw_per("perftest", case, side), bw_per("rdmaxfer", case, side)
        f = lambda v, i: "n/a" if v is None else f"{v[i]:.0f}"
        q = "n/a" if a is None or r is None or a[0] <= 0 else f"{r[0] / a[0]:.2f}"
        print(f"{case:>8} {side:<7} {f(a, 0):>10} {f(a, 1):>9} {f(r, 0):>10} {f(r, 1):>9} {q:>7}")
PY
echo "== instruction bench done: $fails failed run(s)"
exit $((fails > 0))
