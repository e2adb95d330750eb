#!/usr/bin/env bash
# ci/bench.sh — boot one guest, run the anchor benchmarks and rdmaxfer's next to them on rxe0
# (BENCH_ROUNDS rounds, default 3, interleaved), summarise with the medians.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CI_ROOT"

bash ci/setup.sh
ci_path
cargo build --release --features cli
export RDMAXFER_BIN="$CI_ROOT/target/release/rdmaxfer"
out="target/bench"
rm -rf "$out"
mkdir -p "$out"
rc=0
CI_GUEST_ENV="BENCH_ROUNDS ${CI_GUEST_ENV:-}" ci/guest.sh -- bash ci/guest-bench.sh "$out" || rc=$?

# One row per anchor: tool, message size, metric, value (the client's figures; MB = 2^20 bytes).
{
  printf 'tool\tbytes\tmetric\tvalue\n'
  for f in "$out"/*.client.txt; do
    [[ -e "$f" ]] || continue
    tool="$(basename "$f" .client.txt)" # NAME.rROUND: bench-ratios.py takes the medians
    awk -v tool="$tool" '
      /^ *#bytes/ { hdr = ($0 ~ /t_typical/) ? "lat" : "bw"; next }
      hdr != "" && $1 ~ /^[0-9]+$/ && NF >= 5 {
        if (hdr == "bw") printf "%s\t%s\tBW_average_MBps\t%s\n", tool, $1, $4
        else             printf "%s\t%s\tt_typical_us\t%s\n", tool, $1, $5
        hdr = ""
      }
      / bytes in .* seconds = / { bytes = $1 }
      / iters in .* usec\/iter/ { printf "%s\t%d\tusec_per_iter\t%s\n", tool, bytes / (2 * $1), $(NF-1) }
      /^cpu_time user / { printf "%s\t0\tcpu_seconds\t%s\n", tool, $3 + $5 }
    ' "$f"
  done
} >"$out/anchors.tsv"
column -t -s $'\t' "$out/anchors.tsv"
python3 ci/bench-ratios.py "$out" | tee "$out/ratios.txt"
ci_log "bench outputs in $out/ (anchors.tsv, *.server.txt, *.client.txt)"
exit "$rc"
