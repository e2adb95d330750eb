#!/usr/bin/env bash
# ci/kill-campaign.sh [COUNT] [SEED] — the kill campaign at any length (CI runs 20 kills as part
# of device_file): boot one guest and run tests/device_file/kills.rs with RDMAXFER_KILLS=COUNT
# (default 100) and RDMAXFER_KILL_SEED=SEED (default 42). A striped tree transfer is SIGKILLed,
# sender or receiver, at COUNT moments the seed chooses, each time completed by a --resume run
# and checked (identical tree, no temporary file, nothing outside --out, at most what can be in
# flight sent again). The same seed gives the same moments. Output: target/bench/kills.log.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
export RDMAXFER_KILLS="${1:-100}" RDMAXFER_KILL_SEED="${2:-42}"
export CI_GUEST_TIMEOUT="${CI_GUEST_TIMEOUT:-5400}"
cargo build --all-features --bin rdmaxfer
bin="$(cargo test --all-features --no-run --test device_file --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "device_file" and m.get("executable"):
        print(m["executable"])')"
[[ -x "$bin" ]] || ci_die "no device_file test binary"
mkdir -p target/bench
ci_log "kill campaign: $RDMAXFER_KILLS kills, seed $RDMAXFER_KILL_SEED ($bin)"
ci/guest.sh -- "$bin" --ignored --exact --nocapture kills::a_striped_tree_survives_kills_at_random_moments \
  2>&1 | tee target/bench/kills.log
