#!/usr/bin/env bash
# ci/guest.sh [--] CMD... — boot a qemu guest (virtme-ng), bring up rxe0, run CMD at the repo root, exit with its status.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ "${1:-}" == "--" ]] && shift
(($#)) || ci_die "usage: ci/guest.sh [--] CMD [ARG...]"
ci_path
ci_find_vng || ci_die "virtme-ng (vng) not found: run ci/setup.sh"
kernel="$(ci_find_kernel)" || ci_die "no guest kernel with rdma_rxe.ko: run ci/setup.sh"
timeout_s="${CI_GUEST_TIMEOUT:-1200}"

# The guest gets no host environment, and vng --exec takes one string: write a script and exec that.
mkdir -p "$CI_ROOT/target/ci"
script="$(mktemp "$CI_ROOT/target/ci/guest-cmd.XXXXXX")"
trap 'rm -f "$script"' EXIT
{
  echo '#!/bin/bash'
  echo 'exec 2>&1  # one ordered output stream'
  echo 'set -eu'
  while IFS= read -r name; do
    printf 'export %s=%q\n' "$name" "${!name}"
  done < <(compgen -e | grep -E '^(RDMAXFER_[A-Z0-9_]*|RUST_BACKTRACE|RUST_LOG|RUST_LIB_BACKTRACE|RUST_TEST_[A-Z_]*|CI|CI_[A-Z0-9_]*)$' || true)
  for name in ${CI_GUEST_ENV:-}; do # extra variables to pass, by name
    if [[ -v "$name" ]]; then printf 'export %s=%q\n' "$name" "${!name}"; fi
  done
  printf 'cd %q\n' "$CI_ROOT"
  printf 'bash %q || { echo "[guest] guest-init failed: not running the command"; exit 97; }\n' "$CI_ROOT/ci/guest-init.sh"
  echo 'ulimit -l unlimited'
  printf 'exec'; printf ' %q' "$@"; echo
} >"$script"

ci_log "guest: $kernel, command: $*"
start=$SECONDS
# qemu re-opens /proc/self/fd/1 and /proc/self/fd/2 as files (own offset, O_TRUNC): if they were
# regular files it would clobber them, so always hand it a pipe. stdin is /dev/null (CI has none).
set +e
timeout -k 30 "$timeout_s" "${CI_VNG[@]}" --disable-kvm --run "$kernel" \
  --memory "${CI_GUEST_MEMORY:-3G}" --cpus "${CI_GUEST_CPUS:-2}" \
  --rwdir "$CI_ROOT" --cwd "$CI_ROOT" --exec "bash $(printf '%q' "$script")" </dev/null 2>&1 | cat
rc="${PIPESTATUS[0]}"
set -e
if ((rc == 124 || rc == 137)); then
  ci_log "guest: TIMED OUT after ${timeout_s}s (CI_GUEST_TIMEOUT), killed"
fi
ci_log "guest: exit status $rc after $((SECONDS - start))s"
exit "$rc"
