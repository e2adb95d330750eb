#!/usr/bin/env bash
# ci/guest-send-phases.sh [MIB] [RUNS] — runs INSIDE the guest (ci/guest.sh -- bash ci/guest-send-phases.sh):
# where a whole `rdmaxfer send --streams 1` command spends its time outside the data phase. Both
# sides run under strace filtered with seccomp-bpf (only the marker syscalls below stop the
# process: execve, openat, connect, close, renameat2, fsync, exit_group), so the data phase runs
# nearly untraced; each phase is the time between two markers (openat's of many files, as in the
# provider loading, are inflated by the tracing). Prints per run and phase: seconds and share of
# the whole command. Traces in target/bench/phases/.
set -euo pipefail
mib="${1:-128}"
runs="${2:-3}"
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
out="$(realpath -m target/bench/phases)"
rm -rf "$out"
mkdir -p "$out"
w="$(mktemp -d /tmp/rdmaxfer-phases.XXXXXX)"
trap 'rm -rf "$w"' EXIT
mkdir -p "$w/src" "$w/out"
head -c "$((mib << 20))" /dev/urandom >"$w/src/f.bin"
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
port=18950
tr=(strace -f -tt --seccomp-bpf -e trace=execve,openat,connect,close,renameat2,fsync,exit_group)
for ((i = 1; i <= runs; i++)); do
  port=$((port + 1))
  "${tr[@]}" -o "$out/$i.recv.strace" "$bin" recv --out "$w/out" --listen -p "$port" --once --json \
    >"$out/$i.recv.json" 2>"$out/$i.recv.err" &
  rp=$!
  wait_line "$out/$i.recv.err" "$rp"
  "${tr[@]}" -o "$out/$i.send.strace" "$bin" send "$w/src/f.bin" "198.18.0.1:$port" --streams 1 --json >"$out/$i.send.json"
  wait "$rp"
  rm -f "$w/out/"*
done
python3 - "$out" "$runs" <<'PY'
import json, re, sys
out, runs = sys.argv[1], int(sys.argv[2])
def marks(f):
    return [l for l in open(f).read().splitlines() if re.match(r"^\d+ +\d", l)]
def t(l):
    h, m, s = l.split()[1].split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)
def first(lines, pat):
    return next((t(l) for l in lines if re.search(pat, l)), None)
for i in range(1, runs + 1):
    S, R = marks(f"{out}/{i}.send.strace"), marks(f"{out}/{i}.recv.strace")
    j = json.load(open(f"{out}/{i}.send.json"))
    t0, ex = t(S[0]), first(S, r"exit_group")
    fopen = first(S, r'src/f\.bin", O_RDONLY')
    fd = re.search(r'src/f\.bin", O_RDONLY\|O_CLOEXEC\) = (\d+)', "\n".join(S)).group(1)
    fclose = max(t(l) for l in S if re.search(rf"close\({fd}\)", l) and t(l) > fopen)
    cm = [t(l) for l in S if "/dev/infiniband/rdma_cm" in l]
    start = fclose - j["data_seconds"]
    ph = [("process start, arguments, source stat", t0, first(S, r'libibverbs\.d"')),
          ("libibverbs loads its providers (/etc/libibverbs.d)", first(S, r'libibverbs\.d"'), first(S, "uverbs0")),
          ("device pre-check + librdmacm init", first(S, "uverbs0"), cm[-1]),
          ("resolve address (until route resolution starts)", cm[-1], first(S, r"ibacm\.sock")),
          ("route, QP, connect, ESTABLISHED, session handshake", first(S, r"ibacm\.sock"), fopen),
          ("source open -> first chunk (offer, receiver's file set-up)", fopen, start),
          ("data phase (data_seconds: to the verified ACK)", start, fclose),
          ("ACK -> exit (teardown, summary)", fclose, ex)]
    total = ex - t0
    print(f"run {i}: whole command {total:.3f} s, data phase {j['data_seconds']:.3f} s, outside {total - j['data_seconds']:.3f} s; "
          f"receiver fsync +{first(R, 'fsync') - t0:.3f} s, rename +{first(R, 'renameat2') - t0:.3f} s, sender sees the ACK +{fclose - t0:.3f} s")
    for name, a, b in ph:
        if a is None or b is None:
            print(f"   {name:<60} missing")
        else:
            print(f"   {name:<60} {b - a:8.3f} s {(b - a) / total:6.1%}")
PY
