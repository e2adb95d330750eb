#!/usr/bin/env bash
# ci/image.sh — the CI container: an OCI image built from Debian bookworm packages alone (mmdebstrap,
# then podman import), with rdma-core pinned at 44.0-2 and the tools the device tests spawn. Writes
# target/ci/image/rdmaxfer-ci.oci.tar (podman save --format oci-archive); reuses it while this
# script (and so its package list) and the apt sources are unchanged. docs/container.md;
# ci/guest-container.sh runs it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RDMA_CORE_PIN="44.0-2"
# Built from rdma-core's source: every one pinned to the same version.
PINNED=(rdma-core libibverbs1 librdmacm1 ibverbs-providers ibverbs-utils rdmacm-utils)
# What the device tests and their helpers run besides the test binary (bash, setpriv, script,
# stty, cmp, kill, mount, ip, rdma, ss, ibv_*); perftest and kmod for use by hand.
TOOLS=(bash coreutils diffutils util-linux bsdutils procps mount iproute2 kmod perftest)
# Small, since the guest's podman load unpacks it on an emulated CPU: merged /usr by mmdebstrap's
# hook (usr-is-merged, not usrmerge, which pulls in perl), and no manual pages, documentation
# (copyrights kept) or locales.
EXCLUDE=('/usr/share/man/*' '/usr/share/doc/*' '/usr/share/info/*' '/usr/share/locale/*' '/usr/share/lintian/*')
IMAGE_NAME="localhost/rdmaxfer-ci:rdma-core-$RDMA_CORE_PIN"
# The archive this host installs from (its apt sources, deb822 or one-line), bookworm as here.
SOURCES="${CI_IMAGE_SOURCES:-/etc/apt/sources.list.d/debian.sources}"
[[ -f "$SOURCES" ]] || SOURCES=/etc/apt/sources.list

out_dir="$CI_ROOT/target/ci/image"
archive="$out_dir/rdmaxfer-ci.oci.tar"
stamp="$out_dir/rdmaxfer-ci.stamp"
manifest="$out_dir/rdmaxfer-ci.packages.txt"

ci_path
[[ "$(id -u)" == 0 ]] || ci_die "ci/image.sh must run as root (mmdebstrap chroots; podman)"
[[ -f "$SOURCES" ]] || ci_die "no apt sources at $SOURCES (set CI_IMAGE_SOURCES to a sources.list file)"
for tool in mmdebstrap podman sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || ci_die "$tool not found: run ci/setup.sh (it installs mmdebstrap and podman)"
done

includes=()
for p in "${PINNED[@]}"; do includes+=("$p=$RDMA_CORE_PIN"); done
includes+=("${TOOLS[@]}")
mm_opts=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
for x in "${EXCLUDE[@]}"; do mm_opts+=("--dpkgopt=path-exclude=$x"); done
mm_opts+=("--dpkgopt=path-include=/usr/share/doc/*/copyright")

# The inputs: this script (which holds the package list) and the resolved include list.
key="$({ cat "${BASH_SOURCE[0]}" "$SOURCES"; apt-config dump | grep '^Acquire::'; printf '%s\n' "${includes[@]}"; } | sha256sum | cut -d' ' -f1)"
if [[ -s "$archive" && -f "$stamp" && "$(cat "$stamp")" == "$key" ]]; then
  ci_log "image: $archive is current (inputs $key), not rebuilding"
  exit 0
fi

start=$SECONDS
mkdir -p "$out_dir"
rm -f "$stamp"
work="$(mktemp -d "$out_dir/work.XXXXXX")"
chmod 755 "$work" # apt downloads as user _apt
store="$work/podman"
# podman refuses a runroot longer than 50 characters ("the specified runroot is longer than 50
# characters": CI's checkout path made the one under the work dir 51), so it gets a short one.
runroot="$(mktemp -d /tmp/rxci-run.XXXXXX)"
# A private store, temp dir and event log under the work dir, and no systemd: nothing of the
# host's podman set-up (storage, /var/tmp, journald, cgroup manager) is needed or touched.
mkdir -p "$store/tmp"
export TMPDIR="$work"
podman_cmd=(podman --root "$store/root" --runroot "$runroot" --storage-driver vfs
  --tmpdir "$store/tmp" --cgroup-manager cgroupfs --events-backend file)
cleanup() {
  # vfs layers may hold files only root can remove; the private store goes with the work dir.
  "${podman_cmd[@]}" rmi -a -f >/dev/null 2>&1 || true
  rm -rf "$work" "$runroot"
}
trap cleanup EXIT

ci_log "image: mmdebstrap bookworm (variant apt) + ${includes[*]}"
# How this host's apt reaches that archive (validity checks, proxies, credentials), which
# mmdebstrap's own apt would not read: the host's Acquire settings, and its auth files by path.
hostconf="$work/host-apt.conf"
apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::|Retries|ForceIPv4|Max-ValidTime)' >"$hostconf" || true
# A proxy given to this process by environment, which apt in mmdebstrap's chroot would not see.
for v in http https; do
  for e in "${v}_proxy" "${v^^}_PROXY"; do
    if [[ -n "${!e:-}" ]]; then
      printf 'Acquire::%s::Proxy "%s";\n' "$v" "${!e}" >>"$hostconf"
      break
    fi
  done
done
mm_opts+=("--aptopt=$hostconf")
[[ -f /etc/apt/auth.conf ]] && mm_opts+=("--aptopt=Dir::Etc::netrc \"/etc/apt/auth.conf\"")
[[ -d /etc/apt/auth.conf.d ]] && mm_opts+=("--aptopt=Dir::Etc::netrcparts \"/etc/apt/auth.conf.d\"")
ci_log "image: host apt settings passed on: $(sed 's/::Proxy .*/::Proxy (set)/' "$hostconf" | tr '\n' ' ')"

# The customize hook records every package's version from the rootfs itself (checked below).
list="$work/packages.txt"
TMPDIR="$work" timeout -k 30 1800 mmdebstrap --mode=root --variant=apt --format=tar \
  --include="$(IFS=,; echo "${includes[*]}")" "${mm_opts[@]}" \
  --customize-hook="chroot \"\$1\" dpkg-query -W -f='\${Package}\t\${Version}\t\${db:Status-Abbrev}\n' >$(printf %q "$list")" \
  bookworm "$work/rootfs.tar" "$SOURCES" ||
  ci_die "mmdebstrap failed (exit $?)"

# The pin, as dpkg in the rootfs sees it: fail loudly on any other version or state.
[[ -s "$list" ]] || ci_die "no package list from the rootfs (customize hook failed?)"
bad=0
for p in "${PINNED[@]}"; do
  line="$(awk -F'\t' -v p="$p" '$1 == p' "$list")"
  IFS=$'\t' read -r _ version state <<<"$line"
  if [[ "${version:-}" != "$RDMA_CORE_PIN" || "${state:-}" != "ii " ]]; then
    printf '[ci] ERROR: in the image, %s is %s (state %s), pinned to %s\n' "$p" "${version:-missing}" "${state:-none}" "$RDMA_CORE_PIN" >&2
    bad=1
  fi
done
((bad == 0)) || ci_die "rdma-core pin check failed inside the image rootfs"
ci_log "image: pin ok inside the rootfs ($(printf '%s ' "${PINNED[@]}")= $RDMA_CORE_PIN)"

ci_log "image: podman import as $IMAGE_NAME"
timeout -k 10 600 "${podman_cmd[@]}" import \
  --change 'CMD ["/bin/bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL org.opencontainers.image.title=rdmaxfer-ci" \
  --change "LABEL org.opencontainers.image.description=Debian bookworm with rdma-core $RDMA_CORE_PIN for the rdmaxfer device tests" \
  --change "LABEL io.rdmaxfer.rdma-core=$RDMA_CORE_PIN" \
  --change "LABEL io.rdmaxfer.inputs=$key" \
  --message "ci/image.sh: bookworm + rdma-core $RDMA_CORE_PIN" --quiet \
  "$work/rootfs.tar" "$IMAGE_NAME" >/dev/null ||
  ci_die "podman import failed"
rm -f "$work/rootfs.tar"

ci_log "image: podman save --format oci-archive"
rm -f "$archive.new"
timeout -k 10 600 "${podman_cmd[@]}" save --quiet --format oci-archive -o "$archive.new" "$IMAGE_NAME" ||
  ci_die "podman save failed"
mv -f "$archive.new" "$archive"
mv -f "$list" "$manifest"
echo "$key" >"$stamp"
ci_log "image: $archive ($(du -h "$archive" | cut -f1), $(wc -l <"$manifest") packages in $manifest) built in $((SECONDS - start))s"
