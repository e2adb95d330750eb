#!/usr/bin/env bash
# ci/capi-examples.sh — install librdmaxfer (ci/install.sh) into target/capi/prefix and build the C
# examples (examples/c) against it with pkg-config into target/capi/bin, as a C user would.
# tests/device_capi.rs runs them in the guest (which sees the repo, target/ included).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path

prefix="$CI_ROOT/target/capi/prefix"
out="$CI_ROOT/target/capi/bin"
PREFIX="$prefix" RDMAXFER_INSTALL_TOOL=0 bash ci/install.sh
pc="$prefix/lib/pkgconfig"
ci_log "pkg-config --cflags --libs rdmaxfer: $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs rdmaxfer)"
make -s -C examples/c PKG_CONFIG_PATH="$pc" OUT="$out" clean all
ci_log "C examples: $(cd "$out" && echo *)"
