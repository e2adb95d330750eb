#!/usr/bin/env bash
# ci/guest-send-phases.sh [MIB] [RUNS] [STREAMS] — runs INSIDE the guest (ci/guest.sh -- bash
# ci/guest-send-phases.sh): where a whole `rdmaxfer send` command spends its time outside the data
# phase, at STREAMS streams (default: send's own default, 2 for this file on one device; a number
# passes --streams). Both sides run under strace filtered with seccomp-bpf (only the marker syscalls
# below stop the process: execve, openat, connect, close, renameat2, fsync, exit_group), so the data
# phase runs nearly untraced; the sender also logs its phase markers (RDMAXFER_LOG=rdmaxfer_phase=
# debug: stream connected/joined, each part's data start, FIN, verdict, DONE, close). Prints per run
# the whole command, the data phase and the time outside it, then one timeline of both sides (time
# since the sender's execve and since the line before) and the phases between the markers. Openat's
# of many files, as in the provider loading, are inflated by the tracing. Traces in
# target/bench/phases/. Then, untraced, the start-up costs alone (mean of STARTUP_RUNS, default 10,
# runs each; STARTUP_RUNS=0 skips): a process that only parses `send`'s arguments, libibverbs
# loading its providers (ibv_devices), and the same with the rxe provider preloaded (libibverbs
# then matches every device to it and loads no other provider; see docs).
set -euo pipefail
mib="${1:-128}"
runs="${2:-3}"
streams="${3:-default}"
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
tr=(strace -f -ttt --seccomp-bpf -e trace=execve,openat,connect,close,renameat2,fsync,exit_group)
sargs=()
[[ "$streams" == default ]] || sargs=(--streams "$streams")
for ((i = 1; i <= runs; i++)); do
  port=$((port + 1))
  "${tr[@]}" -o "$out/$i.recv.strace" "$bin" recv --out "$w/out" --listen -p "$port" --once --json \
    >"$out/$i.recv.json" 2>"$out/$i.recv.err" &
  rp=$!
  wait_line "$out/$i.recv.err" "$rp"
  RDMAXFER_LOG=rdmaxfer_phase=debug "${tr[@]}" -o "$out/$i.send.strace" "$bin" send "$w/src/f.bin" "198.18.0.1:$port" \
    "${sargs[@]}" --json >"$out/$i.send.json" 2>"$out/$i.send.err"
  wait "$rp"
  cmp -s "$w/src/f.bin" "$w/out/f.bin" || echo "!! run $i: received file differs"
  rm -f "$w/out/"*
done
python3 - "$out" "$runs" <<'PY'
import datetime, json, re, sys
out, runs = sys.argv[1], int(sys.argv[2])
def strace(f):
    """(epoch seconds, pid, text) of each completed marker syscall."""
    ev = []
    for l in open(f).read().splitlines():
        m = re.match(r"^(\d+) +(\d+\.\d+) (.*)$", l)
        if m and "resumed>" not in m.group(3):
            ev.append((float(m.group(2)), m.group(1), m.group(3)))
    return ev
def phases(f):
    """(epoch seconds, message) of each phase marker in the sender's log."""
    ev = []
    for l in open(f).read().splitlines():
        l = re.sub(r"\x1b\[[0-9;]*m", "", l)
        m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\s+DEBUG\s+rdmaxfer_phase: (.*)$", l)
        if m:
            t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
            ev.append((t.timestamp(), m.group(2)))
    return ev
def first(ev, pat):
    return next((e[0] for e in ev if re.search(pat, e[-1])), None)
for i in range(1, runs + 1):
    S, R = strace(f"{out}/{i}.send.strace"), strace(f"{out}/{i}.recv.strace")
    P = phases(f"{out}/{i}.send.err")
    j = json.load(open(f"{out}/{i}.send.json"))
    t0, ex = S[0][0], first(S, r"^exit_group")
    total = ex - t0
    print(f"run {i}: whole command {total:.3f} s, data phase {j['data_seconds']:.3f} s, "
          f"outside {total - j['data_seconds']:.3f} s, streams {j.get('streams')}")
    line = [(t0, "send: execve"),
            (first(S, r'libibverbs\.d"'), "send: libibverbs reads /etc/libibverbs.d (providers load)"),
            (first(S, r"uverbs\d"), "send: first uverbs device opened (providers loaded)"),
            (first(S, r"/dev/infiniband/rdma_cm"), "send: librdmacm opens rdma_cm"),
            (first(S, r"ibacm\.sock"), "send: route resolution starts (ibacm probe)"),
            (first(S, r'src/f\.bin", O_RDONLY'), "send: source first opened"),
            (first(R, r"^fsync"), "recv: first fsync"),
            (first(R, r"^renameat2"), "recv: first rename (a file committed)"),
            (first(R, r"^exit_group"), "recv: exit"),
            (ex, "send: exit")]
    line += [(t, "send: " + m) for t, m in P]
    line = sorted((t, m) for t, m in line if t is not None)
    prev = t0
    for t, m in line:
        print(f"   {t - t0:8.3f} s  +{t - prev:7.3f}  {m}")
        prev = t
    # The phases outside the data: what comes before the first part's data and after the last
    # verdict, on the sender's clock.
    starts = [t for t, m in P if "data starts" in m]
    verdicts = [t for t, m in P if "verdict received" in m]
    if starts and verdicts:
        print(f"   before the first data {min(starts) - t0:.3f} s ({(min(starts) - t0) / total:.1%}), "
              f"between the parts' data starts {max(starts) - min(starts):.3f} s, "
              f"between their verdicts {max(verdicts) - min(verdicts):.3f} s, "
              f"after the last verdict {ex - max(verdicts):.3f} s ({(ex - max(verdicts)) / total:.1%})")
PY

n="${STARTUP_RUNS:-10}"
if ((n > 0)); then
  rxe="$(ls /usr/lib/*/libibverbs/librxe-rdmav*.so 2>/dev/null | head -n 1)"
  mean() { # mean DESC CMD... — the mean wall time of n runs of CMD
    local a b
    a="$(date +%s.%N)"
    for ((k = 0; k < n; k++)); do "${@:2}" >/dev/null 2>&1 || true; done
    b="$(date +%s.%N)"
    python3 -c "import sys; print(f'   {sys.argv[1]:<64} {(float(sys.argv[3]) - float(sys.argv[2])) / int(sys.argv[4]) * 1000:7.1f} ms')" "$1" "$a" "$b" "$n"
  }
  echo "start-up alone, mean of $n runs each (untraced):"
  mean "/bin/true (a process)" /bin/true
  mean "rdmaxfer send: arguments parsed only (RDMAXFER_PARSE_ONLY)" env RDMAXFER_PARSE_ONLY=1 "$bin" send "$w/src/f.bin" 198.18.0.1:1
  mean "ibv_devices (libibverbs loads every provider listed)" ibv_devices
  if [[ -n "$rxe" ]]; then
    mean "ibv_devices, rxe provider preloaded (LD_PRELOAD)" env LD_PRELOAD="$rxe" ibv_devices
  fi
fi
