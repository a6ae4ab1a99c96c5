# The common preamble of the host-side VM scripts (run.sh, test-kernel.sh, bench-api.sh,
# bench-netlink.sh, record-transcripts.sh), sourced as their first line:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# It sets bash's strict mode and defines:
#   HERE    this directory (scripts/vm), symlinks resolved
#   REPO    the repository's root, symlinks resolved
#   VM_DIR  the VM cache: $WG_PEERD_VM_DIR, else <repo>/.vm
#   q ARG   ARG single-quoted for a POSIX shell (the guest's /bin/sh may be dash)
#   build_for NAME DIST_FILE...   `npm run build` in REPO, a clear error naming NAME when one of the
#                                 compiled files is missing, then prepare.sh (the VM for VM_DIR)
# and leaves the working directory where it was (build_for changes to REPO).
#
# Not used by init.sh (the guest's PID 1, run by busybox sh) nor by prepare.sh, whose own text is
# part of the cache key of the initramfs it builds: every checkout that shares a VM directory with
# another of a different prepare.sh rebuilds that initramfs on each run, so its lines stay put.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
VM_DIR="${WG_PEERD_VM_DIR:-$REPO/.vm}"

q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

build_for() {
  local name="$1" f
  shift
  cd "$REPO"
  npm run build
  for f in "$@"; do
    [ -f "$f" ] || { echo "$name: $f was not built" >&2; exit 1; }
  done
  "$HERE/prepare.sh"
}
