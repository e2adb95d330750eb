#!/usr/bin/env python3
"""Two-host benchmark table from one ci/rig.sh run: ib_write_bw vs `rdmaxfer bench write` vs
`rdmaxfer send` at 1 MiB, clean, with 1 % loss and with 5 ms ± 2 ms delay + 25 % reordering
(ci/rig.sh REORDER_NETEM) (MB = 2^20 bytes, as perftest prints); then `send --streams N` for
N = 1, 2, 4 (clean): aggregate rates and N / N=1 (goal >= 0.95)."""
import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/rig/bench")


def text(name):
    try:
        return (out / f"{name}.txt").read_text()
    except OSError:
        return ""


def perftest_bw(name):
    """BW average (MB/s) of perftest's result row (the line after the #bytes header)."""
    lines = text(name).splitlines()
    for i, l in enumerate(lines):
        if l.strip().startswith("#bytes") and i + 1 < len(lines):
            f = lines[i + 1].split()
            if len(f) >= 4 and f[0].isdigit():
                return float(f[3])
    return None


def last_json(name, key):
    rows = [l for l in text(name).splitlines() if l.startswith("{")]
    try:
        j = json.loads(rows[-1])
        if j.get("result", "ok") != "ok":
            return None  # a failed run's rate is not a figure
        v = j.get(key)
        return float(v) if v is not None else None
    except (IndexError, ValueError):
        return None


rows = {
    "ib_write_bw": lambda m: perftest_bw(f"ib_write_bw.{m}"),
    "write bench": lambda m: last_json(f"rdx_write.{m}", "bw_avg_mib_s"),
    # The data phase (first chunk to the receiver's verified ACK), timed like perftest (which
    # leaves out its set-up); "send cmd" is the whole command, connection set-up included.
    "send file": lambda m: last_json(f"rdx_send.{m}", "data_mib_s"),
    "send cmd": lambda m: last_json(f"rdx_send.{m}", "mib_s"),
}
MODES = ("clean", "loss", "reorder")
vals = {(t, m): f(m) for t, f in rows.items() for m in MODES}
anchor = vals[("ib_write_bw", "clean")]


def fmt(v):
    return f"{v:9.2f}" if v is not None else "  missing"


print("== two-host benchmark, 1 MiB messages / chunks (MB/s = MiB/s)")
print(f"{'tool':<12} {'clean':>9} {'1% loss':>9} {'reorder':>9}   ratio to ib_write_bw clean")
for t in rows:
    c = vals[(t, "clean")]
    ratio = ""
    if t != "ib_write_bw":
        if c is not None and anchor:
            ratio = f"clean {c / anchor:5.3f}"
            if t != "send cmd":  # the goal compares data phases
                ratio += f" (goal >= 0.95: {'met' if c / anchor >= 0.95 else 'NOT met'})"
        else:
            ratio = "clean missing"
        for m, what in (("loss", "loss"), ("reorder", "reordering")):
            v, a = vals[(t, m)], vals[("ib_write_bw", m)]
            if v is not None and a:
                ratio += f", {what} vs ib_write_bw {what} {v / a:5.3f}"
    print(f"{t:<12} {' '.join(fmt(vals[(t, m)]) for m in MODES)}   {ratio}")
for m in MODES:
    a = vals[("ib_write_bw", m)]
    for t in ("write bench", "send file"):
        v = vals[(t, m)]
        print(f"{t} {m} ratio: {v / a:.3f}" if v is not None and a else f"{t} {m} ratio: missing")

print("== streams (clean): send --streams N, one file over N connections")
base = last_json("rdx_streams1.clean", "data_mib_s")
for n in (1, 2, 4):
    d, w = last_json(f"rdx_streams{n}.clean", "data_mib_s"), last_json(f"rdx_streams{n}.clean", "mib_s")
    line = f"streams N={n}: data phase {fmt(d)} MiB/s, whole command {fmt(w)} MiB/s"
    if d is not None and anchor:
        line += f", data / ib_write_bw clean {d / anchor:5.3f}"
    if n > 1:
        if d is not None and base:
            line += f", N/N=1 {d / base:5.3f} (goal >= 0.95: {'met' if d / base >= 0.95 else 'NOT met'})"
        else:
            line += ", N/N=1 missing"
    print(line)
