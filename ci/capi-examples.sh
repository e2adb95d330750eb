#!/usr/bin/env bash
# ci/capi-examples.sh — install librdmaxfer (ci/install.sh) into target/capi/prefix and build the C
# examples (examples/c) against it with pkg-config into target/capi/bin, as a C user would.
# tests/device_capi/ runs them in the guest (which sees the repo, target/ included).
# Built here, the library has no cargo features, unlike the rest of CI (--all-features): that is
# what ci/install.sh installs by default, i.e. what a C user links; no feature changes the C API
# (src/capi has no cfg(feature)); the only feature, tokio, adds the Rust `aio` module, which the C
# library would only carry as dead weight. Given one (CI_CAPI_LIB, below), the feature-less library
# is still checked here to compile (`cargo check`: a build would write target/debug's
# librdmaxfer.so, whose name has no hash, under the all-features one, and the steps after would
# build that again).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path

# The release profile, without its fat LTO and single codegen unit (the same code, optimised;
# those two alone cost minutes of both cores here) and with line tables only (valgrind reads
# the library's debug info at every start in the guest): CI_CAPI_FULL_RELEASE=1 keeps them.
if [[ "${CI_CAPI_FULL_RELEASE:-0}" != 1 ]]; then
  export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
  export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
fi
# CI_CAPI_LIB: a librdmaxfer.so built already (ci/test.sh's device-test build: all features, the
# crate at opt-level 1), installed as it is instead of building the release library here.
if [[ -n "${CI_CAPI_LIB:-}" ]]; then
  export RDMAXFER_PREBUILT_LIB="$CI_CAPI_LIB"
fi
prefix="$CI_ROOT/target/capi/prefix"
out="$CI_ROOT/target/capi/bin"
PREFIX="$prefix" RDMAXFER_INSTALL_TOOL=0 bash ci/install.sh
pc="$prefix/lib/pkgconfig"
ci_log "pkg-config --cflags --libs rdmaxfer: $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs rdmaxfer)"
make -s -C examples/c PKG_CONFIG_PATH="$pc" OUT="$out" clean all
ci_log "C examples: $(cd "$out" && echo *)"
if [[ -n "${CI_CAPI_LIB:-}" ]]; then
  ci_log "the feature-less library compiles: cargo check --lib"
  cargo check -q --lib
fi
