# ci/lib.sh — helpers shared by the ci/ scripts (sourced, never run on its own).

CI_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CI_HOME="${HOME:-/root}"

ci_log() { printf '[ci] %s\n' "$*"; }
ci_die() { printf '[ci] ERROR: %s\n' "$*" >&2; exit 1; }

# Put rustup's cargo, pyenv's shims and pip's script directories on PATH (CI may start with a bare PATH).
ci_path() {
  local d
  for d in /usr/local/bin "$CI_HOME/.local/bin" "$CI_HOME/.pyenv/shims" "${CARGO_HOME:-$CI_HOME/.cargo}/bin"; do
    if [[ -d "$d" && ":$PATH:" != *":$d:"* ]]; then PATH="$d:$PATH"; fi
  done
  export PATH
}

# Set the array CI_VNG to the command that runs virtme-ng (the vng script, else python3 -m route).
ci_find_vng() {
  if command -v vng >/dev/null 2>&1; then
    CI_VNG=(vng)
  elif python3 -c 'import virtme_ng.run' >/dev/null 2>&1; then
    CI_VNG=(python3 -c 'import sys; from virtme_ng.run import main; sys.argv[0] = "vng"; sys.exit(main())')
  else
    return 1
  fi
}

# Print the newest /boot/vmlinuz-*-amd64 whose modules include rdma_rxe.ko (CI_KERNEL overrides).
ci_find_kernel() {
  if [[ -n "${CI_KERNEL:-}" ]]; then printf '%s\n' "$CI_KERNEL"; return 0; fi
  local k ver
  while IFS= read -r k; do
    ver="${k#/boot/vmlinuz-}"
    if [[ -d "/lib/modules/$ver" ]] && find "/lib/modules/$ver" -name 'rdma_rxe.ko*' -print -quit | grep -q .; then
      printf '%s\n' "$k"
      return 0
    fi
  done < <(compgen -G '/boot/vmlinuz-*-amd64' | sort -V -r)
  return 1
}

# The pinned cbindgen that generates include/rdmaxfer.h (installed by ci/setup.sh).
CBINDGEN_VERSION="0.27.0"
# cargo-afl (AFL++ for Rust, stable toolchain): ci/setup.sh installs it, ci/fuzz.sh uses it; fuzz/Cargo.toml pins the afl crate to the same version.
CARGO_AFL_VERSION="0.18.2"

# ci_guest_bench OUT GUEST_SCRIPT [ARG...] — release build of the CLI, a fresh OUT, then
# GUEST_SCRIPT OUT ARG... in one guest (the ci/bench-*.sh wrappers).
ci_guest_bench() {
  local out="$1" script="$2"
  shift 2
  cargo build --release --features cli --bin rdmaxfer
  rm -rf "$out"
  mkdir -p "$out"
  ci/guest.sh -- bash "$script" "$out" "$@"
}
