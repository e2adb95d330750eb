#!/usr/bin/env bash
# ci/container-tests.sh — the CI container, proven: builds (or reuses) the image (ci/image.sh),
# builds the device tests, then boots one guest in which ci/guest-container.sh runs them inside the
# image. The tests: CI_CONTAINER_TESTS, test targets as NAME or NAME=FILTER (a libtest name filter;
# default: all of device_verbs, and device_conn's endpoint tests).
# Prints the binaries' "test result:" lines, as ci/test.sh's steps count them. docs/container.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"
ci_path

bash ci/image.sh

# The exact executables cargo built (not the newest match in target/debug/deps).
json="target/ci/container-artifacts.json"
mkdir -p target/ci
cargo test --all-features --no-run --message-format=json-render-diagnostics >"$json"
read -r -a wanted <<<"${CI_CONTAINER_TESTS:-device_verbs device_conn=endpoint::}"
list="$(python3 - "$json" "${wanted[@]}" <<'PY'
import json, sys
wanted = [w.split("=", 1) for w in sys.argv[2:]]
found = {}
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t, exe = m.get("target", {}), m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and "test" in t["kind"]:
        found[t["name"]] = exe
missing = [w[0] for w in wanted if w[0] not in found]
if missing:
    sys.exit("no test executable for: " + " ".join(missing))
# One word per binary: its path, then its filter (ci/guest-container.sh's arguments).
print("\n".join(" ".join([found[w[0]]] + w[1:]) for w in wanted))
PY
)" || ci_die "test binaries not found in $json"
mapfile -t bins <<<"$list"
[[ -n "$list" ]] || ci_die "no test binaries chosen (CI_CONTAINER_TESTS)"
ci_log "container tests: ${bins[*]}"
exec ci/guest.sh -- bash ci/guest-container.sh "${bins[@]}"
