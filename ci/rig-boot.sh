#!/usr/bin/env bash
# ci/rig-boot.sh NODE IP MAC NETDEV DIR [IP2 MAC2 NETDEV2] — boots one guest of the two-host rig
# (tests/rig, started by ci/rig.sh) and runs ci/rig-agent.sh in it: one vCPU, a virtio-net NIC
# with MAC on the qemu socket netdev NETDEV ("listen=127.0.0.1:PORT" or "connect=…"), and with
# IP2 a second NIC (the second wire, a second rail: rxe1) with MAC2 on NETDEV2; the repo shared
# read-write. The guest's console goes to DIR/console.log; this script ends when the guest does.
# Env: RIG_BIN (the rdmaxfer the agent copies), RIG_MEMORY (1536M), RIG_GUEST_TIMEOUT (3600 s: a guest left behind powers off by then; the harness stops them when it ends),
# RIG_POLL, RIG_TRACE_STREAMS (passed to the agent), RIG_PCAP=1 (qemu dumps the wire's packets,
# headers only, to DIR/wire.pcap; ci/wire-imm.py reads it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
node="$1" ip="$2" mac="$3" netdev="$4" d="$5" ip2="${6:-}" mac2="${7:-}" netdev2="${8:-}"
ci_path
ci_find_vng || ci_die "virtme-ng (vng) not found: run ci/setup.sh"
kernel="$(ci_find_kernel)" || ci_die "no guest kernel with rdma_rxe.ko: run ci/setup.sh"
mkdir -p "$d/cmd" "$d/out"
dump=""
[[ "${RIG_PCAP:-0}" == 1 ]] && dump=" -object filter-dump,id=d0,netdev=s0,file=$d/wire.pcap,maxlen=96"
wire2=""
[[ -n "$ip2" ]] && wire2=" -netdev socket,id=s1,$netdev2 -device virtio-net-pci,netdev=s1,mac=$mac2"
# qemu must not get a regular file as stdout (it truncates it): the console goes through cat.
timeout -k 10 "${RIG_GUEST_TIMEOUT:-3600}" "${CI_VNG[@]}" --disable-kvm --run "$kernel" \
  --name "rig$node" --memory "${RIG_MEMORY:-1536M}" --cpus 1 \
  --rwdir "$CI_ROOT" --cwd "$CI_ROOT" \
  --qemu-opts="-netdev socket,id=s0,$netdev -device virtio-net-pci,netdev=s0,mac=$mac$dump$wire2" \
  --exec "RIG_BIN=$(printf %q "${RIG_BIN:?}") RIG_POLL=${RIG_POLL:-0} RIG_TRACE_STREAMS=${RIG_TRACE_STREAMS:-0} bash ci/rig-agent.sh $node $ip $mac $(printf %q "$d") $ip2 $mac2" \
  </dev/null 2>&1 | cat >"$d/console.log"
