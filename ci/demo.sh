#!/usr/bin/env bash
# ci/demo.sh — command 1, the main job: release build, then rdmaxfer's demo on rxe0 inside a guest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"

bash ci/setup.sh
ci_path
ci_log "cargo build --release --features cli"
cargo build --release --features cli
RDMAXFER_BIN="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/rdmaxfer"
export RDMAXFER_BIN
ci/guest.sh -- bash ci/guest-demo.sh
