#!/usr/bin/env bash
# npm run bench:classify [-- ARGS...]
#
# Builds, prepares the VM and runs `node dist/bench/classify.js ARGS...` in it as root: the
# per-packet cost of classifying IPv4 and IPv6 packets at 10,000 limited dual-stack peers, side
# by side in one run. Its output is printed as it goes. Exit status: the benchmark's.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

build_for bench:classify dist/bench/classify.js

cmd='exec node dist/bench/classify.js'
for a in "$@"; do cmd+=" $(q "$a")"; done
exec "$HERE/run.sh" -- "$cmd"
