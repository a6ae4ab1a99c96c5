/**
 * The cap read on its own (issue 29), on any host with nf_tables, no WireGuard and no VM needed:
 * for each BENCH_CAPS count (default "10000,50000") a throw-away caps table with that many quota
 * objects is made by the daemon's own restore (`Quota.ensure` with every peer's last-seen cap: a
 * tenth with a billing period, every cap with some bytes used), then BENCH_ROUNDS times
 * (default 7), alternating, timed:
 *   listCaps   the daemon's cap read as the list and the checkpoint call it (`Quota.listCaps`),
 *              polled with nothing changed in between (as most polls are: the caps map is not
 *              read again while the ruleset generation stands);
 *   before     the cap read as it was before issue 29's decoders (the same two dumps, decoded
 *              by the attribute tables: decodeAttributes per object and per element), kept
 *              here so that the two are compared in the same run on a loaded host;
 *   first      the first listCaps of a new Quota (what a daemon's start pays: no handle known
 *              yet, every object decoded whole, the caps map read too);
 *   nft -j     `nft -j list quotas` (the kernel's own tool), a labelled baseline, as the exec
 *              reference reads caps.
 * Medians printed, in milliseconds. Runs as root, in a network namespace of its own (it re-runs
 * itself under `unshare -n`), so the table is gone when it exits and no one else's tables are
 * in the kernel's walks. Not a test and not part of CI: it prints figures.
 *
 *   npx tsc -p tsconfig.json && node dist/bench/caps-read.js
 *
 * Knobs: BENCH_CAPS ("10000,50000"), BENCH_ROUNDS (7), BENCH_NFT (1; 0 leaves out nft -j),
 * BENCH_CPU_PROF (unset; a file: a V8 CPU profile of the listCaps rounds of the last count).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { performance } from 'node:perf_hooks';
import { decodeAttributes, openNativeTransport } from '../src/netlink';
import { NfTables } from '../src/kernel/nftables/client';
import { NFT_OBJECT_QUOTA, NFT_QUOTA_F_DEPLETED } from '../src/kernel/nftables/constants';
import { quotaAttributes, quotaListing } from '../src/kernel/nftables/schema';
import {
  CAPS_MAP,
  QUOTA_FAMILY,
  Quota,
  addressOfObject,
  quotaTableName,
} from '../src/kernel/quota';
import { extrasIn } from '../src/kernel/quota/listing';
import { elementTargets } from '../src/kernel/quota/objects';
import type { CapRef, KernelDataCap } from '../src/kernel/types';
import { median } from './support';

const IFNAME = 'capbench0';
const COUNTS = (process.env.BENCH_CAPS ?? '10000,50000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const WITH_NFT = process.env.BENCH_NFT !== '0';
const PROFILE = process.env.BENCH_CPU_PROF;
const DAY = 86_400_000;

/** Peer i's address: distinct /32s of 10.64.0.0/10. */
function addressOf(i: number): string {
  return `10.${64 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
}

function capsOf(count: number): CapRef[] {
  const now = Date.now();
  return Array.from({ length: count }, (_, i) => ({
    address: addressOf(i),
    publicKey: randomBytes(32).toString('base64'),
    lastSeen: {
      quotaBytes: 10_000_000_000 + i,
      usedBytes: 1_000_000 + i,
      ...(i % 10 === 0
        ? {
            plan: {
              period: 'month' as const,
              periodStart: { at: now - 40 * DAY, offsetMinutes: 0 },
              periodFrom: now - 10 * DAY,
              previousUsedBytes: 123_456_789,
            },
          }
        : {}),
    },
  }));
}

/** The cap read before issue 29's decoders (plain blocking caps only, as the bench makes). */
async function listCapsBefore(nft: NfTables, ifname: string): Promise<Map<string, KernelDataCap>> {
  const table = quotaTableName(ifname);
  const caps = new Map<string, KernelDataCap>();
  const objects = await nft.listObjects(QUOTA_FAMILY, table, NFT_OBJECT_QUOTA, quotaListing);
  const extras = objects.map((object) => extrasIn(object.userdata));
  const routes = elementTargets(await nft.listSetElements(QUOTA_FAMILY, table, CAPS_MAP));
  objects.forEach((object, i) => {
    const address = object.name ? addressOfObject(object.name) : null;
    if (!address || !object.data || object.table !== table) return;
    const data = decodeAttributes(quotaAttributes, object.data, 'quota');
    const quotaBytes = Number(data.bytes ?? 0n);
    const usedBytes = Number(data.consumed ?? 0n);
    const enforced = routes.get(address) === object.name;
    void (((data.flags ?? 0) & NFT_QUOTA_F_DEPLETED) !== 0);
    caps.set(address, { quotaBytes, usedBytes, enforced, ...extras[i]!.plan });
  });
  return caps;
}

async function ms(work: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await work();
  return performance.now() - start;
}

async function main(): Promise<void> {
  const quota = new Quota();
  const nft = new NfTables(openNativeTransport);
  const kernel = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();
  console.log(`kernel ${kernel}, node ${process.version}, ${ROUNDS} rounds, medians`);
  try {
    for (const [k, count] of COUNTS.entries()) {
      const caps = capsOf(count);
      const made = await ms(() => quota.ensure(IFNAME, caps));
      const read = await quota.listCaps(IFNAME);
      if (read.size !== count) throw new Error(`made ${count} caps, listCaps read ${read.size}`);
      const profiling = PROFILE !== undefined && k === COUNTS.length - 1;
      const session = profiling ? new Session() : null;
      if (session) {
        session.connect();
        await session.post('Profiler.enable');
        await session.post('Profiler.start');
      }
      const before = await listCapsBefore(nft, IFNAME);
      if (JSON.stringify([...before]) !== JSON.stringify([...read])) {
        throw new Error('the cap read before and now differ');
      }
      const ours: number[] = [];
      const old: number[] = [];
      const theirs: number[] = [];
      const first: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        ours.push(await ms(() => quota.listCaps(IFNAME)));
        const fresh = new Quota();
        first.push(await ms(() => fresh.listCaps(IFNAME)));
        fresh.close();
        old.push(await ms(() => listCapsBefore(nft, IFNAME)));
        if (!WITH_NFT) continue;
        const start = performance.now();
        const out = execFileSync('nft', ['-j', 'list', 'quotas'], { maxBuffer: 1 << 30 });
        theirs.push(performance.now() - start);
        if (round === 0 && out.length < count * 50) throw new Error('nft -j listed too little');
      }
      if (session) {
        const { profile } = await session.post('Profiler.stop');
        writeFileSync(PROFILE!, JSON.stringify(profile));
        session.disconnect();
      }
      const fmt = (values: number[]): string => `${median(values).toFixed(1)} ms`.padStart(11);
      console.log(`${String(count).padStart(6)} caps (made in ${(made / 1000).toFixed(1)} s):`);
      console.log(`  listCaps (daemon)        ${fmt(ours)}  [${ours.map(Math.round).join(' ')}]`);
      console.log(`  listCaps before issue 29 ${fmt(old)}  [${old.map(Math.round).join(' ')}]`);
      console.log(`  first listCaps of a start${fmt(first)}  [${first.map(Math.round).join(' ')}]`);
      if (WITH_NFT) {
        console.log(
          `  nft -j list quotas       ${fmt(theirs)}  [${theirs.map(Math.round).join(' ')}]`,
        );
      }
      await quota.ensure(IFNAME, []); // the objects go, the skeleton stays for the next count
    }
  } finally {
    nft.close();
    quota.close();
  }
}

if (process.env.BENCH_IN_NETNS !== '1') {
  // A namespace of our own: the table dies with it, and no other table is walked.
  const run = spawnSync('unshare', ['-n', process.execPath, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, BENCH_IN_NETNS: '1' },
  });
  process.exit(run.status ?? 1);
} else {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
