#!/usr/bin/env bash
# ci/rig-agent.sh NAME IP MAC DIR [IP2 MAC2] — runs INSIDE one rig guest (ci/rig.sh): puts IP/24
# and rxe0 on the virtio NIC with MAC (and IP2/24 and rxe1 on the one with MAC2: the second wire),
# then runs the commands the host drops into DIR (the shared repo dir), with NIC (and NIC2) set to
# the interfaces' names.
#
# Protocol (every file is written to a temporary name and renamed, so a reader never sees half):
#   DIR/ready      written once set-up is done: "ok NIC" or "FAIL why" (the agent then exits 1)
#   DIR/cmd/N.sh   the host's N-th command (N = 1, 2, …); run at once with bash, in the background
#   DIR/out/N.log  its stdout and stderr, as they come
#   DIR/out/N.rc   its exit status, written when it has exited
#   DIR/stop       the host is done: stop polling, wait (bounded) for running commands, exit
set -uo pipefail
name="$1" ip="$2" mac="$3" dir="$4" ip2="${5:-}" mac2="${6:-}"
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

# The interface with the MAC the host gave one of this guest's virtio-net devices.
nic_of() {
  local d
  for d in /sys/class/net/*; do
    [[ "$(cat "$d/address" 2>/dev/null)" == "$1" ]] && basename "$d"
  done
}
ip link set lo up
if [[ -z "${CI_GUEST_SKIP_RXE:-}" ]]; then # CI_GUEST_SKIP_RXE: self-test of the check below
  modprobe rdma_rxe || fail "modprobe rdma_rxe"
  modprobe sch_netem || fail "modprobe sch_netem"
fi
# rail DEV IP MAC: IP/24 on the NIC with MAC, DEV (rxe) on it, ACTIVE with ::ffff:IP at GID 1;
# sets $rail_nic and $rail_gid.
rail() {
  local dev="$1" ip="$2" mac="$3"
  rail_nic="$(nic_of "$mac")"
  [[ -n "$rail_nic" ]] || fail "no interface with MAC $mac"
  ip addr replace "$ip/24" dev "$rail_nic" || fail "ip addr $ip on $rail_nic"
  ip link set "$rail_nic" up || fail "ip link set $rail_nic up"
  if [[ -z "${CI_GUEST_SKIP_RXE:-}" ]]; then
    rdma link add "$dev" type rxe netdev "$rail_nic" || fail "rdma link add $dev type rxe netdev $rail_nic"
  fi
  rdma link show "$dev/1" >/dev/null 2>&1 || fail "$dev missing: 'rdma link show $dev/1' finds no such link"
  for _ in $(seq 1 100); do # bounded poll for the port (normally immediate)
    rdma link show "$dev/1" | grep -q 'state ACTIVE' && break
    sleep 0.1
  done
  rdma link show "$dev/1" | grep -q 'state ACTIVE' || fail "$dev port not ACTIVE: $(rdma link show "$dev/1")"
  local want
  want="$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${ip//./ })"
  rail_gid="$(cat "/sys/class/infiniband/$dev/ports/1/gids/1" 2>/dev/null)"
  [[ "$rail_gid" == "$want" ]] || fail "$dev GID index 1 is '$rail_gid', expected $want (::ffff:$ip)"
}
rail rxe0 "$ip" "$mac"
nic="$rail_nic" gid1="$rail_gid" nic2="" second=""
if [[ -n "$ip2" ]]; then
  rail rxe1 "$ip2" "$mac2"
  nic2="$rail_nic" second=", rxe1 ACTIVE on $rail_nic $ip2/24"
fi
ulimit -l unlimited
mkdir -p /tmp/rig && cp "${RIG_BIN:?}" /tmp/rig/rdmaxfer || fail "copying $RIG_BIN to /tmp/rig"
echo "[agent $name] rxe0 ACTIVE on $nic $ip/24, GID[1]=$gid1$second, $(nproc) vCPU, $(($(awk '/MemTotal/ {print $2}' /proc/meminfo) >> 10)) MiB"
put "$dir/ready" "ok $nic"

n=1
while :; do
  if [[ -e "$dir/cmd/$n.sh" ]]; then
    (
      NIC="$nic" NIC2="$nic2" bash "$dir/cmd/$n.sh" >"$dir/out/$n.log" 2>&1 </dev/null
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
