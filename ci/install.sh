#!/usr/bin/env bash
# ci/install.sh — build librdmaxfer.so (release) and install it with include/rdmaxfer.h and rdmaxfer.pc.
#   PREFIX=DIR  where to install (default /usr/local): DIR/lib/librdmaxfer.so.X.Y.Z with the
#               librdmaxfer.so.X (SONAME) and librdmaxfer.so links, DIR/include/rdmaxfer.h,
#               DIR/lib/pkgconfig/rdmaxfer.pc (prefix=DIR).
#   DESTDIR=DIR staging root prepended to every path (packaging); the .pc still says PREFIX.
#   RDMAXFER_PROFILE=release|dev  cargo profile to build (default release).
# Then: PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs rdmaxfer
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path

prefix="${PREFIX:-/usr/local}"
[[ "$prefix" == /* ]] || prefix="$(realpath -m "$prefix")"
destdir="${DESTDIR:-}"
profile="${RDMAXFER_PROFILE:-release}"
case "$profile" in
  release) outdir=release ;;
  dev) outdir=debug ;;
  *) ci_die "RDMAXFER_PROFILE must be release or dev, not '$profile'" ;;
esac

read -r version target_dir < <(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
m = json.load(sys.stdin)
v = [p["version"] for p in m["packages"] if p["name"] == "rdmaxfer"][0]
print(v, m["target_directory"])')
major="${version%%.*}"

ci_log "building librdmaxfer.so $version ($profile)"
cargo build -q --lib --profile "$profile"
lib="$target_dir/$outdir/librdmaxfer.so"
[[ -f "$lib" ]] || ci_die "$lib was not built"
soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[[ "$soname" == "librdmaxfer.so.$major" ]] || ci_die "$lib has SONAME '$soname', expected librdmaxfer.so.$major"

libdir="$destdir$prefix/lib"
install -d "$libdir/pkgconfig" "$destdir$prefix/include"
install -m 0755 "$lib" "$libdir/librdmaxfer.so.$version"
ln -sfn "librdmaxfer.so.$version" "$libdir/librdmaxfer.so.$major"
ln -sfn "librdmaxfer.so.$major" "$libdir/librdmaxfer.so"
install -m 0644 include/rdmaxfer.h "$destdir$prefix/include/rdmaxfer.h"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" rdmaxfer.pc.in >"$libdir/pkgconfig/rdmaxfer.pc"
chmod 0644 "$libdir/pkgconfig/rdmaxfer.pc"
ci_log "installed librdmaxfer.so.$version (SONAME $soname), rdmaxfer.h and rdmaxfer.pc under $destdir$prefix"
ci_log "use: PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs rdmaxfer"
