#!/usr/bin/env bash
# npm run bench:netlink [-- ARGS...]
#
# Builds, prepares the VM and runs `node dist/bench/netlink.js ARGS...` in it as root; its output
# is printed as it goes. Exit status: the benchmark's.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

build_for bench:netlink dist/bench/netlink.js

cmd='exec node dist/bench/netlink.js'
for a in "$@"; do cmd+=" $(q "$a")"; done
exec "$HERE/run.sh" -- "$cmd"
