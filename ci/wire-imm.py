#!/usr/bin/env python3
"""ci/wire-imm.py PCAP [IMM...] — reads a RoCE v2 capture (ci/rig.sh with RIG_PCAP=1: the wire's
packet headers) and checks what the requesters sent against what can have been posted:
  - every PSN of a connection that carried two different RDMA WRITE packets (a retransmission
    repeats a packet; two different ones mean the requester re-cut its messages);
  - every WRITE_WITH_IMM immediate carried at more than one PSN of a connection (with how often
    each PSN was seen: a retransmission repeats the PSN);
  - the NAKs (sequence error 0, invalid request 1, remote access 2, ...).
IMM (hex, e.g. 0x10001): also the WRITE packets with a RETH or an immediate, and the NAKs back,
of each connection that carried it, around it. A connection is (source, destination QP, PSN
region): QP numbers are reused by later connections."""
import struct
import sys
from collections import defaultdict

OPS = {0x00: "SEND_FIRST", 0x01: "SEND_MIDDLE", 0x02: "SEND_LAST", 0x03: "SEND_LAST_IMM",
       0x04: "SEND_ONLY", 0x05: "SEND_ONLY_IMM", 0x06: "WRITE_FIRST", 0x07: "WRITE_MIDDLE",
       0x08: "WRITE_LAST", 0x09: "WRITE_LAST_IMM", 0x0A: "WRITE_ONLY", 0x0B: "WRITE_ONLY_IMM",
       0x0C: "READ_REQ", 0x11: "ACK"}
RETH = {0x06, 0x0A, 0x0B, 0x0C}
IMM = {0x03, 0x05, 0x09, 0x0B}
SYN = {0: "ACK", 1: "RNR", 3: "NAK"}


def reth(r):
    """A RETH (remote address, length) as printed, or nothing."""
    return f" va {r[0]:#x} len {r[1]}" if r is not None else ""


def packets(path):
    with open(path, "rb") as f:
        hdr = f.read(24)
        magic = struct.unpack("<I", hdr[:4])[0]
        end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        n = 0
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            ts, tus, incl, _orig = struct.unpack(end + "IIII", rec)
            data = f.read(incl)
            n += 1
            if len(data) < 14 + 20 + 8 + 12 or data[12:14] != b"\x08\x00":
                continue
            ihl = (data[14] & 0x0F) * 4
            if data[23] != 17:
                continue
            src = ".".join(map(str, data[26:30]))
            udp = 14 + ihl
            if struct.unpack(">H", data[udp + 2:udp + 4])[0] != 4791:
                continue
            b = udp + 8
            op = data[b]
            dqp = int.from_bytes(data[b + 5:b + 8], "big")
            psn = int.from_bytes(data[b + 9:b + 12], "big")
            p = b + 12
            rlen = None
            if op in RETH and len(data) >= p + 16:
                va, rlen = struct.unpack(">Q", data[p:p + 8])[0], struct.unpack(">I", data[p + 12:p + 16])[0]
                p += 16
            imm = None
            if op in IMM and len(data) >= p + 4:
                imm = struct.unpack(">I", data[p:p + 4])[0]
            aeth = None
            if op == 0x11 and len(data) >= p + 4:
                aeth = data[p] >> 5, data[p] & 0x1F, int.from_bytes(data[p + 1:p + 4], "big")
            yield n, ts + tus / 1e6, src, op, dqp, psn, (va, rlen) if rlen is not None else None, imm, aeth


def main():
    pkts = list(packets(sys.argv[1]))
    want = {int(x, 16) for x in sys.argv[2:]}
    # A connection: (sender's address, destination QP, PSN region); QP numbers are reused by
    # later connections, whose PSNs start elsewhere (rdma_cm picks them at random).
    conns = {}

    def conn(src, dqp, psn):
        key = (src, dqp)
        for c in conns.setdefault(key, []):
            if (psn - c) % (1 << 24) < 1 << 20 or (c - psn) % (1 << 24) < 1 << 20:
                return (src, dqp, c)
        conns[key].append(psn)
        return (src, dqp, psn)

    by_imm = defaultdict(lambda: defaultdict(int))  # (conn, imm) -> psn -> times seen
    variants = defaultdict(dict)  # (conn, psn) -> {(opcode, RETH length, imm): first packet}
    naks = defaultdict(int)
    for n, ts, src, op, dqp, psn, rlen, imm, aeth in pkts:
        if op in (0x09, 0x0B):  # RDMA WRITE carrying an immediate: data chunks
            by_imm[(conn(src, dqp, psn), imm)][psn] += 1
        if 0x06 <= op <= 0x0B:
            variants[(conn(src, dqp, psn), psn)].setdefault((op, rlen, imm), n)
        if aeth and aeth[0] != 0:
            naks[(src, dqp, SYN.get(aeth[0], aeth[0]), aeth[1])] += 1
    print(f"{len(pkts)} RoCE packets; {len(by_imm)} WRITE_WITH_IMM messages (connection, immediate)")
    multi = 0
    for ((src, dqp, _), imm), psns in sorted(by_imm.items()):
        if len(psns) > 1:
            multi += 1
            print(f"{src} -> qp {dqp:#x}: imm {imm:#x} carried at {len(psns)} PSNs: "
                  + ", ".join(f"{p} (x{c})" for p, c in sorted(psns.items())))
    print(f"WRITE_WITH_IMM immediates carried at more than one PSN on one connection: {multi}")
    # A retransmission repeats a packet; one PSN carrying two different packets means the
    # requester re-cut the messages (what was sent is not what was posted).
    odd = 0
    for ((src, dqp, _), psn), vs in sorted(variants.items()):
        if len(vs) > 1:
            odd += 1
            print(f"{src} -> qp {dqp:#x}: PSN {psn} carried different packets: " + "; ".join(
                f"#{n} {OPS.get(op, hex(op))}" + reth(rl)
                + (f" imm {im:#x}" if im is not None else "")
                for (op, rl, im), n in sorted(vs.items(), key=lambda kv: kv[1])))
    print(f"PSNs that carried different RDMA WRITE packets on one connection: {odd}")
    for (src, dqp, kind, code), c in sorted(naks.items()):
        print(f"{src} -> qp {dqp:#x}: {kind} code {code} x{c}")
    for w in want:
        for (cn, imm), psns in sorted(by_imm.items()):
            if imm != w:
                continue
            src, q, _ = cn
            lo, hi = min(psns) - 3000, max(psns) + 3000
            print(f"--- {src} -> qp {q:#x}, imm {w:#x}: its WRITE packets with RETH or an "
                  f"immediate, and the NAKs back, PSN {lo}..{hi}")
            for n, ts, s2, op, dqp, psn, rlen, im, aeth in pkts:
                if not lo <= psn <= hi:
                    continue
                mine = s2 == src and dqp == q and (im is not None or rlen is not None)
                back = s2 != src and aeth is not None and aeth[0] != 0
                if mine or back:
                    print(f"#{n} {ts:.6f} {s2} -> qp {dqp:#x} {OPS.get(op, hex(op))} psn {psn}"
                          + reth(rlen)
                          + (f" imm {im:#x}" if im is not None else "")
                          + (f" {SYN.get(aeth[0], aeth[0])} {aeth[1]} msn {aeth[2]}" if aeth else ""))


if __name__ == "__main__":
    main()
