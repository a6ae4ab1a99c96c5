#!/usr/bin/env bash
# Prepare the throw-away VM of the real-kernel test bench (see DEVELOPERS.md).
#
#   scripts/vm/prepare.sh
#
# 1. Checks the host prerequisites; when something is missing, prints what and the
#    `apt-get install ...` line that fixes it, and exits non-zero.
# 2. Downloads the stock Debian kernel that the metapackage linux-image-amd64 depends on
#    (`apt-get download`, no installation) and unpacks it with `dpkg -x` into .vm/kernel/<version>.
#    Runs depmod over the unpacked tree so the guest's modprobe (and the kernel's module
#    autoloading) can find every module.
# 3. Builds a tiny initramfs: busybox-static, the virtio/9p modules needed to mount the host's
#    file systems, and scripts/vm/init.sh as /init.
# 4. Writes .vm/current.env, which scripts/vm/run.sh reads.
#
# Idempotent: everything is cached in .vm/ (gitignored); a second run only re-checks.
# Environment: WG_PEERD_VM_DIR (default <repo>/.vm), WG_PEERD_VM_KERNEL_PKG (kernel package to use
# instead of the one linux-image-amd64 depends on), WG_PEERD_VM_KERNEL_RELEASE (an apt target
# release such as bookworm-backports: take linux-image-amd64 as that release has it; without it,
# apt's candidate, i.e. the stable kernel). Give each kernel its own WG_PEERD_VM_DIR: current.env
# names one kernel.
set -euo pipefail

export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
VM_DIR="${WG_PEERD_VM_DIR:-$REPO/.vm}"

log() { printf 'prepare: %s\n' "$*" >&2; }
die() {
  printf 'prepare: error: %s\n' "$*" >&2
  exit 1
}

# ---------------------------------------------------------------------------------------------
# 1. Host prerequisites. The guest chroots into the host's own root file system, so the test
#    oracles (wg, nft, tc, ip) and node are the host's binaries.
# ---------------------------------------------------------------------------------------------
missing=()   # human-readable lines
packages=()  # apt packages that fix them
need() { # need COMMAND PACKAGE
  if ! command -v "$1" >/dev/null 2>&1; then
    missing+=("$1 (Debian package $2)")
    packages+=("$2")
  fi
}
need qemu-system-x86_64 qemu-system-x86
need wg wireguard-tools
need nft nftables
need tc iproute2
need ip iproute2
need modprobe kmod
need depmod kmod
need cpio cpio
need gzip gzip
need xz xz-utils
need dpkg-deb dpkg
need apt-get apt
need flock util-linux

# busybox must be the static build: it is the only userland of the initramfs.
BUSYBOX=""
for candidate in /bin/busybox /usr/bin/busybox "$(command -v busybox 2>/dev/null || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] &&
    [[ "$(LC_ALL=C ldd "$candidate" 2>&1 || true)" == *"not a dynamic executable"* ]]; then
    BUSYBOX="$candidate"
    break
  fi
done
if [ -z "$BUSYBOX" ]; then
  missing+=("a statically linked busybox (Debian package busybox-static)")
  packages+=("busybox-static")
fi

node_problem=""
if ! command -v node >/dev/null 2>&1; then
  node_problem="node is not installed"
elif [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  node_problem="node $(node -v) is too old"
fi

if [ "${#missing[@]}" -gt 0 ] || [ -n "$node_problem" ]; then
  {
    echo "prepare: the VM test bench cannot run on this host; missing:"
    for m in "${missing[@]}"; do echo "  - $m"; done
    if [ -n "$node_problem" ]; then
      echo "  - Node.js >= 20 ($node_problem; Debian 12's nodejs package is 18, use the Node.js 20"
      echo "    packages from nodejs.org or NodeSource)"
    fi
    if [ "${#packages[@]}" -gt 0 ]; then
      echo "Fix with:"
      echo "  apt-get update && apt-get install -y --no-install-recommends $(printf '%s\n' "${packages[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//')"
    fi
  } >&2
  exit 1
fi

# The guest mounts the unpacked kernel's modules over /lib/modules of the host's root file system
# (read-only in the guest), so that mount point must exist. Every Debian host has it; minimal
# containers may not.
if [ ! -d /lib/modules ]; then
  if [ "$(id -u)" -eq 0 ]; then
    log "creating the empty directory /lib/modules (mount point for the guest's kernel modules)"
    mkdir -p /lib/modules
  else
    die "/lib/modules does not exist on this host; create it as root: mkdir -p /lib/modules"
  fi
fi

mkdir -p "$VM_DIR"
# Several checkouts' or engineers' runs may prepare at once: one at a time.
exec 9>"$VM_DIR/.prepare.lock"
flock 9

# ---------------------------------------------------------------------------------------------
# 2. The kernel: the package linux-image-amd64 depends on, unpacked, depmod'ed.
# ---------------------------------------------------------------------------------------------
kernel_pkg="${WG_PEERD_VM_KERNEL_PKG:-}"
release="${WG_PEERD_VM_KERNEL_RELEASE:-}"
if [ -z "$kernel_pkg" ]; then
  # -t RELEASE makes that release's linux-image-amd64 the candidate whose Depends apt-cache shows
  # (backports are pinned at 100, below stable, so without -t the stable one wins).
  kernel_pkg="$(LC_ALL=C apt-cache depends ${release:+-t "$release"} linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }' || true)"
  if [ -n "$release" ] && [ -n "$kernel_pkg" ] &&
    ! LC_ALL=C apt-cache madison "$kernel_pkg" 2>/dev/null | grep -q " $release/"; then
    # apt-cache ignores an unknown -t and answers with the stable kernel: never test that twice
    # under the other kernel's name.
    die "$kernel_pkg does not come from $release: apt knows no linux-image-amd64 in $release (is its source in /etc/apt/sources.list.d/? run: apt-get update)"
  fi
fi
if [ -z "$kernel_pkg" ] && [ -n "$release" ] && [ ! -f "$VM_DIR/current.env" ]; then
  die "apt-cache finds no linux-image-amd64 in $release (add the source, e.g. deb http://deb.debian.org/debian $release main, then apt-get update)"
fi
if [ -z "$kernel_pkg" ]; then
  # No apt lists (or offline): fall back to the kernel cached by an earlier run.
  if [ -f "$VM_DIR/current.env" ]; then
    kernel_pkg="$(. "$VM_DIR/current.env" && echo "$VM_KERNEL_PKG")"
    log "apt-cache does not know linux-image-amd64; using the cached $kernel_pkg"
  else
    die "apt-cache cannot resolve linux-image-amd64; run: apt-get update"
  fi
fi
kver="${kernel_pkg#linux-image-}"
kroot="$VM_DIR/kernel/$kver"

if [ ! -f "$kroot/.complete" ]; then
  log "fetching $kernel_pkg"
  rm -rf "$kroot" "$VM_DIR/deb"
  mkdir -p "$VM_DIR/deb" "$kroot"
  # apt's _apt sandbox user must be able to write the download directory.
  chown _apt "$VM_DIR/deb" 2>/dev/null || true
  (cd "$VM_DIR/deb" && apt-get download -q "$kernel_pkg") ||
    die "apt-get download $kernel_pkg failed (is the Debian mirror reachable? try apt-get update)"
  deb="$(ls "$VM_DIR"/deb/"${kernel_pkg}"_*.deb | head -n 1)"
  log "unpacking $(basename "$deb")"
  dpkg -x "$deb" "$kroot"
  [ -f "$kroot/boot/vmlinuz-$kver" ] || die "$deb holds no /boot/vmlinuz-$kver"
  [ -d "$kroot/lib/modules/$kver" ] || die "$deb holds no /lib/modules/$kver"
  depmod -b "$kroot" "$kver"
  for m in wireguard 9p 9pnet_virtio virtio_pci; do
    modprobe -d "$kroot" -S "$kver" --show-depends "$m" >/dev/null 2>&1 ||
      die "$kernel_pkg has no module $m (the cloud flavour lacks 9p: use the generic amd64 one)"
  done
  rm -rf "$VM_DIR/deb"
  touch "$kroot/.complete"
fi

# The uncompressed ELF kernel boots through PVH: qemu loads it directly, skipping SeaBIOS' real-mode
# kernel setup and the in-guest decompression, which under TCG take about 5 s per boot.
# Best effort: without it run.sh boots the bzImage.
vmlinux="$kroot/boot/vmlinux-$kver"
if [ ! -f "$vmlinux" ] && [ ! -f "$vmlinux.none" ]; then
  bz="$kroot/boot/vmlinuz-$kver"
  found=""
  # magic (as printf escapes) and decompressor, as the kernel's scripts/extract-vmlinux does it
  for try in '\3757zXZ|xz -dc' '\037\213\010|gzip -dc' '\050\265\057\375|zstd -qdc'; do
    magic="${try%%|*}"
    unpack="${try#*|}"
    command -v "${unpack%% *}" >/dev/null || continue
    for off in $(LC_ALL=C grep -obUaF "$(printf "$magic")" "$bz" 2>/dev/null | cut -d: -f1 | head -n 5); do
      tail -c "+$((off + 1))" "$bz" | $unpack >"$vmlinux.tmp" 2>/dev/null || true
      if node "$HERE/pvh-note.js" "$vmlinux.tmp" 2>/dev/null; then
        mv "$vmlinux.tmp" "$vmlinux"
        found=1
        break 2
      fi
    done
  done
  rm -f "$vmlinux.tmp"
  if [ -z "$found" ]; then
    log "no PVH-bootable vmlinux inside $(basename "$bz"); booting the bzImage (about 5 s slower)"
    touch "$vmlinux.none"
  fi
fi
boot_kernel="$kroot/boot/vmlinuz-$kver"
if [ -f "$vmlinux" ]; then boot_kernel="$vmlinux"; fi

# ---------------------------------------------------------------------------------------------
# 3. The initramfs: static busybox, decompressed virtio/9p modules in load order, /init.
# ---------------------------------------------------------------------------------------------
initrd="$VM_DIR/initramfs-$kver.cpio.gz"
stamp="$({
  echo "$kver"
  sha256sum "$BUSYBOX" "$HERE/init.sh" "$HERE/prepare.sh" | cut -d' ' -f1
} | sha256sum | cut -d' ' -f1)"
if [ ! -f "$initrd" ] || [ "$(cat "$initrd.stamp" 2>/dev/null || true)" != "$stamp" ]; then
  log "building $(basename "$initrd")"
  work="$(mktemp -d "$VM_DIR/initramfs.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,host,lib/modules,modules,etc}
  cp "$BUSYBOX" "$work/bin/busybox"
  cp "$HERE/init.sh" "$work/init"
  chmod 755 "$work/init"
  # Module autoloading (request_module) runs the helper in the initramfs' root; it hands the
  # request to the host's kmod modprobe inside the guest's chroot, where /lib/modules is mounted.
  cat >"$work/sbin/vm-modprobe" <<'EOF'
#!/bin/busybox sh
exec /bin/busybox chroot /host /sbin/modprobe "$@"
EOF
  chmod 755 "$work/sbin/vm-modprobe"
  : >"$work/modules/order"
  seen=" "
  for m in virtio_pci 9pnet_virtio 9p; do
    while read -r kind path _; do
      [ "$kind" = insmod ] || continue
      name="$(basename "$path")"
      case "$seen" in *" $name "*) continue ;; esac
      seen="$seen$name "
      case "$name" in
        *.ko) cp "$path" "$work/modules/$name" ;;
        *.ko.xz) xz -dc "$path" >"$work/modules/${name%.xz}" ;;
        *.ko.gz) gzip -dc "$path" >"$work/modules/${name%.gz}" ;;
        *.ko.zst)
          command -v zstd >/dev/null || die "zstd is needed to decompress $name: apt-get install -y zstd"
          zstd -qdc "$path" >"$work/modules/${name%.zst}"
          ;;
        *) die "unexpected module file $path" ;;
      esac
      name="${name%.xz}"
      name="${name%.gz}"
      echo "${name%.zst}" >>"$work/modules/order"
    done < <(modprobe -d "$kroot" -S "$kver" --show-depends "$m")
  done
  (cd "$work" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) |
    gzip -1 >"$initrd.$$.tmp"
  mv "$initrd.$$.tmp" "$initrd"
  echo "$stamp" >"$initrd.stamp"
  rm -rf "$work"
  trap - EXIT
fi

# ---------------------------------------------------------------------------------------------
# 4. What run.sh needs.
# ---------------------------------------------------------------------------------------------
cat >"$VM_DIR/current.env.tmp" <<EOF
VM_KERNEL_PKG=$kernel_pkg
VM_KVER=$kver
VM_KERNEL=$boot_kernel
VM_MODULES=$kroot/lib/modules
VM_INITRD=$initrd
EOF
mv "$VM_DIR/current.env.tmp" "$VM_DIR/current.env"
log "ready: kernel $kver ($VM_DIR)"
