#!/usr/bin/env bash
# ci/guest-sshd.sh DIR [PORT] [ADDR] — runs INSIDE a guest (or a rig host): starts an sshd from
# Debian's openssh-server on ADDR:PORT (default 127.0.0.1:2222) that lets root in with a fresh key only (host
# key, client key and config in DIR), waits until a command runs through it, and prints the
# `rdmaxfer cp -e` command line that reaches it. Stop it with: kill "$(cat DIR/sshd.pid)".
# SSHD_EMPTY_BASHRC=1: sshd runs in a mount namespace of its own with an empty file over root's
# ~/.bashrc (the guest's is the host's, whose `pyenv init` costs 3.3 s of every login under
# emulation), as the cp device tests do; the rest of the guest keeps the real file.
set -euo pipefail
dir="$(realpath -m "${1:?usage: ci/guest-sshd.sh DIR [PORT]}")"
port="${2:-2222}"
addr="${3:-127.0.0.1}"
[[ -x /usr/sbin/sshd ]] || { echo "!! /usr/sbin/sshd missing: ci/setup.sh installs openssh-server" >&2; exit 2; }
mkdir -p "$dir" /run/sshd
chmod 700 "$dir"
for k in host_key id; do
  [[ -f "$dir/$k" ]] || ssh-keygen -q -t ed25519 -N '' -f "$dir/$k"
done
cp "$dir/id.pub" "$dir/authorized_keys"
cat >"$dir/sshd_config" <<CONF
Port $port
ListenAddress $addr
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM yes
StrictModes no
PidFile $dir/sshd.pid
LogLevel ${SSHD_LOG_LEVEL:-INFO}
CONF
if [[ "${SSHD_EMPTY_BASHRC:-0}" == 1 && -f "$HOME/.bashrc" ]]; then
  : >"$dir/bashrc"
  unshare --mount --propagation private sh -c 'mount --bind "$1" "$HOME/.bashrc" && exec /usr/sbin/sshd -f "$2" -E "$3"' \
    sh "$dir/bashrc" "$dir/sshd_config" "$dir/sshd.log" </dev/null >/dev/null 2>&1
else
  /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log" </dev/null >/dev/null 2>&1
fi
rsh="ssh -p $port -i $dir/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
for _ in $(seq 200); do
  $rsh "$addr" true </dev/null 2>/dev/null && { echo "$rsh"; exit 0; }
  sleep 0.1
done
echo "!! sshd on $addr:$port did not let a key in; its log:" >&2
cat "$dir/sshd.log" >&2
exit 1
