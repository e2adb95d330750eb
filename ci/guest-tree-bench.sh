#!/usr/bin/env bash
# ci/guest-tree-bench.sh [OUTDIR] [ROUNDS] [FILES] [SIZE] [DIRS] — runs INSIDE the guest
# (ci/tree-bench.sh boots one): a tree of FILES files (default 10000) of SIZE bytes (4096) in
# DIRS directories (100), tmpfs → tmpfs (a tmpfs mounted for the run: the guest's /tmp is an
# overlay over the 9p share), in ROUNDS (default 3) interleaved rounds of these rows:
#   tree     rdmaxfer send of the tree to `recv --once` into an empty directory
#   rerun    the same again into the full directory (every file skipped as identical)
#   one      rdmaxfer send of one file of the tree's total size
#   rsync    rsync -a of the tree to an rsync daemon on the guest's address (TCP over the same
#            interface rxe0 runs on), into an empty directory
#   rsync-rerun  the same again (nothing to do)
# Both tools run from copies on that tmpfs (installed binaries live on a local disk; an exec from
# the 9p share reads the binary through it: about 0.1 s for rdmaxfer's 7 MB, 0.02 s for rsync's),
# and both under GNU time (peak RSS; about 0.04 s an exec). Each copy is checked (diff -r, cmp).
# Prints the median and spread (min..max) of each row's wall time and the per-round ratios
# issue 37 sets goals for: tree / rsync (<= 1.0), tree / one (<= 2.0), rerun / rsync-rerun
# (<= 1.0). Raw figures: OUTDIR/tree-runs.tsv.
# Env: RDMAXFER_BIN (default target/release/rdmaxfer), ROWS (a subset, e.g. ROWS="tree rsync"),
# FLAGS (extra rdmaxfer flags for both sides), BIN_B (another rdmaxfer build: rows tree-B,
# rerun-B and one-B run it as tree, rerun and one run RDMAXFER_BIN, for an A/B in one guest;
# add them to ROWS).
set -euo pipefail
out="$(realpath -m "${1:-target/bench/tree}")"
rounds="${2:-3}"
files="${3:-10000}"
size="${4:-4096}"
dirs="${5:-100}"
bin="${RDMAXFER_BIN:-target/release/rdmaxfer}"
[[ -x "$bin" ]] || { echo "!! $bin missing: cargo build --release --features cli --bin rdmaxfer"; exit 2; }
command -v rsync >/dev/null || { echo "!! rsync missing (ci/setup.sh installs it)"; exit 2; }
[[ -x /usr/bin/time ]] || { echo "!! GNU time missing (ci/setup.sh installs it)"; exit 2; }
ip=198.18.0.1
port=18800
rsport=8873
fails=0
mkdir -p "$out"
tsv="$out/tree-runs.tsv"
printf 'round\trow\tseconds\n' >"$tsv"
work="$(mktemp -d /tmp/rdmaxfer-tbench.XXXXXX)"
# A tmpfs of its own: the guest's /tmp is an overlay (tmpfs over the 9p share), whose every
# create, open and rename also goes through overlayfs.
mount -t tmpfs -o size=1g tmpfs "$work"
rsd=""
trap '[[ -n "$rsd" ]] && kill "$rsd" 2>/dev/null; wait; umount "$work"; rmdir "$work"' EXIT

source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"

# Local copies of both binaries (see the header).
mkdir -p "$work/bin"
cp "$bin" "$work/bin/rdmaxfer"
cp "$(command -v rsync)" "$work/bin/rsync"
bin="$work/bin/rdmaxfer"
rsync="$work/bin/rsync"
binb=""
if [[ -n "${BIN_B:-}" ]]; then
  cp "$BIN_B" "$work/bin/rdmaxfer-b"
  binb="$work/bin/rdmaxfer-b"
fi

echo "== making $files files of $size bytes in $dirs directories"
python3 - "$work/src/tree" "$files" "$size" "$dirs" <<'PY'
import os, sys
root, n, size, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for d in range(dirs):
    os.makedirs(f"{root}/d{d:03}", exist_ok=True)
for i in range(n):
    with open(f"{root}/d{i % dirs:03}/f{i:06}", "wb") as f:
        f.write(os.urandom(size))
PY
head -c "$((files * size))" /dev/urandom >"$work/src/one.bin"

# The rsync daemon: one writable module, as root, no chroot, on the guest's address.
mkdir -p "$work/rs"
cat >"$work/rsyncd.conf" <<EOF
port = $rsport
address = $ip
use chroot = no
pid file = $work/rsyncd.pid
[m]
path = $work/rs
read only = no
uid = root
gid = root
EOF
"$rsync" --daemon --no-detach --config="$work/rsyncd.conf" >"$out/rsyncd.log" 2>&1 &
rsd=$!
wait_tcp "$rsport" "$rsd"

record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$tsv"; }

# timed ROUND ROW CMD... — runs CMD, records its wall time; a failure is counted and shown.
timed() {
  local r="$1" row="$2" a b rc=0
  shift 2
  a="$(date +%s.%N)"
  "$@" >"$out/$row.$r.out" 2>"$out/$row.$r.err" || rc=$?
  b="$(date +%s.%N)"
  if ((rc)); then
    echo "!! $row round $r: exit $rc"; tail -n 5 "$out/$row.$r.err"; fails=$((fails + 1)); return 1
  fi
  record "$r" "$row" "$(python3 -c "print($b - $a)")"
}

# rdx ROUND ROW DEST SRC — rdmaxfer send SRC to a `recv --once` into DEST (both sides run
# $xbin when set, else $bin).
rdx() {
  local r="$1" row="$2" dest="$3" src="$4" rp rrc=0 bin="${xbin:-$bin}"
  port=$((port + 1))
  mkdir -p "$dest"
  # Peak RSS of each side (KiB).
  /usr/bin/time -f %M -o "$out/$row.$r.recv.rss" "$bin" recv --out "$dest" --listen "$ip" -p "$port" --once --json ${FLAGS:-} \
    >"$out/$row.$r.recv.json" 2>"$out/$row.$r.recv.err" &
  rp=$!
  wait_line "$out/$row.$r.recv.err" "$rp" || { fails=$((fails + 1)); return 1; }
  timed "$r" "$row" /usr/bin/time -f %M -o "$out/$row.$r.send.rss" "$bin" send "$src" "$ip:$port" -q ${FLAGS:-} || true
  wait "$rp" || rrc=$?
  ((rrc == 0)) || { echo "!! $row round $r: receiver exit $rrc"; tail -n 3 "$out/$row.$r.recv.err"; fails=$((fails + 1)); }
}

check_tree() {
  diff -r "$work/src/tree" "$1/tree" >/dev/null || { echo "!! round $2: $1/tree differs from the source"; fails=$((fails + 1)); }
}

run_step() {
  local r="$1"
  case "$2" in
    tree)
      rm -rf "$work/dst"
      rdx "$r" tree "$work/dst" "$work/src/tree" && check_tree "$work/dst" "$r" ;;
    rerun)
      [[ -d "$work/dst/tree" ]] || rdx "$r" prepare "$work/dst" "$work/src/tree" || return 0
      rdx "$r" rerun "$work/dst" "$work/src/tree" && check_tree "$work/dst" "$r" ;;
    one)
      rm -rf "$work/one"
      rdx "$r" one "$work/one" "$work/src/one.bin" &&
        { cmp -s "$work/src/one.bin" "$work/one/one.bin" || { echo "!! one round $r differs"; fails=$((fails + 1)); }; } ;;
    tree-B | rerun-B | one-B)
      [[ -n "$binb" ]] || { echo "!! row $2 needs BIN_B"; return 0; }
      case "$2" in
        tree-B)
          rm -rf "$work/dstb"
          xbin="$binb" rdx "$r" tree-B "$work/dstb" "$work/src/tree" && check_tree "$work/dstb" "$r" ;;
        rerun-B)
          [[ -d "$work/dstb/tree" ]] || xbin="$binb" rdx "$r" prepare-B "$work/dstb" "$work/src/tree" || return 0
          xbin="$binb" rdx "$r" rerun-B "$work/dstb" "$work/src/tree" && check_tree "$work/dstb" "$r" ;;
        one-B)
          rm -rf "$work/oneb"
          xbin="$binb" rdx "$r" one-B "$work/oneb" "$work/src/one.bin" ;;
      esac ;;
    rsync)
      rm -rf "${work:?}/rs/"*
      timed "$r" rsync /usr/bin/time -f %M -o "$out/rsync.$r.send.rss" "$rsync" -a "$work/src/tree" "rsync://$ip:$rsport/m/" &&
        check_tree "$work/rs" "$r" ;;
    rsync-rerun)
      [[ -d "$work/rs/tree" ]] || "$rsync" -a "$work/src/tree" "rsync://$ip:$rsport/m/"
      timed "$r" rsync-rerun /usr/bin/time -f %M -o "$out/rsync-rerun.$r.send.rss" "$rsync" -a "$work/src/tree" "rsync://$ip:$rsport/m/" &&
        check_tree "$work/rs" "$r" ;;
  esac
}

steps=(tree rsync rerun rsync-rerun one)
[[ -n "${ROWS:-}" ]] && read -r -a steps <<<"$ROWS"
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r/$rounds ($(date +%T))"
  k=$(((r - 1) % ${#steps[@]}))
  for ((i = 0; i < ${#steps[@]}; i++)); do
    run_step "$r" "${steps[$(((i + k) % ${#steps[@]}))]}" || true
  done
done

python3 - "$tsv" "$files" "$size" "$dirs" "$(nproc)" "$out" <<'PY' | tee "$out/tree-summary.txt"
import collections, glob, os, statistics, sys
tsv, files, size, dirs, ncpu, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
v = collections.defaultdict(dict)
for line in open(tsv).read().splitlines()[1:]:
    r, row, s = line.split("\t")
    v[row][r] = float(s)
def spread(xs, f="{:.2f}"):
    xs = sorted(xs)
    return f"{f.format(statistics.median(xs))} ({f.format(xs[0])}..{f.format(xs[-1])})" if xs else "missing"
print(f"== {files} files of {size} bytes in {dirs} directories, tmpfs -> tmpfs in one guest ({ncpu} vCPUs); "
      "seconds, median (min..max) over rounds")
for row in ("tree", "rerun", "one", "rsync", "rsync-rerun", "tree-B", "rerun-B", "one-B"):
    if v[row]:
        per_file = spread([s / files * 1e3 for s in v[row].values()], "{:.3f}")
        print(f"{row:12} {spread(v[row].values())} s ({per_file} ms per file)")
def ratio(a, b, goal):
    xs = [v[a][r] / v[b][r] for r in v[a] if r in v[b] and v[b][r]]
    print(f"{a} / {b}: {spread(xs, '{:.2f}')} (goal {goal})")
ratio("tree", "rsync", "<= 1.0")
ratio("tree", "one", "<= 2.0")
ratio("rerun", "rsync-rerun", "<= 1.0")
for row in ("tree", "rerun", "one"):
    if v[row + "-B"]:
        ratio(row, row + "-B", "none: below 1.0, this build is the faster")
for row in ("tree", "rerun", "one", "rsync", "rsync-rerun"):
    for side in ("send", "recv"):
        kib = [int(open(f).read().split()[-1]) for f in glob.glob(f"{out}/{row}.*.{side}.rss")
               if os.path.getsize(f)]
        if kib:
            print(f"peak RSS {row:11} {side}: {max(kib) / 1024:.1f} MiB (max over {len(kib)} rounds)")
PY
if ((fails)); then
  echo "!! $fails failures"
  exit 1
fi
