#!/usr/bin/env python3
"""ci/callgrind-polls.py FILE.callgrind — prints "CALLS IR" for the soft device's CQ poll in one
callgrind profile: the number of calls into the provider's (librxe's) most-called function and the
instructions spent inside those calls (inclusive). In a busy-polling run that function is
ibv_poll_cq's provider half (the provider library is stripped, so it has no name to look for):
every empty look at the CQ is one call. ci/guest-bench-instr.sh uses it to take busy-poll spins
out of the per-work-request counts. Prints "0 0" if the profile has no provider calls.
A third number is the inclusive count of the tool's own functions that call gettimeofday: perftest's
clock calibration (get_cpu_mhz, once per run, a loop of varying length), which would otherwise
show as noise of +-200 instructions per work request in a difference of two runs (0 for
rdmaxfer, which has none)."""
import collections
import re
import sys

names = {}
calls = collections.Counter()
incl = collections.Counter()


def name(kind, val):
    m = re.match(r"\((\d+)\)(?: (.*))?$", val)
    if not m:
        return val
    key = (kind, m.group(1))
    if m.group(2):
        names[key] = m.group(2)
    return names.get(key, "?")


ob = cob = cfn = None
fn = None
pending = None
self_cost = collections.Counter()  # (object, function) -> its own instructions
call_cost = collections.Counter()  # (object, function) -> instructions of the calls it makes
callers_of_clock = set()
with open(sys.argv[1], errors="replace") as f:
    for line in f:
        line = line.rstrip("\n")
        if pending is not None:
            # The line after calls=: "<position> <inclusive Ir> ..." of those calls.
            parts = line.split()
            target = (cob or ob, cfn)
            calls[target] += pending
            cost = int(parts[1]) if len(parts) > 1 else 0
            incl[target] += cost
            call_cost[(ob, fn)] += cost
            if cfn and "gettimeofday" in cfn:
                callers_of_clock.add((ob, fn))
            pending, cob = None, None
            continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            parts = line.split()
            if len(parts) > 1 and parts[1].isdigit():
                self_cost[(ob, fn)] += int(parts[1])
            continue
        if line.startswith("ob="):
            ob = name("ob", line[3:])
        elif line.startswith("fn="):
            fn = name("fn", line[3:])
            cob = None
        elif line.startswith("cob="):
            cob = name("ob", line[4:])
        elif line.startswith("cfn="):
            cfn = name("fn", line[4:])
        elif line.startswith("calls="):
            pending = int(line[6:].split()[0])

calib = sum(self_cost[k] + call_cost[k] for k in callers_of_clock
            if k[0] and "/libc" not in k[0] and "/ld-linux" not in k[0])
provider = [(c, k) for k, c in calls.items() if k[0] and "/libibverbs/" in k[0] and "rxe" in k[0]]
if not provider:
    print("0 0", calib)
else:
    c, k = max(provider)
    print(c, incl[k], calib)
