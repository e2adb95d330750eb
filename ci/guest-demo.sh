#!/usr/bin/env bash
# ci/guest-demo.sh — runs INSIDE the guest: the demo on rxe0 (devices, loopback; file transfer goes here later).
set -euo pipefail
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
[[ -x "$bin" ]] || { echo "[demo] $bin not built: run ci/demo.sh" >&2; exit 1; }

run() { echo "[demo] \$ $*"; "$@"; }
run "$bin" devices
run "$bin" loopback
echo "[demo] done"
