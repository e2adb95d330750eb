#!/usr/bin/env bash
# ci/guest-cp-bench.sh [OUTDIR] [ROUNDS] [MIB] — runs INSIDE the guest (ci/cp-bench.sh boots one):
# one file of MIB MiB (default 128), tmpfs -> tmpfs, in ROUNDS (default 5) interleaved rounds of
#   hand  `rdmaxfer recv --once` started by hand, then `rdmaxfer send` (timed: the send, from its
#         start to the receiver's exit)
#   cp    `rdmaxfer cp FILE 127.0.0.1:DEST` through an sshd on 127.0.0.1 (ci/guest-sshd.sh) with
#         key authentication: ssh start-up, the remote side's start and the copy, all timed
#   ssh   `ssh 127.0.0.1 true` with the same options: what ssh itself costs (key exchange and
#         the login shell's start), which cp pays once per copy
# The sshd runs with an empty root ~/.bashrc (SSHD_EMPTY_BASHRC=1, as the cp device tests): the
# guest's is the lab host's, whose pyenv set-up is no part of ssh or rdmaxfer. CP_BENCH_RC=host
# keeps it.
# Each copy is checked with cmp. Prints each row's median and spread (min..max) and the per-round
# ratio cp / hand (issue 38's goal: <= 1.1). Raw figures: OUTDIR/cp-runs.tsv.
# Env: RDMAXFER_BIN (default target/release/rdmaxfer).
set -euo pipefail
out="$(realpath -m "${1:-target/bench/cp}")"
rounds="${2:-5}"
mib="${3:-128}"
bin="$(realpath "${RDMAXFER_BIN:-target/release/rdmaxfer}")"
[[ -x "$bin" ]] || { echo "!! $bin missing: cargo build --release --features cli --bin rdmaxfer"; exit 2; }
ip=198.18.0.1
port=18900
fails=0
mkdir -p "$out"
tsv="$out/cp-runs.tsv"
printf 'round\trow\tseconds\n' >"$tsv"
work="$(mktemp -d /tmp/rdmaxfer-cpbench.XXXXXX)"
trap '[[ -f "$work/ssh/sshd.pid" ]] && kill "$(cat "$work/ssh/sshd.pid")" 2>/dev/null; rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"

[[ "${CP_BENCH_RC:-empty}" == host ]] || export SSHD_EMPTY_BASHRC=1
rsh="$(bash "$(dirname "${BASH_SOURCE[0]}")/guest-sshd.sh" "$work/ssh")"
head -c "$((mib << 20))" /dev/urandom >"$work/f.bin"
now() { date +%s.%N; }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$(python3 -c "print($4 - $3)")" >>"$tsv"; }
check() { cmp -s "$work/f.bin" "$1/f.bin" || { echo "!! $2 round $3: the copy differs"; fails=$((fails + 1)); }; }

hand() {
  local r="$1" rp a b rc=0
  rm -rf "$work/hand"; mkdir -p "$work/hand"
  port=$((port + 1))
  a="$(now)"
  "$bin" recv --out "$work/hand" --listen "$ip" -p "$port" --once -q --token-file "$work/token" \
    2>"$out/hand.$r.recv.err" &
  rp=$!
  wait_line "$out/hand.$r.recv.err" "$rp" || { fails=$((fails + 1)); return; }
  "$bin" send -q --token-file "$work/token" "$work/f.bin" "$ip:$port" 2>"$out/hand.$r.send.err" || rc=$?
  wait "$rp" || rc=$?
  b="$(now)"
  ((rc == 0)) || { echo "!! hand round $r: exit $rc"; fails=$((fails + 1)); return; }
  record "$r" hand "$a" "$b"
  check "$work/hand" hand "$r"
}

bare_ssh() {
  local r="$1" a b
  a="$(now)"
  $rsh 127.0.0.1 true </dev/null >/dev/null 2>&1 || { echo "!! ssh round $r failed"; fails=$((fails + 1)); return; }
  b="$(now)"
  record "$r" ssh "$a" "$b"
}

viacp() {
  local r="$1" a b rc=0
  rm -rf "$work/cp"
  a="$(now)"
  "$bin" cp -q -e "$rsh" --remote-path "$bin" "$work/f.bin" "127.0.0.1:$work/cp" 2>"$out/cp.$r.err" || rc=$?
  b="$(now)"
  ((rc == 0)) || { echo "!! cp round $r: exit $rc"; tail -n 5 "$out/cp.$r.err"; fails=$((fails + 1)); return; }
  record "$r" cp "$a" "$b"
  check "$work/cp" cp "$r"
}

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
chmod 600 "$work/token"
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r/$rounds ($(date +%T))"
  if ((r % 2)); then hand "$r"; viacp "$r"; bare_ssh "$r"; else bare_ssh "$r"; viacp "$r"; hand "$r"; fi
done

python3 - "$tsv" "$mib" <<'PY' | tee "$out/cp-summary.txt"
import collections, statistics, sys
tsv, mib = sys.argv[1], sys.argv[2]
v = collections.defaultdict(dict)
for line in open(tsv).read().splitlines()[1:]:
    r, row, s = line.split("\t")
    v[row][r] = float(s)
def spread(xs, f="{:.2f}"):
    xs = sorted(xs)
    return f"{f.format(statistics.median(xs))} ({f.format(xs[0])}..{f.format(xs[-1])})" if xs else "missing"
print(f"== one file of {mib} MiB, tmpfs -> tmpfs in one guest; seconds, median (min..max) over rounds")
for row in ("hand", "cp", "ssh"):
    print(f"{row:5} {spread(v[row].values())} s")
xs = [v["cp"][r] / v["hand"][r] for r in v["cp"] if r in v["hand"]]
print(f"cp / hand: {spread(xs, '{:.3f}')} (goal <= 1.1)")
xs = [(v["cp"][r] - v["ssh"][r]) / v["hand"][r] for r in v["cp"] if r in v["hand"] and r in v["ssh"]]
print(f"(cp - ssh) / hand: {spread(xs, '{:.3f}')} (cp without what ssh itself costs)")
PY
if ((fails)); then
  echo "!! $fails failures"
  exit 1
fi
