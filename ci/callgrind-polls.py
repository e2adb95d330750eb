#!/usr/bin/env python3
"""ci/callgrind-polls.py FILE.callgrind — prints "CALLS IR" for the soft device's CQ poll in one
callgrind profile: the number of calls into the provider's (librxe's) most-called function and the
instructions spent inside those calls (inclusive). In a busy-polling run that function is
ibv_poll_cq's provider half (the provider library is stripped, so it has no name to look for):
every empty look at the CQ is one call. ci/guest-bench-instr.sh uses it to take busy-poll spins
out of the per-work-request counts. Prints "0 0" if the profile has no provider calls."""
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
pending = None
with open(sys.argv[1], errors="replace") as f:
    for line in f:
        line = line.rstrip("\n")
        if pending is not None:
            # The line after calls=: "<position> <inclusive Ir> ..." of those calls.
            parts = line.split()
            target = (cob or ob, cfn)
            calls[target] += pending
            incl[target] += int(parts[1]) if len(parts) > 1 else 0
            pending, cob = None, None
            continue
        if line.startswith("ob="):
            ob = name("ob", line[3:])
        elif line.startswith("fn="):
            name("fn", line[3:])
            cob = None
        elif line.startswith("cob="):
            cob = name("ob", line[4:])
        elif line.startswith("cfn="):
            cfn = name("fn", line[4:])
        elif line.startswith("calls="):
            pending = int(line[6:].split()[0])

provider = [(c, k) for k, c in calls.items() if k[0] and "/libibverbs/" in k[0] and "rxe" in k[0]]
if not provider:
    print("0 0")
else:
    c, k = max(provider)
    print(c, incl[k])
