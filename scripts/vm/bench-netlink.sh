#!/usr/bin/env bash
# npm run bench:netlink [-- ARGS...]
#
# Builds, prepares the VM and runs `node dist/bench/netlink.js ARGS...` in it as root; its output
# is printed as it goes. Exit status: the benchmark's.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
cd "$REPO"
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

npm run build
[ -f dist/bench/netlink.js ] || { echo "bench:netlink: dist/bench/netlink.js was not built" >&2; exit 1; }
"$HERE/prepare.sh"

cmd='exec node dist/bench/netlink.js'
for a in "$@"; do cmd+=" $(q "$a")"; done
exec "$HERE/run.sh" -- "$cmd"
