#!/usr/bin/env bash
# ci/dependent.sh — a project that depends on the rdmaxfer library with its default features
# (examples/dependent) gets none of the CLI's crates (`cargo tree -e normal`), builds no C
# library, and neither the rdmaxfer rlib it links nor its binary has a `rdmaxfer_*` C export
# (nm).
# DEPENDENT_FEATURES: features to turn on for it (e.g. rdmaxfer/capi, rdmaxfer/cli), to see the
# checks fail.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"

pkg=rdmaxfer-dependent
feats=()
[[ -n "${DEPENDENT_FEATURES:-}" ]] && feats=(--features "$DEPENDENT_FEATURES")
cli_crates=(clap clap_builder clap_complete clap_mangen indicatif anyhow signal-hook tracing-subscriber serde_json)
tree="$(cargo tree --locked -p "$pkg" "${feats[@]}" -e normal --prefix none)"
n="$(sort -u <<<"$tree" | wc -l)"
bad=()
for c in "${cli_crates[@]}"; do
  grep -q "^$c v" <<<"$tree" && bad+=("$c")
done
((${#bad[@]} == 0)) || ci_die "$pkg depends on the CLI's crates: ${bad[*]}"
ci_log "$pkg: $n crates (normal dependencies), none of the CLI's"

json="target/ci/dependent.json"
mkdir -p "$(dirname "$json")"
cargo build --locked -p "$pkg" "${feats[@]}" --message-format=json-render-diagnostics >"$json"
exe="$(python3 - "$json" "$pkg" <<'PY'
import json, sys
exe, rlibs = None, []
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact":
        continue
    if "cdylib" in m["target"]["kind"]:
        sys.exit("a C library was built: %s %s" % (m["target"]["name"], m["filenames"]))
    if m.get("executable") and m["target"]["name"] == sys.argv[2]:
        exe = m["executable"]
    if m["target"]["name"] == "rdmaxfer":
        rlibs = [f for f in m["filenames"] if f.endswith(".rlib")]
print(exe or "", *rlibs)
PY
)" || ci_die "$pkg's build"
read -r exe rlib <<<"$exe"
[[ -f "$rlib" ]] || ci_die "the rdmaxfer rlib of $pkg's build was not found"
# The library as linked (the linker drops unused code, so the binary alone would not tell).
exports="$(nm "$rlib" 2>/dev/null | awk '$2 == "T" && $3 ~ /^rdmaxfer_/ {print $3}')"
[[ -z "$exports" ]] || ci_die "$rlib defines C exports: $(head -3 <<<"$exports" | tr '\n' ' ')"
[[ -x "$exe" ]] || ci_die "$pkg was not built"
exports="$(nm "$exe" | awk '$3 ~ /^rdmaxfer_/ {print $3}')"
[[ -z "$exports" ]] || ci_die "$exe carries C exports: $(head -3 <<<"$exports" | tr '\n' ' ')"
ci_log "$pkg: no C library built, no rdmaxfer_* symbol in $(basename "$rlib") or $exe"
