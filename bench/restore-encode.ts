/**
 * The JavaScript side of a capped host's restore (issue 29), on the build host: no VM, no
 * WireGuard module needed. In a network namespace of its own (it re-runs itself under
 * `unshare -n`), BENCH_ROUNDS times (default 5), for BENCH_RESTORE_PEERS peers of the capped host
 * (bench/capped-population.ts, default 50,000), timed one after the other:
 *   quota   `Quota.ensure` on a kernel without the table (the restore's caps transaction), then
 *           `nft -f` of the `nft list ruleset` it made, each after the table was deleted;
 *   shaper  `Shaper.ensure` + `Shaper.setLimits` of the limited tenth on a fresh veth and IFB
 *           (the restore's speed-limit phase), the links deleted after each round;
 *   wg      the WireGuard restore's encoding alone: setPeerMessages, every peer's SET_DEVICE
 *           attributes (the module is absent here, so nothing is sent).
 * Medians printed, in milliseconds. Not a test and not part of CI.
 *
 *   npx tsc -p tsconfig.json && node --max-semi-space-size=... dist/bench/restore-encode.js
 *
 * Run it with the daemon's node flags (bench/support.ts's startNodeFlags) to measure the GC as
 * deployed. Knobs: BENCH_RESTORE_PEERS (50000), BENCH_ROUNDS (5), BENCH_PARTS
 * ("quota,shaper,wg"), BENCH_CPU_PROF (unset; a file prefix: a V8 CPU profile of each part's
 * last round, PREFIX-PART.cpuprofile).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { performance } from 'node:perf_hooks';
import { Quota, quotaTableName } from '../src/kernel/quota';
import { Shaper, ifbNameFor } from '../src/kernel/shaper';
import type { CapRef } from '../src/kernel/types';
import { setPeerMessages } from '../src/kernel/wireguard';
import { AF_INET } from '../src/kernel/rtnetlink';
import { cappedHostPeer, peerAddress, shaperTcBatch } from './capped-population';
import { median } from './support';

const IFNAME = 'encbench0';
const PEERS = Number(process.env.BENCH_RESTORE_PEERS ?? 50_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const PARTS = (process.env.BENCH_PARTS ?? 'quota,shaper,wg').split(',');
const PROFILE = process.env.BENCH_CPU_PROF;

function sh(command: string): string {
  return execFileSync('sh', ['-c', command], { encoding: 'utf8', maxBuffer: 1 << 30 });
}

async function profiled<T>(part: string, last: boolean, work: () => Promise<T>): Promise<T> {
  if (!PROFILE || !last) return work();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  try {
    return await work();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(`${PROFILE}-${part}.cpuprofile`, JSON.stringify(profile));
    session.disconnect();
  }
}

async function ms(work: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await work();
  return performance.now() - start;
}

const fmt = (values: number[]): string =>
  `${median(values).toFixed(0).padStart(6)} ms  [${values.map(Math.round).join(' ')}]`;

async function quotaPart(): Promise<void> {
  const caps: CapRef[] = Array.from({ length: PEERS }, (_, i) => ({
    address: peerAddress(i),
    publicKey: randomBytes(32).toString('base64'),
    lastSeen: cappedHostPeer(i).cap!,
  }));
  const table = quotaTableName(IFNAME);
  const ours: number[] = [];
  const theirs: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const quota = new Quota();
    try {
      ours.push(
        await profiled('quota', round === ROUNDS - 1, () => ms(() => quota.ensure(IFNAME, caps))),
      );
    } finally {
      quota.close();
    }
    const ruleset = sh('nft list ruleset');
    writeFileSync('/tmp/restore-encode.nft', ruleset);
    sh(`nft delete table ip ${table}`);
    const start = performance.now();
    sh('nft -f /tmp/restore-encode.nft');
    theirs.push(performance.now() - start);
    sh(`nft delete table ip ${table}`);
  }
  console.log(`quota: ${PEERS} caps, one transaction`);
  console.log(`  Quota.ensure  ${fmt(ours)}`);
  console.log(`  nft -f        ${fmt(theirs)}`);
}

const IFB = ifbNameFor(IFNAME);

/** bench/restore.ts's tc -batch for the limited peers (capped-population.ts shaperTcBatch). */
function tcBatch(rates: number[]): string {
  const limited: Array<[number, number]> = [];
  for (let i = 0; i < PEERS; i++) {
    if (cappedHostPeer(i).limit !== null) limited.push([i, rates[limited.length]!]);
  }
  return shaperTcBatch(IFNAME, IFB, limited);
}

async function shaperPart(): Promise<void> {
  const live = Array.from({ length: PEERS }, (_, i) => ({
    address: peerAddress(i),
    publicKey: '',
  }));
  const limits = live.flatMap((peer, i) => {
    const limit = cappedHostPeer(i).limit;
    return limit === null ? [] : [{ peer, bytesPerSecond: limit }];
  });
  const ensured: number[] = [];
  const set: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    sh(`ip link add ${IFNAME} type veth peer name ${IFNAME}p`);
    sh(`ip addr add 10.77.0.1/16 dev ${IFNAME} && ip link set ${IFNAME} up`);
    const shaper = new Shaper();
    try {
      await profiled('shaper', round === ROUNDS - 1, async () => {
        ensured.push(await ms(() => shaper.ensure(IFNAME, live)));
        set.push(await ms(() => shaper.setLimits(IFNAME, limits)));
      });
    } finally {
      shaper.close();
      sh(`ip link del ${IFNAME}; ip link del ${ifbNameFor(IFNAME)}`);
    }
  }
  const tools: number[] = [];
  writeFileSync('/tmp/restore-encode.tc', tcBatch(limits.map((limit) => limit.bytesPerSecond)));
  for (let round = 0; round < ROUNDS; round++) {
    sh(`ip link add ${IFNAME} type veth peer name ${IFNAME}p`);
    sh(`ip addr add 10.77.0.1/16 dev ${IFNAME} && ip link set ${IFNAME} up`);
    const start = performance.now();
    sh(`ip link add ${IFB} type ifb && ip link set ${IFB} up && tc -batch /tmp/restore-encode.tc`);
    tools.push(performance.now() - start);
    sh(`ip link del ${IFNAME}; ip link del ${IFB}`);
  }
  console.log(`shaper: ${limits.length} limits of ${PEERS} peers, both devices`);
  console.log(`  ensure        ${fmt(ensured)}`);
  console.log(`  setLimits     ${fmt(set)}`);
  console.log(`  tc -batch     ${fmt(tools)}`);
}

async function wgPart(): Promise<void> {
  const peers = Array.from({ length: PEERS }, (_, i) => ({
    publicKey: randomBytes(32).toString('base64'),
    flags: 0,
    allowedIps: [{ family: AF_INET, address: peerAddress(i), cidr: 32 }],
  }));
  const times: number[] = [];
  let bytes = 0;
  for (let round = 0; round < ROUNDS; round++) {
    times.push(
      await profiled('wg', round === ROUNDS - 1, () =>
        ms(async () => {
          bytes = 0;
          for (const message of setPeerMessages(IFNAME, peers)) bytes += message.length;
        }),
      ),
    );
  }
  console.log(`wg: ${PEERS} peers planned and encoded (${bytes} bytes)`);
  console.log(`  encode        ${fmt(times)}`);
}

async function main(): Promise<void> {
  console.log(
    `kernel ${sh('uname -r').trim()}, node ${process.version} ${process.execArgv.join(' ')}, ${ROUNDS} rounds, medians`,
  );
  if (PARTS.includes('wg')) await wgPart();
  if (PARTS.includes('quota')) await quotaPart();
  if (PARTS.includes('shaper')) await shaperPart();
}

if (process.env.BENCH_IN_NETNS !== '1') {
  const run = spawnSync(
    'unshare',
    ['-n', process.execPath, ...process.execArgv, ...process.argv.slice(1)],
    { stdio: 'inherit', env: { ...process.env, BENCH_IN_NETNS: '1' } },
  );
  process.exit(run.status ?? 1);
} else {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
