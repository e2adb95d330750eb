#!/usr/bin/env bash
# ci/guest-init.sh — runs INSIDE the guest: rxe0 on dummy netdev rx0 (198.18.0.1/24), verified ACTIVE;
# then rxe1, rxe2, rxe3 on rx1, rx2, rx3 (198.18.N.1/24) for the multi-rail tests (best effort: a
# missing one is reported here and fails only the tests that need it).
set -euo pipefail

missing() {
  echo "rxe0 missing: $*" >&2
  echo "--- rdma link show:" >&2; rdma link show >&2 || true
  echo "--- ibv_devices:" >&2; ibv_devices >&2 || true
  echo "--- lsmod | grep rxe:" >&2; lsmod | grep rxe >&2 || true
  echo "--- dmesg (tail):" >&2; dmesg | tail -n 20 >&2 || true
  exit 1
}

if [[ -n "${CI_GUEST_SKIP_RXE:-}" ]]; then
  echo "[guest-init] CI_GUEST_SKIP_RXE set: skipping rxe set-up (self-test of the check below)"
else
  modprobe rdma_rxe || missing "modprobe rdma_rxe failed"
  ip link set lo up
  ip link show rx0 >/dev/null 2>&1 || ip link add rx0 type dummy
  ip addr replace 198.18.0.1/24 dev rx0
  ip link set rx0 up
  rdma link show rxe0/1 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev rx0 || missing "rdma link add failed"
fi
ulimit -l unlimited

rdma link show rxe0/1 >/dev/null 2>&1 || missing "'rdma link show rxe0/1' finds no such link"
for _ in $(seq 1 100); do # bounded poll for the port to come up (normally immediate)
  rdma link show rxe0/1 | grep -q 'state ACTIVE' && break
  sleep 0.1
done
rdma link show rxe0/1 | grep -q 'state ACTIVE' || missing "port not ACTIVE: $(rdma link show rxe0/1)"
ibv_devinfo -d rxe0 2>/dev/null | grep -q 'PORT_ACTIVE' || missing "'ibv_devinfo -d rxe0' shows no PORT_ACTIVE port"
gid1="$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null || true)"
type1="$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1 2>/dev/null || true)"
[[ "$gid1" == 0000:0000:0000:0000:0000:ffff:c612:0001 && "$type1" == "RoCE v2" ]] ||
  missing "GID index 1 is '$gid1' ($type1), expected ::ffff:198.18.0.1 (RoCE v2)"
echo "[guest-init] rxe0 ACTIVE on rx0 198.18.0.1/24; GID[1]=$gid1 ($type1); ulimit -l $(ulimit -l)"

if [[ -z "${CI_GUEST_SKIP_RXE:-}" ]]; then
  # rxe1: the second rail; rxe2, rxe3: rails the rail-loss tests take down (others never do).
  for n in 1 2 3; do
    ip link show "rx$n" >/dev/null 2>&1 || ip link add "rx$n" type dummy
    ip addr replace "198.18.$n.1/24" dev "rx$n"
    ip link set "rx$n" up
    rdma link show "rxe$n/1" >/dev/null 2>&1 || rdma link add "rxe$n" type rxe netdev "rx$n" || true
  done
  for n in 1 2 3; do
    for _ in $(seq 1 100); do
      rdma link show "rxe$n/1" 2>/dev/null | grep -q 'state ACTIVE' && break
      sleep 0.1
    done
    if rdma link show "rxe$n/1" 2>/dev/null | grep -q 'state ACTIVE'; then
      echo "[guest-init] rxe$n ACTIVE on rx$n 198.18.$n.1/24"
    else
      echo "[guest-init] WARNING: rxe$n is not ACTIVE: the multi-rail tests will fail" >&2
    fi
  done
fi
