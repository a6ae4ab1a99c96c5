/**
 * Issue 29's peak RSS under `npm run bench:api`'s A load, on the build host: the daemon's HTTP
 * side (createHttpServer with the metrics, per-peer series on as by default) over a fake kernel
 * whose WireGuard read decodes a generated dump of BENCH_PEERS (default 50,000) peers afresh each
 * read (each datagram a new Buffer, as native/netlink.c copies every recv, through the daemon's
 * DumpMemo) and whose caps, limits and suspensions are the capped host's
 * (bench/capped-population.ts); `--list-max-age` 1000 ms as by default. After a first list,
 * autocannon in a process of its own polls GET /api/peers with 8 connections for BENCH_WARMUP_S
 * (default 5) then BENCH_DURATION_S (default 20) seconds. BENCH_MOVING=1: every cap's used bytes
 * move between reads (every peer's JSON written afresh per read; in the VM bench nothing moves).
 *
 * Each run is a process of its own, with the node flags of a variant (BENCH_VARIANTS, `;`
 * between variants, `,` between flags; default `npm start`'s flags against the earlier
 * `--single-threaded-gc --max-semi-space-size=24`), the variants alternating for BENCH_ROUNDS
 * (default 3) rounds.
 * BENCH_BASE=DIR adds the build in DIR (a `dist` of an earlier commit) with the first variant's
 * flags. Printed per run: polls/s; the server's CPU time a kernel read (and its user part: the
 * kernel's copy of each answer into the socket is system time), the GC time and full GCs while
 * measured; peak RSS (VmHWM); what the process held at the highest RSS sampled every 20 ms, up
 * to the first list's answer and while polled: V8's heap spaces (committed), external memory,
 * array buffers; and what it holds after a full GC at the end. BENCH_HANDSHAKES=1: three peers
 * in four have handshaked, so their minutes move and every read builds a new body (a busy
 * host); by default none has, as in the VM bench, and the body is answered again.
 * BENCH_HEAP_SNAPSHOT=FILE (a child run alone) writes a heap snapshot after that GC.
 * `node dist/bench/memory-poll.js` after `npx tsc`; no kernel and no root.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { PerformanceObserver, constants, performance } from 'node:perf_hooks';
import v8 from 'node:v8';
import type { KernelDataCap, LimitState } from '../src/kernel/types';
import { asKernelCap, asLimitState, cappedHostPeer } from './capped-population';
import { loadBuild, median, startNodeFlags } from './support';

const PEERS = Number(process.env.BENCH_PEERS ?? 50_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WARMUP_S = Number(process.env.BENCH_WARMUP_S ?? 5);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 20);
const MOVING = process.env.BENCH_MOVING === '1';
const HANDSHAKES = process.env.BENCH_HANDSHAKES === '1';
/** BENCH_TRACE=1 (a child run alone): reads, RSS, array buffers and heap spaces every 200 ms, on stderr. */
const TRACE = process.env.BENCH_TRACE === '1';
/** `npm start`'s node flags before issue 29's cut (a young generation of up to 2 × 24 MiB). */
const EARLIER_FLAGS = '--single-threaded-gc,--max-semi-space-size=24';
const VARIANTS = (
  process.env.BENCH_VARIANTS ??
  `${startNodeFlags(path.resolve(__dirname, '..')).join(',')};${EARLIER_FLAGS}`
)
  .split(';')
  .map((variant) => variant.split(',').filter(Boolean));

const MiB = 2 ** 20;

interface Sample {
  rssMiB: number;
  /** Committed MiB per V8 heap space, and external / arrayBuffers. */
  spaces: Record<string, number>;
  externalMiB: number;
  arrayBuffersMiB: number;
}

function sample(): Sample {
  const usage = process.memoryUsage();
  const spaces: Record<string, number> = {};
  for (const space of v8.getHeapSpaceStatistics()) {
    if (space.physical_space_size > 0) spaces[space.space_name] = space.physical_space_size / MiB;
  }
  return {
    rssMiB: usage.rss / MiB,
    spaces,
    externalMiB: usage.external / MiB,
    arrayBuffersMiB: usage.arrayBuffers / MiB,
  };
}

function autocannon(port: number, seconds: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        require.resolve('autocannon/autocannon.js'),
        '-j',
        '-c',
        '8',
        '-d',
        String(seconds),
        '-t',
        '120',
        `http://127.0.0.1:${port}/api/peers`,
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('exit', () => {
      const result = JSON.parse(out) as {
        requests: { total: number };
        duration: number;
        errors: number;
        non2xx: number;
      };
      if (result.non2xx !== 0 || result.errors !== 0)
        reject(new Error(`${result.non2xx} non-2xx, ${result.errors} errors`));
      resolve(result.requests.total / result.duration);
    });
  });
}

async function child(dist: string): Promise<void> {
  const build = loadBuild(dist);
  // BENCH_HANDSHAKES=1: three peers in four have handshaked (their minutes move, so every read
  // gives a new body); by default none has, as in the VM bench.
  const dump = build.generated.generatedDump(PEERS, 150, (peer) => {
    if (!HANDSHAKES) peer.handshake = null;
  });
  const memo = new build.dump.DumpMemo();
  const first = build.dump.decodeDeviceDump('wgx', dump, memo);
  const caps = new Map<string, KernelDataCap>();
  const limits = new Map<string, LimitState>();
  const suspended = new Map<string, string>();
  const now = Date.now();
  first.peers.forEach((peer, i) => {
    const ip = build.peers.tunnelAddressOf(peer);
    if (ip === null) return;
    const plan = cappedHostPeer(i, now);
    if (plan.cap !== null) caps.set(ip, asKernelCap(plan.cap));
    const limit = asLimitState(plan.limit);
    if (limit !== null) limits.set(ip, limit);
    if (plan.suspended) suspended.set(ip, peer.publicKey);
  });
  let reads = 0;
  const kernel = {
    wireguard: {
      getDevice: async () => {
        reads++;
        return build.dump.decodeDeviceDump(
          'wgx',
          dump.map((message) => Buffer.from(message)),
          memo,
        );
      },
    },
    shaper: { listLimits: async () => new Map(limits) },
    quota: {
      listCaps: async () => {
        const listed = new Map<string, KernelDataCap>();
        for (const [ip, cap] of caps) {
          listed.set(ip, MOVING ? { ...cap, usedBytes: cap.usedBytes + reads } : { ...cap });
        }
        return listed;
      },
    },
    suspension: { listSuspended: async () => new Map(suspended) },
    names: { listNames: async () => [] },
    link: {},
    changes: { run: <T>(task: () => Promise<T>): Promise<T> => task() },
  } as unknown as import('../src/peers').PeerServiceOptions['kernel'];
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const service = new build.peers.PeerService({
    kernel,
    interfaceName: 'wgx',
    logger: silent,
    listMaxAgeMs: 1000,
  });
  const metrics = build.http.createMetrics({
    service: { snapshot: () => service.snapshot() },
    perPeer: true,
  });
  const server = build.http.createHttpServer({
    service,
    tokens: null,
    logger: build.log.createLogger({ level: 'silent' }),
    metrics,
    version: 'bench',
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  let peak = sample();
  const timer = setInterval(() => {
    const now = sample();
    if (now.rssMiB > peak.rssMiB) peak = now;
    if (TRACE && ++ticks % 10 === 0) {
      const spaces = Object.values(now.spaces).map((mib) => mib.toFixed(0));
      console.error(
        `${reads} ${now.rssMiB.toFixed(0)} ${now.arrayBuffersMiB.toFixed(0)} ${spaces.join(' ')}`,
      );
    }
  }, 20);
  let ticks = 0;
  const firstStarted = performance.now();
  await new Promise<void>((resolve, reject) =>
    http
      .get({ host: '127.0.0.1', port, path: '/api/peers', agent: false }, (res) => {
        res.resume();
        res.on('end', resolve);
      })
      .on('error', reject),
  );
  const firstMs = performance.now() - firstStarted;
  const firstPeak = peak;
  peak = sample();
  const afterFirst =
    Number(/^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;
  await autocannon(port, WARMUP_S);
  let gcMs = 0;
  let fullGcs = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      gcMs += entry.duration;
      const kind = (entry as { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) fullGcs++;
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  const readsBefore = reads;
  const cpuBefore = process.cpuUsage();
  const rate = await autocannon(port, DURATION_S);
  const cpu = process.cpuUsage(cpuBefore);
  observer.disconnect();
  const measuredReads = reads - readsBefore;
  const cpuMsPerRead = (cpu.user + cpu.system) / 1000 / Math.max(1, measuredReads);
  const cpuMsPerPoll = (cpu.user + cpu.system) / 1000 / Math.max(1, rate * DURATION_S);
  // The kernel's copy of each 33-37 MB answer into the socket is system time, so the user time
  // a read is mostly the read, its body and the GC.
  const userMsPerRead = cpu.user / 1000 / Math.max(1, measuredReads);
  clearInterval(timer);
  server.close();
  const hwm =
    Number(/^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;
  (globalThis as { gc?: () => void }).gc?.();
  if (process.env.BENCH_HEAP_SNAPSHOT !== undefined) {
    v8.writeHeapSnapshot(process.env.BENCH_HEAP_SNAPSHOT);
  }
  const usage = process.memoryUsage();
  const held = { heapUsedMiB: usage.heapUsed / MiB, arrayBuffersMiB: usage.arrayBuffers / MiB };
  console.log(
    JSON.stringify({
      ...{ rate, hwm, afterFirst, firstMs, reads, peak, firstPeak, held },
      ...{ cpuMsPerRead, cpuMsPerPoll, userMsPerRead, gcMs, fullGcs },
    }),
  );
}

interface Figures {
  rate: number;
  hwm: number;
  afterFirst: number;
  /** The first list (a cold read and build), ms. */
  firstMs: number;
  reads: number;
  peak: Sample;
  /** The highest sample up to the first list's answer. */
  firstPeak: Sample;
  /** The server's CPU time per kernel read while measured, the time in GC, the full GCs. */
  cpuMsPerRead: number;
  cpuMsPerPoll: number;
  userMsPerRead: number;
  gcMs: number;
  fullGcs: number;
  /** After a full GC at the end (with --expose-gc). */
  held: { heapUsedMiB: number; arrayBuffersMiB: number };
}

function described(at: Sample): string {
  const spaces = Object.entries(at.spaces)
    .map(([name, mib]) => `${name.replace('_space', '')} ${mib.toFixed(0)}`)
    .join(', ');
  return (
    `${at.rssMiB.toFixed(0)} (${spaces}; external ${at.externalMiB.toFixed(0)}, ` +
    `array buffers ${at.arrayBuffersMiB.toFixed(0)})`
  );
}

function run(dist: string, flags: string[]): Figures {
  const result = spawnSync(process.execPath, [...flags, '--expose-gc', __filename], {
    encoding: 'utf8',
    env: { ...process.env, BENCH_POLL_CHILD: dist },
  });
  if (result.status !== 0) throw new Error(`run over ${dist} failed:\n${result.stderr}`);
  return JSON.parse(result.stdout.trim().split('\n').at(-1)!) as Figures;
}

function main(): void {
  const ours = path.resolve(__dirname, '..');
  const configs: Array<{ name: string; dist: string; flags: string[] }> = VARIANTS.map((flags) => ({
    name: `this build ${flags.join(' ')}`,
    dist: ours,
    flags,
  }));
  if (process.env.BENCH_BASE !== undefined) {
    configs.unshift({
      name: `base ${VARIANTS[0]!.join(' ')}`,
      dist: path.resolve(process.env.BENCH_BASE),
      flags: VARIANTS[0]!,
    });
  }
  console.log(
    `${PEERS} capped peers${MOVING ? ', every cap moving' : ''}` +
      `${HANDSHAKES ? ', three in four handshaked' : ', none handshaked'}, 8 connections, ` +
      `${WARMUP_S} s warm-up, ${DURATION_S} s measured, ${ROUNDS} rounds alternating`,
  );
  const all = new Map<string, Figures[]>(configs.map((c) => [c.name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const config of configs) {
      const figures = run(config.dist, config.flags);
      all.get(config.name)!.push(figures);
      console.log(
        `  ${config.name}: ${figures.rate.toFixed(2)} polls/s (${figures.reads} reads; ` +
          `CPU ${figures.cpuMsPerRead.toFixed(0)} ms a read (user ${figures.userMsPerRead.toFixed(0)}), ${figures.cpuMsPerPoll.toFixed(1)} a poll, GC ${figures.gcMs.toFixed(0)} ms, ` +
          `${figures.fullGcs} full), peak RSS ` +
          `${figures.hwm.toFixed(0)} MiB (after the first list ${figures.afterFirst.toFixed(0)}; it took ` +
          `${figures.firstMs.toFixed(0)} ms); ` +
          `first list's highest sample ${described(figures.firstPeak)}; polling's ${described(figures.peak)}; held after a full GC: heap ` +
          `${figures.held.heapUsedMiB.toFixed(0)}, array buffers ${figures.held.arrayBuffersMiB.toFixed(0)}`,
      );
    }
  }
  for (const [name, runs] of all) {
    console.log(
      `${name}: polls/s ${median(runs.map((r) => r.rate)).toFixed(2)}, CPU a read ` +
        `${median(runs.map((r) => r.cpuMsPerRead)).toFixed(0)} ms (user ` +
        `${median(runs.map((r) => r.userMsPerRead)).toFixed(0)}), CPU a poll ` +
        `${median(runs.map((r) => r.cpuMsPerPoll)).toFixed(1)} ms, peak RSS ` +
        `${median(runs.map((r) => r.hwm)).toFixed(0)} MiB (medians of ${runs.length})`,
    );
  }
}

if (process.env.BENCH_POLL_CHILD !== undefined) {
  child(process.env.BENCH_POLL_CHILD).catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
} else {
  main();
}
