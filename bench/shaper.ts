/**
 * Speed-limit benchmark: the shaper's calls at scale on a /16, against `tc` reading the same
 * state in the same run. Needs root and a kernel with sch_htb, cls_u32, sch_ingress, act_mirred
 * and ifb, but not WireGuard: the shaped interface is one end of a veth pair (tc does not care).
 * Run it on the build host as root (`node dist/bench/shaper.js` after `npm run build`) or in the
 * test VM (`scripts/vm/run.sh -- node dist/bench/shaper.js`; TCG is several times slower).
 *
 * Prints: building the skeleton, N limits one by one (and the time per limit at the start and at
 * the end: the kernel rebinds filters to a new class by walking every filter of the qdisc,
 * cls_api tc_bind_tclass, so creating a class costs O(filters)), ensure() on an intact skeleton,
 * listLimits() against `tc class show`, a replace, a removal, and the full check a restarted
 * daemon makes.
 *
 * Options: BENCH_PEERS (default 10000), BENCH_ROUNDS (default 9).
 */
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { Shaper, ifbNameFor } from '../src/kernel/shaper';
import { median, time, timed } from './support';

const IFNAME = 'shbench0';
const PEER_END = 'shbench1';
const PEERS = Number(process.env.BENCH_PEERS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 9);

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: 'ignore' });
}

function cleanup(): void {
  for (const link of [IFNAME, ifbNameFor(IFNAME)]) {
    try {
      ip('link', 'del', link);
    } catch {
      // not there
    }
  }
}

function address(i: number): string {
  const value = 0x0a500000 + 2 + i; // 10.80.0.2, ...
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

/** Every address the benchmark limits is a live peer's: ensure() keeps them all. */
const LIVE = Array.from({ length: PEERS }, (_, i) => ({ address: address(i), publicKey: '' }));

const ms = (value: number): string => `${value.toFixed(1)} ms`;

async function main(): Promise<void> {
  cleanup();
  ip('link', 'add', IFNAME, 'type', 'veth', 'peer', 'name', PEER_END);
  ip('addr', 'add', '10.80.0.1/16', 'dev', IFNAME);
  ip('link', 'set', IFNAME, 'up');
  let shaper = new Shaper();
  try {
    console.log(
      `shaper benchmark: ${PEERS} limited peers on a /16, kernel ${execFileSync('uname', ['-r']).toString().trim()}`,
    );
    console.log(
      `  ensure(), building (2 x 513 u32 tables and links): ${ms(await time(() => shaper.ensure(IFNAME, LIVE)))}`,
    );
    const block = Math.min(100, PEERS);
    const perLimit: number[] = [];
    const all = await time(async () => {
      for (let i = 0; i < PEERS; i++) {
        const start = performance.now();
        await shaper.setLimit(IFNAME, { address: address(i), publicKey: '' }, 100_000 + i);
        perLimit.push(performance.now() - start);
      }
    });
    console.log(
      `  ${PEERS} x setLimit(): ${(all / 1000).toFixed(1)} s; median per limit: ` +
        `${ms(median(perLimit.slice(0, block)))} for the first ${block}, ` +
        `${ms(median(perLimit.slice(-block)))} for the last ${block}`,
    );
    console.log(
      `  ensure(), intact (median of ${ROUNDS}): ${ms(await timed(ROUNDS, () => shaper.ensure(IFNAME, LIVE)))}`,
    );
    let listed = 0;
    const list = await timed(ROUNDS, async () => {
      listed = (await shaper.listLimits(IFNAME)).size;
    });
    const tcList = await timed(ROUNDS, () =>
      execFileSync('tc', ['class', 'show', 'dev', IFNAME], { maxBuffer: 256 * 1024 * 1024 }),
    );
    console.log(
      `  listLimits() of ${listed} (median of ${ROUNDS}): ${ms(list)}; \`tc class show\`: ${ms(tcList)}`,
    );
    console.log(
      `  setLimit() replacing a limit (median of ${ROUNDS}): ` +
        `${ms(await timed(ROUNDS, () => shaper.setLimit(IFNAME, { address: address(0), publicKey: '' }, 5_000)))}`,
    );
    console.log(`  removeLimit(): ${ms(await time(() => shaper.removeLimit(IFNAME, address(1))))}`);
    shaper.close();
    shaper = new Shaper();
    console.log(
      `  ensure() of a restarted daemon (dumps ${PEERS} filters and classes per device): ` +
        `${ms(await time(() => shaper.ensure(IFNAME, LIVE)))}`,
    );
  } finally {
    shaper.close();
    cleanup();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  cleanup();
  process.exit(1);
});
