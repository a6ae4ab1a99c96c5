#!/bin/sh
# Prints the path of a minimal Debian root file system (debootstrap --variant=minbase of this
# host's release, plus python3 as on most servers: no compiler, no make), made once and
# cached in DIR (default
# <repo>/.vm/debian-minbase; .vm is gitignored and left out of the VM's repository snapshot).
# debootstrap itself is downloaded with `apt-get download` and unpacked beside it, not installed.
# Needs root (debootstrap, chroot) and Debian's mirror (or WG_PEERD_DEBIAN_MIRROR).
set -eu
repo="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-$repo/.vm/debian-minbase}"
codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
[ -n "$codename" ] || { echo "debian-minbase: /etc/os-release names no VERSION_CODENAME" >&2; exit 1; }
root="$dir/$codename-python3"
if [ -f "$root/.complete" ]; then
  echo "$root"
  exit 0
fi
mkdir -p "$dir/tool"
(
  cd "$dir/tool"
  rm -f debootstrap_*.deb
  apt-get download debootstrap >/dev/null 2>&1 || apt-get download debootstrap >&2
  rm -rf unpacked && dpkg -x debootstrap_*.deb unpacked
)
rm -rf "$root"
echo "debian-minbase: debootstrap --variant=minbase --include=python3 $codename into $root (once; a few minutes)" >&2
DEBOOTSTRAP_DIR="$dir/tool/unpacked/usr/share/debootstrap" \
  "$dir/tool/unpacked/usr/sbin/debootstrap" --variant=minbase --include=python3 "$codename" "$root" \
  "${WG_PEERD_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$dir/debootstrap.log" 2>&1 || {
  tail -n 20 "$dir/debootstrap.log" >&2
  echo "debian-minbase: debootstrap failed (whole log: $dir/debootstrap.log)" >&2
  exit 1
}
touch "$root/.complete"
echo "$root"
