#!/usr/bin/env bash
# ci/gen-header.sh [--check] — regenerate include/rdmaxfer.h from src/capi/ with the pinned cbindgen;
# --check: change nothing, fail when the committed header differs from what cbindgen generates.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) ci_die "usage: ci/gen-header.sh [--check]" ;;
esac
have="$(cbindgen --version 2>/dev/null || true)"
[[ "$have" == "cbindgen $CBINDGEN_VERSION" ]] ||
  ci_die "needs cbindgen $CBINDGEN_VERSION (found '${have:-none}'): run ci/setup.sh, or cargo install cbindgen --version $CBINDGEN_VERSION --locked"

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
cbindgen -q --config cbindgen.toml --crate rdmaxfer --output "$tmp"
if ((check)); then
  if ! diff -u include/rdmaxfer.h "$tmp"; then
    ci_die "include/rdmaxfer.h is stale (the diff above is what cbindgen $CBINDGEN_VERSION generates now): run ci/gen-header.sh and commit it"
  fi
  ci_log "include/rdmaxfer.h is current"
else
  mkdir -p include
  cp "$tmp" include/rdmaxfer.h
  ci_log "wrote include/rdmaxfer.h"
fi
