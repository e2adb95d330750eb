#!/usr/bin/env bash
# ci/rig-agent.sh NAME IP MAC DIR — runs INSIDE one rig guest (ci/rig.sh): puts IP/24 and rxe0 on
# the virtio NIC with MAC, then runs the commands the host drops into DIR (the shared repo dir).
#
# Protocol (every file is written to a temporary name and renamed, so a reader never sees half):
#   DIR/ready      written once set-up is done: "ok NIC" or "FAIL why" (the agent then exits 1)
#   DIR/cmd/N.sh   the host's N-th command (N = 1, 2, …); run at once with bash, in the background
#   DIR/out/N.log  its stdout and stderr, as they come
#   DIR/out/N.rc   its exit status, written when it has exited
#   DIR/stop       the host is done: stop polling, wait (bounded) for running commands, exit
set -uo pipefail
name="$1" ip="$2" mac="$3" dir="$4"
mkdir -p "$dir/cmd" "$dir/out"

put() { # put FILE TEXT — atomic write
  printf '%s\n' "$2" >"$1.tmp.$$" && mv -f "$1.tmp.$$" "$1"
}
fail() {
  echo "[agent $name] FAIL: $*"
  { echo "--- ip -br link / addr:"; ip -br link; ip -br addr
    echo "--- rdma link show:"; rdma link show
    echo "--- dmesg (tail):"; dmesg | tail -n 15; } 2>&1 | sed "s/^/[agent $name] /"
  put "$dir/ready" "FAIL $*"
  exit 1
}

# The NIC is the interface with the MAC the host gave this guest's virtio-net device.
nic=""
for d in /sys/class/net/*; do
  [[ "$(cat "$d/address" 2>/dev/null)" == "$mac" ]] && nic="$(basename "$d")"
done
[[ -n "$nic" ]] || fail "no interface with MAC $mac"
ip link set lo up
ip addr replace "$ip/24" dev "$nic" || fail "ip addr $ip on $nic"
ip link set "$nic" up || fail "ip link set $nic up"
if [[ -z "${CI_GUEST_SKIP_RXE:-}" ]]; then # CI_GUEST_SKIP_RXE: self-test of the check below
  modprobe rdma_rxe || fail "modprobe rdma_rxe"
  modprobe sch_netem || fail "modprobe sch_netem"
  rdma link add rxe0 type rxe netdev "$nic" || fail "rdma link add rxe0 type rxe netdev $nic"
fi
rdma link show rxe0/1 >/dev/null 2>&1 || fail "rxe0 missing: 'rdma link show rxe0/1' finds no such link"
for _ in $(seq 1 100); do # bounded poll for the port (normally immediate)
  rdma link show rxe0/1 | grep -q 'state ACTIVE' && break
  sleep 0.1
done
rdma link show rxe0/1 | grep -q 'state ACTIVE' || fail "rxe0 port not ACTIVE: $(rdma link show rxe0/1)"
want="$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${ip//./ })"
gid1="$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)"
[[ "$gid1" == "$want" ]] || fail "rxe0 GID index 1 is '$gid1', expected $want (::ffff:$ip)"
ulimit -l unlimited
mkdir -p /tmp/rig && cp "${RIG_BIN:?}" /tmp/rig/rdmaxfer || fail "copying $RIG_BIN to /tmp/rig"
echo "[agent $name] rxe0 ACTIVE on $nic $ip/24, GID[1]=$gid1, $(nproc) vCPU, $(($(awk '/MemTotal/ {print $2}' /proc/meminfo) >> 10)) MiB"
put "$dir/ready" "ok $nic"

n=1
while :; do
  if [[ -e "$dir/cmd/$n.sh" ]]; then
    (
      NIC="$nic" bash "$dir/cmd/$n.sh" >"$dir/out/$n.log" 2>&1 </dev/null
      put "$dir/out/$n.rc" "$?"
    ) &
    n=$((n + 1))
    continue
  fi
  [[ -e "$dir/stop" ]] && break
  sleep 0.05 # poll interval of the command queue
done
echo "[agent $name] stop: $((n - 1)) commands run"
# Commands still running get 10 s, then the guest powers off under them.
for _ in $(seq 1 100); do
  [[ -z "$(jobs -rp)" ]] && exit 0
  sleep 0.1
done
echo "[agent $name] commands still running at stop: $(jobs -rp | tr '\n' ' ')"
exit 0
