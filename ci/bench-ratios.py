#!/usr/bin/env python3
"""Prints rdmaxfer / anchor ratios from one ci/bench.sh run (target/bench/anchors.tsv + JSON outputs).

Every tool ran in several interleaved rounds (NAME.rN): each figure is the median over the rounds."""
import json
import pathlib
import re
import statistics
import sys

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench")
runs = {}
for line in (out / "anchors.tsv").read_text().splitlines()[1:]:
    tool, size, metric, value = line.split("\t")
    tool = re.sub(r"\.r\d+$", "", tool)
    runs.setdefault((tool, metric), []).append(float(value))
vals = {k: statistics.median(v) for k, v in runs.items()}


def spread(key):
    v = runs.get(key, [])
    return f"n={len(v)}, {min(v):.2f}..{max(v):.2f}" if v else "n=0"


def ratio(name, ours, anchor, metric, goal, higher_is_better=True):
    a, b = vals.get((ours, metric)), vals.get((anchor, metric))
    if a is None or b is None or b == 0:
        print(f"{name:<34} missing ({ours}: {a}, {anchor}: {b})")
        return
    r = a / b
    ok = r >= goal if higher_is_better else r <= goal
    cmp = ">=" if higher_is_better else "<="
    print(f"{name:<34} {a:10.2f} / {b:10.2f} = {r:5.3f}  (goal {cmp} {goal}: {'met' if ok else 'NOT met'})"
          f"  [{spread((ours, metric))} / {spread((anchor, metric))}]")


print("== rdmaxfer vs anchors (one guest run, medians of interleaved rounds; MB = 2^20 bytes)")
ratio("bench write 64 KiB / ib_write_bw", "rdx_write_64k", "ib_write_bw_64k", "BW_average_MBps", 0.97)
ratio("bench write 1 MiB / ib_write_bw", "rdx_write_1m", "ib_write_bw", "BW_average_MBps", 0.97)
ratio("bench read 64 KiB / ib_read_bw", "rdx_read_64k", "ib_read_bw_64k", "BW_average_MBps", 0.97)
ratio("bench read 1 MiB / ib_read_bw", "rdx_read_1m", "ib_read_bw", "BW_average_MBps", 0.97)
ratio("bench send 64 KiB / ib_send_bw (post lists)", "rdx_send_64k", "ib_send_bw", "BW_average_MBps", 0.95)
ratio("bench send --per-message / ib_send_bw", "rdx_send_64k_msg", "ib_send_bw", "BW_average_MBps", 0.95)


def jsons(name):
    got = []
    for f in sorted(out.glob(f"{name}.r*.client.txt")):
        try:
            lines = f.read_text().splitlines()
            got.append(json.loads([l for l in lines if l.startswith("{")][-1]))
        except (OSError, IndexError, ValueError):
            pass
    return got


def med(xs):
    return statistics.median(xs) if xs else None


gib = lambda j: j["size"] * j["iters"] / 2**30
poll, event = jsons("rdx_cpu_poll"), jsons("rdx_cpu_event")
if poll and event:
    cpu_p = med([j["cpu_seconds"] / gib(j) for j in poll])
    cpu_e = med([j["cpu_seconds"] / gib(j) for j in event])
    bw = med([j["bw_avg_mib_s"] for j in event]) / med([j["bw_avg_mib_s"] for j in poll])
    print(f"{'event vs poll CPU s/GiB (1 MiB write)':<34} {cpu_e:10.3f} / {cpu_p:10.3f} = {cpu_e / cpu_p:5.3f}  "
          f"(goal <= 0.5: {'met' if cpu_e / cpu_p <= 0.5 else 'NOT met'}) at {bw:5.3f} x poll bandwidth (goal >= 0.9)")
    if all("cpu_user_seconds" in j for j in poll + event):
        # On rxe the system part is mostly the soft device's own work (charged to the poster).
        usr_p = med([j["cpu_user_seconds"] / gib(j) for j in poll])
        usr_e = med([j["cpu_user_seconds"] / gib(j) for j in event])
        print(f"{'  of which user CPU s/GiB':<34} {usr_e:10.3f} / {usr_p:10.3f}"
              f"   (system: {cpu_e - usr_e:.3f} / {cpu_p - usr_p:.3f})")
else:
    print("event vs poll CPU: missing")

# The same for the anchor (perftest offers events for SEND only): ib_send_bw 1 MiB x 200, client.
ap, ae = vals.get(("ib_send_bw_cpu_poll", "cpu_seconds")), vals.get(("ib_send_bw_cpu_event", "cpu_seconds"))
bp, be = vals.get(("ib_send_bw_cpu_poll", "BW_average_MBps")), vals.get(("ib_send_bw_cpu_event", "BW_average_MBps"))
if None not in (ap, ae, bp, be) and ap > 0 and bp > 0:
    g = 200 / 1024  # GiB moved by 200 x 1 MiB
    print(f"{'ib_send_bw -e vs poll CPU s/GiB':<34} {ae / g:10.3f} / {ap / g:10.3f} = {ae / ap:5.3f}  "
          f"at {be / bp:5.3f} x poll bandwidth (the anchor's own ratio, for comparison)")
else:
    print("ib_send_bw event vs poll CPU: missing")
