#!/usr/bin/env bash
# ci/bench-instr.sh [REPS] — build rdmaxfer (release), boot one guest and run ci/guest-bench-instr.sh
# there: user-space instructions per ping-pong round trip, rdmaxfer next to ibv_rc_pingpong, and
# per 64 KiB work request, rdmaxfer bench write / send next to ib_write_bw / ib_send_bw
# (callgrind), each also with both sides sleeping on events (-e: no busy-poll spins in the count).
# INSTR_PARTS="pp ppe bw" (default) selects parts; INSTR_TOOLS, INSTR_SIZES and INSTR_SIDES narrow
# the ping-pong parts (see ci/guest-bench-instr.sh); the whole run takes about an hour on a busy
# host (CI_GUEST_TIMEOUT defaults to 2 h here). Outputs in target/bench/instr/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path
# INSTR_TOOLS=rdmaxfer skips the anchors (their rows of the last run that counted them stand);
# INSTR_OPS selects the bandwidth cases (write-e send-e; also write send), INSTR_SIDES their sides (client
# server): see ci/guest-bench-instr.sh.
export CI_GUEST_ENV="${CI_GUEST_ENV:-} INSTR_PARTS INSTR_TOOLS INSTR_SIZES INSTR_OPS INSTR_SIDES INSTR_RUN_TIMEOUT INSTR_BW_FLAGS"
export CI_GUEST_TIMEOUT="${CI_GUEST_TIMEOUT:-7200}"
ci_guest_bench target/bench/instr ci/guest-bench-instr.sh "${1:-2}"
