#!/usr/bin/env bash
# npm run bench:restore: the state directory's figures (issue 16) in the VM, see bench/restore.ts:
# restoring BENCH_RESTORE_PEERS peers (default 50,000) with limits and caps, by the daemon and by
# the kernel's own bulk tools (wg addconf, tc -batch, nft -f); GET /api/peers p99 at that many
# capped peers with and without usage checkpoints; 50 concurrent creates with and without a
# state dir. Its output is printed as it goes. Exit status: the benchmark's.
#
# Sets, unless already set: WG_PEERD_VM_MEM=6144 (MiB) and WG_PEERD_VM_TIMEOUT=3600 (s). Every
# BENCH_* variable is passed into the guest. Run it alone on the machine: it measures.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$HERE/../.." && pwd -P)"
cd "$REPO"

export WG_PEERD_VM_MEM="${WG_PEERD_VM_MEM:-6144}"
export WG_PEERD_VM_TIMEOUT="${WG_PEERD_VM_TIMEOUT:-3600}"

npm run build
[ -f dist/bench/restore.js ] || { echo "bench:restore: dist/bench/restore.js was not built" >&2; exit 1; }
"$HERE/prepare.sh"

env_args=()
while IFS='=' read -r name _; do
  env_args+=(-e "$name=${!name}")
done < <(env | grep -E '^BENCH_[A-Z0-9_]+=' || true)

exec "$HERE/run.sh" "${env_args[@]}" -- 'exec node dist/bench/restore.js'
