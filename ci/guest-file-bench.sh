#!/usr/bin/env bash
# ci/guest-file-bench.sh [MIB] [CHUNK] — runs INSIDE the guest: `rdmaxfer send` → `recv --once` of a
# MIB-MiB random file tmpfs → tmpfs with verification, then ib_write_bw at the same message size.
# Extra rdmaxfer flags for both sides in $FLAGS (e.g. FLAGS=--event).
# Prints both JSON summaries, the peak RSS of both sides (/usr/bin/time if present) and ib_write_bw's.
set -euo pipefail
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
mib="${1:-128}"
chunk="${2:-1048576}"
ip=198.18.0.1
port=18610
work="$(mktemp -d /tmp/rdmaxfer-fbench.XXXXXX)"
mkdir -p "$work/src" "$work/out"
if [[ -n "${SPARSE:-}" ]]; then # SPARSE=1: a sparse source (for RSS of big files without RAM)
  truncate -s "$((mib << 20))" "$work/src/f.bin"
else
  head -c "$((mib << 20))" /dev/urandom >"$work/src/f.bin"
fi
timer=()
[[ -x /usr/bin/time ]] && timer=(/usr/bin/time -f "peak RSS %M KiB, %e s elapsed, %U s user, %S s sys")
"${timer[@]}" "$bin" recv --out "$work/out" --listen "$ip" -p "$port" --once --json ${FLAGS:-} >"$work/recv.json" 2>"$work/recv.err" &
rpid=$!
for _ in $(seq 1 400); do grep -q "listening on" "$work/recv.err" && break; sleep 0.05; done
"${timer[@]}" "$bin" send "$work/src/f.bin" "$ip:$port" --chunk "$chunk" --json ${FLAGS:-} >"$work/send.json" 2>"$work/send.err"
wait "$rpid"
cmp "$work/src/f.bin" "$work/out/f.bin"
echo "sender:   $(cat "$work/send.json")"; grep -h "peak RSS" "$work/send.err" || true
echo "receiver: $(cat "$work/recv.json")"; grep -h "peak RSS" "$work/recv.err" || true
rm -rf "$work"
if [[ -z "${NO_ANCHOR:-}" ]] && command -v ib_write_bw >/dev/null; then
  ib_write_bw -d rxe0 -x 1 -F -s "$chunk" -n 200 -p 18611 >/tmp/ibw.server 2>&1 &
  spid=$!
  for _ in $(seq 1 400); do ss -Hltn "sport = :18611" | grep -q . && break; sleep 0.05; done
  ib_write_bw -d rxe0 -x 1 -F -s "$chunk" -n 200 -p 18611 "$ip" 2>&1 | grep -A1 "#bytes" || true
  wait "$spid" || true
fi
