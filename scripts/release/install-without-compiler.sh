#!/bin/bash
# install-without-compiler.sh TARBALL: installs a release tarball the way the README says
# (`npm install -g ./wg-peerd-<version>.tgz`) on a clean Debian without a compiler, and checks:
#   1. the Debian root has no cc, gcc, g++, clang, make (so nothing could be compiled), but
#      python3 (as most servers), so node-gyp gets as far as the compiler;
#   2. `npm install -g` of the tarball succeeds;
#   3. `wg-peerd --version` on PATH answers the tarball's version;
#   4. the installed addon (the prebuild) opens a netlink socket;
#   5. control: the same tarball without its prebuild FAILS to install there, for want of the
#      compiler (proof that 2 compiled nothing).
# The Debian root is debootstrap's minbase of this host's release (scripts/release/debian-minbase.sh,
# cached), seen through a throw-away overlay, with this host's node and npm copied in (Debian 12's
# own nodejs is 18; the README asks for Node.js >= 20 from nodejs.org or NodeSource, which puts
# node's headers in <prefix>/include/node: they are copied too, so a source build would lack
# exactly the compiler). One line per check: "ok N - ..." or "not ok N - ..."; exit status 1 when
# one failed. Needs root (chroot, mount).
set -uo pipefail

tarball="$(readlink -f "${1:?usage: install-without-compiler.sh TARBALL}")"
here="$(cd "$(dirname "$0")" && pwd)"
base="$("$here/debian-minbase.sh")" || exit 1
version="$(tar -xzOf "$tarball" package/package.json | node -p 'JSON.parse(require("fs").readFileSync(0, "utf8")).version')"

work="$(mktemp -d "${TMPDIR:-/var/tmp}/wg-peerd-clean-install.XXXXXX")"
root="$work/root"
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/upper" "$work/overlay-work" "$root"
if mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/overlay-work" "$root" 2>/dev/null; then
  mounts+=("$root")
else
  cp -a "$base/." "$root/" # no overlayfs here: a full copy (about 200 MB)
fi
mount --bind /dev "$root/dev" && mounts+=("$root/dev")
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
cp /etc/resolv.conf "$root/etc/resolv.conf"

# This host's Node.js: the binary, npm, and node's headers, under /usr/local as nodejs.org's
# tarball lays them out (npm's global prefix there is /usr/local: bin/wg-peerd).
node_bin="$(readlink -f "$(command -v node)")"
node_prefix="$(node -p "require('path').resolve(process.execPath, '..', '..')")"
npm_dir="$(cd "$(dirname "$(readlink -f "$(command -v npm)")")/.." && pwd)"
install -D -m 0755 "$node_bin" "$root/usr/local/bin/node"
mkdir -p "$root/usr/local/lib/node_modules" "$root/usr/local/include"
cp -a "$npm_dir" "$root/usr/local/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
[ -d "$node_prefix/include/node" ] && cp -a "$node_prefix/include/node" "$root/usr/local/include/node"
# The registry as this host's npm reaches it (its CA file, when one is configured).
npm_env=(npm_config_registry="$(npm config get registry)" npm_config_update_notifier=false
  npm_config_fund=false npm_config_audit=false npm_config_loglevel=warn)
cafile="$(npm config get cafile 2>/dev/null || true)"
if [ -n "$cafile" ] && [ "$cafile" != null ] && [ -f "$cafile" ]; then
  install -D -m 0644 "$cafile" "$root/etc/wg-peerd-ci-ca.pem"
  npm_env+=(npm_config_cafile=/etc/wg-peerd-ci-ca.pem)
fi
cp "$tarball" "$root/tmp/wg-peerd.tgz"

in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
    "${npm_env[@]}" "$@"
}

failed=0
n=0
check() { # check "description" command...: runs the command, prints ok / not ok and its output
  local what="$1" out status
  shift
  n=$((n + 1))
  out="$("$@" 2>&1)"
  status=$?
  if [ "$status" -eq 0 ]; then
    echo "ok $n - $what"
  else
    echo "not ok $n - $what"
    failed=$((failed + 1))
  fi
  [ -n "$out" ] && printf '%s\n' "$out" | tail -n 15 | sed 's/^/    /'
  return 0
}

check "$(. "$root/etc/os-release" && echo "$PRETTY_NAME") minbase: no cc, gcc, g++, c++, clang, make; python3 for node-gyp" \
  in_root sh -c 'found=0; for c in cc gcc g++ c++ clang make; do
      if command -v "$c"; then found=1; fi; done; command -v python3 && exit $found'
check "npm install -g ./$(basename "$tarball") there" \
  in_root sh -c 'npm install -g --foreground-scripts /tmp/wg-peerd.tgz 2>&1 | grep -v "^npm warn install-scripts"'
check "wg-peerd --version answers $version" \
  in_root sh -c "command -v wg-peerd && test \"\$(wg-peerd --version)\" = 'wg-peerd $version'"
check "the installed prebuilt addon opens a netlink socket" \
  in_root node -e '
    const { NativeTransport } = require("/usr/local/lib/node_modules/wg-peerd/dist/src/netlink/native.js");
    const socket = new NativeTransport(0); // NETLINK_ROUTE
    console.log(`netlink port id ${socket.portId}`);
    socket.close();
    if (!(socket.portId > 0)) process.exit(1);'

# Control: the same package without prebuilds/ must need the compiler this root does not have.
mkdir -p "$work/bare" && tar -xzf "$tarball" -C "$work/bare" && rm -rf "$work/bare/package/prebuilds"
tar -czf "$root/tmp/wg-peerd-bare.tgz" -C "$work/bare" package
check "control: without its prebuild the tarball fails to install here (node-gyp finds no make/cc)" \
  in_root sh -c 'if npm install -g --prefix /tmp/bare-prefix --foreground-scripts /tmp/wg-peerd-bare.tgz >/tmp/bare.log 2>&1; then
      echo "it installed: this root can compile"; exit 1; fi
    grep -m 3 -E "not found: (make|cc|gcc)|(make|cc|gcc): (command )?not found" /tmp/bare.log ||
      { grep -m 10 "gyp ERR!" /tmp/bare.log; exit 1; }'

echo "$((n - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
