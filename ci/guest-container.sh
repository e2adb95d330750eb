#!/usr/bin/env bash
# ci/guest-container.sh 'BIN [FILTER...]'... — runs INSIDE the guest (after ci/guest-init.sh):
# loads the CI image (ci/image.sh's OCI archive) into a podman store in the guest's own /tmp,
# proves the rdma-core pin and rxe0 inside a container, then runs each device test binary in its
# own container (--privileged --network host, the repo mounted at its path) with --ignored
# --test-threads=1 and the libtest name filters given in the same word, if any (so paths must
# have no spaces). Their libtest output goes to stdout. Exit 0 only if every binary passed.
# docs/container.md.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
archive="${CI_IMAGE_ARCHIVE:-$root/target/ci/image/rdmaxfer-ci.oci.tar}"
pin="44.0-2"
limit="${CI_DEVICE_TEST_TIMEOUT:-600}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
# Guest-only writable space: the host's root (and so /var/lib/containers) is read-only here.
state="${CI_PODMAN_DIR:-/tmp/rdmaxfer-podman}"

log() { printf '[guest-container] %s\n' "$*"; }
die() { printf '[guest-container] ERROR: %s\n' "$*" >&2; exit 1; }

(($#)) || die "usage: ci/guest-container.sh 'BIN [FILTER...]'..."
for spec in "$@"; do
  read -r b _ <<<"$spec"
  [[ -x "$b" ]] || die "test binary $b: not an executable file"
  # Only the repo is mounted into the container (at the same path).
  [[ "$(realpath "$b")" == "$root"/* ]] || die "test binary $b is outside the repo $root (only that is mounted)"
done
command -v podman >/dev/null 2>&1 || die "podman not found (install it on the host: ci/setup.sh)"
[[ -s "$archive" ]] || die "no image archive $archive: run 'bash ci/image.sh' on the host first"

# drop_store — remove the store (overlay keeps a mount under it).
drop_store() {
  [[ -d "$state" ]] || return 0
  awk -v d="$state/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r | xargs -r umount -l
  rm -rf "$state"
}
drop_store || die "cannot remove the old store $state"
# The store and podman's own state: overlay layers on the guest's tmpfs, containers without
# cgroups (no systemd in the guest), events to a file, nothing under /var or /etc.
mkdir -p "$state"/{root,run,tmp,net} || die "cannot create $state"
cat >"$state/containers.conf" <<EOF
[containers]
log_driver = "k8s-file"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$state/events.log"
tmp_dir = "$state/tmp"
image_copy_tmp_dir = "$state/tmp"
[network]
network_config_dir = "$state/net"
EOF
export CONTAINERS_CONF="$state/containers.conf" TMPDIR="$state/tmp"
driver="${CI_PODMAN_DRIVER:-overlay}"
pm=(podman --root "$state/root" --runroot "$state/run" --storage-driver "$driver")

# stop_all — remove every container of this (private) store, e.g. one whose podman timed out.
stop_all() { timeout -k 5 60 "${pm[@]}" rm -a -f -t 0 >/dev/null 2>&1 || true; }
trap 'stop_all; [[ -n "${CI_PODMAN_KEEP:-}" ]] || drop_store' EXIT

log "podman $(podman --version | awk '{print $3}'), storage $driver in $state"
t0=$SECONDS
out="$(timeout -k 10 900 "${pm[@]}" load --quiet -i "$archive" 2>&1)" ||
  die "podman load -i $archive failed: $out"
image="$(awk '/^Loaded image/ { sub(/^[^:]*: */, ""); print; exit }' <<<"$out")"
[[ -n "$image" ]] || die "podman load printed no image name: $out"
log "loaded $image in $((SECONDS - t0))s"

# run_in NAME LIMIT CMD... — CMD in a fresh container of the image (the flags docs/container.md gives).
run_in() {
  local name="$1" secs="$2" env_args=() v rc
  shift 2
  while IFS= read -r v; do env_args+=(--env "$v"); done < <(compgen -e | grep -E '^(RDMAXFER_[A-Z0-9_]*|RUST_BACKTRACE|RUST_LOG|RUST_TEST_[A-Z_]*)$' || true)
  timeout -k 10 "$secs" "${pm[@]}" run --rm --name "$name" --pull never --cgroups disabled --privileged --network host \
    --ulimit memlock=-1:-1 -v "$root:$root" -w "$root" "${env_args[@]}" "$image" "$@" </dev/null
  rc=$?
  if ((rc == 124 || rc == 137)); then
    echo
    log "$name: timed out after ${secs}s (or killed)"
    stop_all
  fi
  return "$rc"
}

# --privileged copies the device nodes present when a container starts: rdma_ucm (RDMA CM's
# /dev/infiniband/rdma_cm) must be loaded before, not autoloaded by the first test that uses it.
[[ -c /dev/infiniband/rdma_cm ]] || modprobe rdma_ucm || die "modprobe rdma_ucm failed"
[[ -c /dev/infiniband/rdma_cm ]] || die "/dev/infiniband/rdma_cm missing after modprobe rdma_ucm"

# Prove the image before trusting its test results: the pin and rxe0, seen from inside.
# shellcheck disable=SC2016 # expanded by the container's bash
probe="$(run_in rdmaxfer-ci-probe 300 bash -c \
  'dpkg-query -W -f="\${Package} \${Version}\n" rdma-core libibverbs1 librdmacm1 ibverbs-providers; echo ---; ibv_devices; ls /dev/infiniband; echo ---; ulimit -l' 2>&1)" ||
  die "probe container failed: $probe"
printf '%s\n' "$probe" | sed 's/^/[guest-container] probe: /'
for p in rdma-core libibverbs1 librdmacm1 ibverbs-providers; do
  grep -qx "$p $pin" <<<"$probe" || die "in the container $p is not $pin (dpkg-query above)"
done
grep -qE '^[[:space:]]+rxe0[[:space:]]' <<<"$probe" || die "ibv_devices in the container does not list rxe0 (is rxe0 up? ci/guest-init.sh)"
grep -qx rdma_cm <<<"$probe" || die "no /dev/infiniband/rdma_cm in the container (RDMA CM tests would fail)"
[[ "$(tail -n 1 <<<"$probe")" == unlimited ]] || die "ulimit -l in the container is not unlimited"
log "pin ok in the container (rdma-core $pin), ibv_devices lists rxe0, rdma_cm there, memlock unlimited"

rc=0
for spec in "$@"; do
  read -r -a filters <<<"$spec"
  bin="${filters[0]}"
  filters=("${filters[@]:1}")
  name="$(basename "$bin")"
  log "=== $name --ignored --test-threads=1 ${filters[*]} (container, limit ${limit}s)"
  tlog="$state/$name.log"
  run_in "rdmaxfer-ci-${name//[^a-zA-Z0-9_.-]/_}" "$limit" "$(realpath "$bin")" --ignored --test-threads=1 "${filters[@]}" 2>&1 | tee "$tlog"
  r="${PIPESTATUS[0]}"
  if ((r != 0)); then
    rc=1
    if grep -qE '^test result: .* [1-9][0-9]* failed' "$tlog"; then
      log "$name FAILED (exit $r)"
    else
      echo
      log "$name FAILED without a test summary (exit $r)"
    fi
  fi
done
log "done in $((SECONDS - t0))s: $( ((rc == 0)) && echo 'all passed' || echo 'FAILURES above')"
exit "$rc"
