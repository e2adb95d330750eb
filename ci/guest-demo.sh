#!/usr/bin/env bash
# ci/guest-demo.sh — runs INSIDE the guest: the demo on rxe0: devices, loopback, then a verified
# file transfer (32 MiB from /dev/urandom, `rdmaxfer send` → `rdmaxfer recv --once`, tmpfs → tmpfs).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
[[ -x "$bin" ]] || { echo "[demo] $bin not built: run ci/demo.sh" >&2; exit 1; }
ip=198.18.0.1
port=18600
mib="${DEMO_MIB:-32}"

run() { echo "[demo] \$ $*"; "$@"; }
run "$bin" devices
run "$bin" loopback

# File transfer: guest /tmp is tmpfs and guest-only.
work="$(mktemp -d /tmp/rdmaxfer-demo.XXXXXX)"
mkdir -p "$work/src" "$work/out"
head -c "$((mib << 20))" /dev/urandom >"$work/src/demo.bin"
echo "[demo] generated $work/src/demo.bin ($mib MiB from /dev/urandom)"
echo "[demo] \$ $bin recv --out $work/out --listen $ip -p $port --once --json &"
"$bin" recv --out "$work/out" --listen "$ip" -p "$port" --once --json \
  >"$work/recv.json" 2>"$work/recv.err" &
rpid=$!
wait_line "$work/recv.err" "$rpid" || { echo "[demo] receiver never listened" >&2; cat "$work/recv.err" >&2; exit 1; }
run "$bin" send "$work/src/demo.bin" "$ip:$port" --json | tee "$work/send.json"
rc=0
wait "$rpid" || rc=$?
echo "[demo] receiver (exit $rc):"
cat "$work/recv.json"
((rc == 0)) || { cat "$work/recv.err" >&2; exit 1; }
run cmp "$work/src/demo.bin" "$work/out/demo.bin"
echo "[demo] verified: $work/out/demo.bin is byte-for-byte identical; blake3 $(grep -o '"hash":"[0-9a-f]*"' "$work/recv.json" | cut -d'"' -f4)"
rm -rf "$work"
echo "[demo] done"
