#!/usr/bin/env bash
# ci/setup.sh — idempotent host set-up (root, Debian bookworm): packages, rdma-core pin, virtme-ng, cargo, cbindgen.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(qemu-system-x86 linux-image-amd64 rdma-core ibverbs-providers libibverbs-dev librdmacm-dev
  ibverbs-utils rdmacm-utils perftest libclang-dev clang kmod busybox-static iproute2 pkg-config
  valgrind gdb python3 python3-pip mmdebstrap podman rsync time openssh-server openssh-client abigail-tools)
RDMA_CORE_PIN="44.0-2"
VNG_VERSION="1.42"

ci_path
[[ "$(id -u)" == 0 ]] || ci_die "ci/setup.sh must run as root (it installs Debian packages)"
command -v dpkg-query >/dev/null 2>&1 || ci_die "dpkg-query not found: this rig needs Debian bookworm"

# 1. Debian packages (apt only when something is missing).
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  ci_log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-q -o DPkg::Lock::Timeout=600)
  apt-get "${apt_opts[@]}" update || ci_die "apt-get update failed"
  apt-get "${apt_opts[@]}" install -y "${missing[@]}" || ci_die "apt-get install failed: ${missing[*]}"
else
  ci_log "apt: all ${#PACKAGES[@]} packages already installed"
fi

# 2. rdma-core pin: the crate's bindings and tests are written against this exact version.
for p in rdma-core libibverbs-dev; do
  v="$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)"
  [[ "$v" == "$RDMA_CORE_PIN" ]] ||
    ci_die "$p is '${v:-not installed}', but this project is pinned to rdma-core $RDMA_CORE_PIN (Debian bookworm); install $p=$RDMA_CORE_PIN"
done
ci_log "rdma-core pin ok: $RDMA_CORE_PIN"

# 3. virtme-ng from PyPI (pip may refuse a system Python without --break-system-packages).
have="$(python3 -c 'import importlib.metadata as m; print(m.version("virtme-ng"))' 2>/dev/null || true)"
if [[ "$have" == "$VNG_VERSION" ]]; then
  ci_log "pip: virtme-ng $VNG_VERSION already installed"
else
  ci_log "pip: installing virtme-ng==$VNG_VERSION (found '${have:-none}')"
  pip_cmd=(python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "virtme-ng==$VNG_VERSION")
  if ! out="$("${pip_cmd[@]}" 2>&1)"; then
    if grep -q externally-managed <<<"$out"; then
      "${pip_cmd[@]}" --break-system-packages || ci_die "pip install virtme-ng==$VNG_VERSION failed"
    else
      printf '%s\n' "$out" >&2
      ci_die "pip install virtme-ng==$VNG_VERSION failed"
    fi
  fi
  command -v pyenv >/dev/null 2>&1 && pyenv rehash 2>/dev/null || true
fi
ci_find_vng || ci_die "virtme-ng installed but neither 'vng' nor the virtme_ng module is usable"
ci_log "vng: ${CI_VNG[0]} ($(command -v "${CI_VNG[0]}"))"

# 4. Guest kernel with rdma_rxe.
kernel="$(ci_find_kernel)" || ci_die "no /boot/vmlinuz-*-amd64 with rdma_rxe.ko in /lib/modules/<ver>: install linux-image-amd64"
ci_log "guest kernel: $kernel"

# 5. Rust toolchain (rustup's ~/.cargo/bin is added to PATH by ci_path).
command -v cargo >/dev/null 2>&1 ||
  ci_die "cargo not found (looked on PATH and in ~/.cargo/bin): install Rust >= 1.85 with rustup (https://rustup.rs: curl --proto '=https' -sSf https://sh.rustup.rs | sh -s -- -y), then re-run"
cargo fmt --version >/dev/null 2>&1 || ci_die "rustfmt missing: rustup component add rustfmt"
cargo clippy --version >/dev/null 2>&1 || ci_die "clippy missing: rustup component add clippy"
ci_log "rust: $(rustc --version) / $(cargo --version)"

# 6. cbindgen, pinned: it generates include/rdmaxfer.h (ci/gen-header.sh; CI checks it is current).
if [[ "$(cbindgen --version 2>/dev/null || true)" == "cbindgen $CBINDGEN_VERSION" ]]; then
  ci_log "cbindgen $CBINDGEN_VERSION already installed"
else
  ci_log "cargo: installing cbindgen $CBINDGEN_VERSION"
  cargo install -q cbindgen --version "$CBINDGEN_VERSION" --locked || ci_die "cargo install cbindgen $CBINDGEN_VERSION failed"
fi

# 7. cargo-afl, pinned: AFL++ fuzzing on stable Rust (ci/fuzz.sh). Installing it also builds AFL++
# from the sources shipped in the crate (its build script; ~1-2 min with the install); the
# `config --build` below only does that if the runtime for this rustc is missing.
if [[ "$(cargo afl --version 2>/dev/null || true)" == "cargo-afl $CARGO_AFL_VERSION "* ]]; then
  ci_log "cargo-afl $CARGO_AFL_VERSION already installed"
else
  ci_log "cargo: installing cargo-afl $CARGO_AFL_VERSION (builds AFL++)"
  cargo install -q cargo-afl --version "$CARGO_AFL_VERSION" --locked || ci_die "cargo install cargo-afl $CARGO_AFL_VERSION failed"
fi
if ! out="$(cargo afl config --build 2>&1)" && ! grep -q 'already built' <<<"$out"; then
  printf '%s\n' "$out" >&2
  ci_die "cargo afl config --build failed (AFL++ for $(rustc --version))"
fi
ci_log "AFL++: $(cargo afl --version)"
ci_log "setup ok"
