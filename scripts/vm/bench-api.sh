#!/usr/bin/env bash
# npm run bench:api
#
# Builds, prepares the VM and runs `node dist/bench/api.js` in it as root (GET /api/peers under
# load: the daemon against a `wg show dump` baseline and a replay ceiling, at 1,000, 10,000 and
# 50,000 peers; see bench/api.ts, which measures the raw costs in a child process with the
# daemon's node flags). Its output is printed as it goes. Exit status: the benchmark's.
#
# Sets, unless already set: WG_PEERD_VM_MEM=6144 (MiB: a 50,000-peer daemon, the baseline's wg
# processes, autocannon and the repository snapshot in RAM) and WG_PEERD_VM_TIMEOUT=3600 (s; a full
# run takes 30-40 minutes under TCG). Every BENCH_* variable (BENCH_SIZES, BENCH_ROUNDS,
# BENCH_CONNECTIONS, BENCH_WARMUP_S, BENCH_DURATION_S, BENCH_RAW_RUNS, BENCH_ALONE_REQUESTS, BENCH_ALONE_SIZE) is
# passed into the guest. BENCH_CAPPED=1 measures issue 29's capped host instead (every peer
# capped, restored by the daemon from a state dir; the exec reference with the same caps; the
# partial list ?fields=): see bench/api.ts.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export WG_PEERD_VM_MEM="${WG_PEERD_VM_MEM:-6144}"
export WG_PEERD_VM_TIMEOUT="${WG_PEERD_VM_TIMEOUT:-3600}"

build_for bench:api dist/bench/{api,baseline-wg-dump,replay-ceiling,capped-population}.js

env_args=()
while IFS='=' read -r name _; do
  env_args+=(-e "$name=${!name}")
done < <(env | grep -E '^BENCH_[A-Z0-9_]+=' || true)

exec "$HERE/run.sh" "${env_args[@]}" -- 'exec node dist/bench/api.js'
