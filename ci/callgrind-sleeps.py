#!/usr/bin/env python3
"""ci/callgrind-sleeps.py FILE.callgrind — prints "SLEEPS SLEEP_IR" for one callgrind profile of
an event-mode run: SLEEPS is the number of calls to ibv_get_cq_event (one per wake-up from the
completion channel), SLEEP_IR the inclusive instructions of the sleep machinery: calls to
ibv_get_cq_event, ibv_cmd_req_notify_cq (rxe's ibv_req_notify_cq), ibv_ack_cq_events and libc's
poll / ppoll, and libc's syscall() (rdmaxfer makes its ppoll as a raw syscall(SYS_ppoll)). A call
counts only where its caller is none of these functions, so nothing is counted twice.
ci/guest-bench-instr.sh uses it to compare the tools at one sleep per round trip."""
import collections
import re
import sys

SLEEP = {"ibv_get_cq_event", "ibv_cmd_req_notify_cq", "ibv_ack_cq_events"}
LIBC = {"poll", "ppoll", "syscall"}  # after bare() (__poll, __GI___poll, ... -> poll)
names = {}


def name(kind, val):
    # Name compression: "(N) name" defines N, "(N)" uses it; fn= and cfn= share one table, ob= and
    # cob= another, and a name may be defined first on either.
    m = re.match(r"\((\d+)\)(?: (.*))?$", val)
    if not m:
        return val
    key = (kind, m.group(1))
    if m.group(2):
        names[key] = m.group(2)
    return names.get(key, "?")


def bare(fn):
    """The C name without glibc's internal prefixes or a symbol version."""
    fn = (fn or "").split("@")[0]
    if fn.startswith("__GI_"):
        fn = fn[5:]
    return fn.lstrip("_")


def sleeping(ob, fn):
    b = bare(fn)
    return b in SLEEP or (b in LIBC and ob is not None and "/libc." in ob)


npos, ir = 1, 0  # position columns before the costs; Ir's index among the events
ob = fn = cob = cfn = None
pending = None
sleeps = sleep_ir = 0
seen = collections.Counter()  # bare callee name -> calls counted
with open(sys.argv[1], errors="replace") as f:
    for line in f:
        line = line.rstrip("\n")
        if pending is not None:
            # The line after calls=: "<position(s)> <inclusive costs>" of those calls.
            parts = line.split()
            cost = int(parts[npos + ir]) if len(parts) > npos + ir else 0
            callee = (cob or ob, cfn)
            if sleeping(*callee) and not sleeping(ob, fn):
                sleep_ir += cost
                seen[bare(cfn)] += pending
            if bare(cfn) == "ibv_get_cq_event":
                sleeps += pending
            pending, cob = None, None
            continue
        if line.startswith("positions:"):
            npos = len(line.split()) - 1
        elif line.startswith("events:"):
            ir = line.split()[1:].index("Ir")
        elif line.startswith("ob="):
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

if sleeps and not seen["ibv_cmd_req_notify_cq"]:
    # Another provider arms the CQ with its own function: its cost would be missed.
    print(f"!! {sys.argv[1]}: {sleeps} sleeps but no ibv_cmd_req_notify_cq", file=sys.stderr)
print(sleeps, sleep_ir)
