#!/usr/bin/env bash
# npm run bench:events
#
# Builds, prepares the VM and runs `node dist/bench/events.js` in it as root: the event stream at
# 10,000 peers (kernel reads with 0, 1 and 1,000 streams open, delivery latency of an event to
# 1,000 streams, memory per stream; see bench/events.ts). Every BENCH_EVENTS_* variable is passed
# into the guest. The open-file limit is raised for the 1,000 streams (both ends run in the
# guest). Sets WG_PEERD_VM_MEM=3072 unless set.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
cd "$REPO"

export WG_PEERD_VM_MEM="${WG_PEERD_VM_MEM:-3072}"

npm run build
[ -f dist/bench/events.js ] || { echo "bench:events: dist/bench/events.js was not built" >&2; exit 1; }
"$HERE/prepare.sh"

env_args=()
while IFS='=' read -r name _; do
  env_args+=(-e "$name=${!name}")
done < <(env | grep -E '^BENCH_[A-Z0-9_]+=' || true)

exec "$HERE/run.sh" "${env_args[@]}" -- 'ulimit -n 65536 && exec node dist/bench/events.js'
