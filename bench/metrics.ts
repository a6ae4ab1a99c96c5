/**
 * /metrics rendering benchmark: the per-peer text of one snapshot of BENCH_PEERS synthetic peers
 * (a third never handshaked, half limited, a quarter capped), with and without per-peer series.
 * No kernel and no root: `node dist/bench/metrics.js` after `npm run build`.
 *
 * Prints per mode: lines, megabytes, and the median / min / max render time of BENCH_ROUNDS
 * renders, and the longest single slice between two event-loop turns (what a request arriving
 * during a render waits at most).
 *
 * Then the gzip form of the last render (src/http/metrics-gzip.ts: what a scrape with
 * `Accept-Encoding: gzip` costs once per kernel read): megabytes and milliseconds. Then whole
 * scrapes of GET /metrics over HTTP on loopback (createMetrics behind Express, as the daemon
 * serves it, without the kernel read): plain and gzip, each the first scrape of a snapshot
 * (render, and compress) and a second one sharing it, with the bytes on the wire.
 *
 * Options: BENCH_PEERS (default 50000), BENCH_ROUNDS (default 5), BENCH_FULL=1 (every peer
 * handshaked, limited and capped with a billing period that has reset: the most series).
 *
 * BENCH_MEMORY=1 (issue 29, peak RSS at 50,000 capped peers): instead, the memory of the
 * daemon's HTTP side over a capped host: a PeerService over a kernel that answers a generated
 * WG_CMD_GET_DEVICE dump decoded as the daemon decodes it (with its DumpMemo) and a cap for every
 * peer (a tenth with a period, a tenth throttling, 1% suspended, 1% used up), served by
 * createHttpServer with the metrics, polled in the order of bench/restore.ts's `metrics` part:
 * a first list; then in one window a plain scrape (its own read) and two more, three gzip
 * scrapes, two lists and a gzip list; then, the window over, a list (its own read) and a plain
 * scrape. Each run is a process of its own with `npm start`'s node flags (those of the build's
 * own package.json), with and without per-peer series; printed: its peak RSS (VmHWM) and what it
 * holds after a full GC at the end (heap used + external). BENCH_BASE=DIR runs the same
 * sequence over the build in DIR (the `dist` of an earlier commit, e.g. made with `git archive
 * COMMIT | tar -x -C DIR/..` and `npx tsc` there) alternately with this one, so that before and
 * after are measured in one run: medians of BENCH_ROUNDS (default 3) runs each.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import express from 'express';
import { createMetrics, renderPeerMetrics } from '../src/http/metrics';
import { finalRun } from '../src/http/metrics-gzip';
import type { KernelDataCap, LimitState, WireGuardPeer } from '../src/kernel/types';
import type { PeerSnapshot } from '../src/peers';
import { loadBuild, median, startNodeFlags } from './support';

const PEERS = Number(process.env.BENCH_PEERS ?? 50_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const FULL = process.env.BENCH_FULL === '1';

function snapshot(): PeerSnapshot {
  const now = Date.now();
  const peers: WireGuardPeer[] = [];
  const limits = new Map<string, LimitState>();
  const caps = new Map<string, KernelDataCap>();
  for (let i = 0; i < PEERS; i += 1) {
    const address = `10.${8 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
    peers.push({
      publicKey: randomBytes(32).toString('base64'),
      endpoint: null,
      lastHandshake: i % 3 === 0 && !FULL ? null : new Date(now - i * 10),
      rxBytes: i * 1000,
      txBytes: i * 2000,
      persistentKeepalive: 0,
      allowedIps: [{ family: 4, address, cidr: 32 }],
    });
    if (i % 2 === 1 || FULL) limits.set(address, { download: 250_000, upload: 250_000 });
    if (FULL) {
      const plan = {
        period: 'month' as const,
        periodStart: { at: now - 40 * 86_400_000, offsetMinutes: 0 },
        periodFrom: now - 10 * 86_400_000,
        previousUsedBytes: i * 7777,
      };
      caps.set(address, { quotaBytes: 1e11, usedBytes: i * 100_003, enforced: true, plan });
    } else if (i % 4 === 0) {
      caps.set(address, { quotaBytes: 1e9, usedBytes: i * 100, enforced: true });
    }
  }
  return {
    takenAt: now,
    readMs: 0,
    device: { name: 'wg0', ifindex: 1, publicKey: null, listenPort: 51820, fwmark: 0, peers },
    limits,
    caps,
  };
}

async function main(): Promise<void> {
  const snap = snapshot();
  for (const perPeer of [true, false]) {
    const times: number[] = [];
    let longestSlice = 0;
    let chunks: Buffer[] = [];
    for (let round = 0; round < ROUNDS; round += 1) {
      const started = performance.now();
      let sliceStart = started;
      chunks = await renderPeerMetrics(snap, perPeer, async () => {
        longestSlice = Math.max(longestSlice, performance.now() - sliceStart);
        await new Promise((resolve) => setImmediate(resolve));
        sliceStart = performance.now();
      });
      longestSlice = Math.max(longestSlice, performance.now() - sliceStart);
      times.push(performance.now() - started);
    }
    times.sort((a, b) => a - b);
    const text = Buffer.concat(chunks);
    console.log(
      `per-peer ${perPeer}: ${PEERS} peers, ${text.toString('utf8').split('\n').length - 1} lines, ` +
        `${(text.length / 1e6).toFixed(1)} MB; render median ${median(times).toFixed(0)} ms ` +
        `(min ${times[0]!.toFixed(0)}, max ${times[times.length - 1]!.toFixed(0)}); ` +
        `longest slice ${longestSlice.toFixed(1)} ms`,
    );
    const zipStarted = performance.now();
    const run = await finalRun(chunks);
    console.log(
      `  gzip: ${(run.blocks.length / 1e6).toFixed(1)} MB in ` +
        `${(performance.now() - zipStarted).toFixed(0)} ms (thread pool, once per kernel read)`,
    );
  }
}

/** One GET /metrics: milliseconds to the last byte, and the bytes received. */
function scrapeOnce(port: number, gzip: boolean): Promise<{ ms: number; bytes: number }> {
  const started = performance.now();
  const headers = gzip ? { 'Accept-Encoding': 'gzip' } : {};
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/metrics', headers }, (res) => {
        let bytes = 0;
        res.on('data', (chunk: Buffer) => (bytes += chunk.length));
        res.on('end', () => resolve({ ms: performance.now() - started, bytes }));
      })
      .on('error', reject);
  });
}

async function scrapes(): Promise<void> {
  let current = snapshot();
  const metrics = createMetrics({ service: { snapshot: async () => current }, perPeer: true });
  const app = express();
  app.get('/metrics', metrics.handler);
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  for (const gzip of [false, true]) {
    current = snapshot(); // a new kernel read: nothing rendered yet
    const first = await scrapeOnce(port, gzip);
    const second = await scrapeOnce(port, gzip);
    console.log(
      `scrape ${gzip ? 'gzip ' : 'plain'}: ${(first.bytes / 1e6).toFixed(1)} MB; first of a ` +
        `snapshot ${first.ms.toFixed(0)} ms, second ${second.ms.toFixed(0)} ms`,
    );
  }
  server.close();
}

// ---------------------------------------------------------------------------------------------
// BENCH_MEMORY=1: the daemon's memory over a capped host (issue 29).

const statusKiB = (field: string): number =>
  Number(
    new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(readFileSync('/proc/self/status', 'utf8'))![1],
  );

function fetchBytes(port: number, path: string, gzip: boolean): Promise<number> {
  return new Promise((resolve, reject) => {
    const headers = gzip ? { 'accept-encoding': 'gzip' } : {};
    http
      .get({ host: '127.0.0.1', port, path, agent: false, headers }, (res) => {
        let bytes = 0;
        res.on('data', (chunk: Buffer) => (bytes += chunk.length));
        res.on('end', () => (res.statusCode === 200 ? resolve(bytes) : reject(new Error(path))));
      })
      .on('error', reject);
  });
}

/** One memory run (a child process): prints one JSON line of its figures. */
async function memoryChild(dist: string, perPeer: boolean): Promise<void> {
  const build = loadBuild(dist);
  const WINDOW_MS = 3_000;
  const dump = build.generated.generatedDump(PEERS);
  const memo = new build.dump.DumpMemo();
  const first = build.dump.decodeDeviceDump('wgx', dump, memo);
  const caps = new Map<string, KernelDataCap>();
  const suspended = new Map<string, string>();
  first.peers.forEach((peer, i) => {
    const ip = build.peers.tunnelAddressOf(peer);
    if (ip === null) return;
    const cap: KernelDataCap = {
      quotaBytes: 10_000_000_000 + i,
      usedBytes: i * 4_099,
      enforced: true,
    };
    if (i % 10 === 1) {
      cap.plan = {
        period: 'month',
        periodStart: { at: Date.parse('2026-01-31T08:00:00Z'), offsetMinutes: 120 },
        periodFrom: Date.parse('2026-10-31T08:00:00Z'),
        previousUsedBytes: 123_456_789,
      };
    }
    if (i % 10 === 2) cap.throttleBytesPerSecond = 100_000;
    if (i % 100 === 3) cap.usedBytes = cap.quotaBytes;
    if (i % 100 === 4) suspended.set(ip, peer.publicKey);
    caps.set(ip, cap);
  });
  const kernel = {
    // Each read decodes the dump again, as the daemon does a new one (its memo reuses peers).
    wireguard: { getDevice: async () => build.dump.decodeDeviceDump('wgx', dump, memo) },
    shaper: { listLimits: async () => new Map() },
    quota: { listCaps: async () => new Map(caps) },
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
    listMaxAgeMs: WINDOW_MS,
  });
  const metrics = build.http.createMetrics({
    service: { snapshot: () => service.snapshot() },
    perPeer,
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
  const list = (gzip = false): Promise<number> => fetchBytes(port, '/api/peers', gzip);
  const scrape = (gzip = false): Promise<number> => fetchBytes(port, '/metrics', gzip);
  const pause = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, WINDOW_MS + 500));
  const listBytes = await list();
  await pause();
  const scrapeBytes = await scrape(); // window M: a scrape's own read
  await scrape();
  await scrape();
  for (let i = 0; i < 3; i++) await scrape(true);
  await list();
  await list();
  await list(true);
  await pause();
  await list(); // window L: a list's own read
  await scrape();
  server.close();
  (globalThis as { gc?: () => void }).gc?.();
  const { heapUsed, external } = process.memoryUsage();
  console.log(
    JSON.stringify({
      peakMiB: statusKiB('VmHWM') / 1024,
      heldMiB: (heapUsed + external) / 2 ** 20,
      listMB: listBytes / 1e6,
      scrapeMB: scrapeBytes / 1e6,
    }),
  );
}

interface MemoryFigures {
  peakMiB: number;
  heldMiB: number;
  listMB: number;
  scrapeMB: number;
}

function memoryRun(dist: string, perPeer: boolean): MemoryFigures {
  const run = spawnSync(process.execPath, [...startNodeFlags(dist), '--expose-gc', __filename], {
    encoding: 'utf8',
    env: { ...process.env, BENCH_MEMORY_CHILD: dist, BENCH_PER_PEER: String(perPeer) },
  });
  if (run.status !== 0) throw new Error(`memory run over ${dist} failed:\n${run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as MemoryFigures;
}

function memory(): void {
  const ours = path.resolve(__dirname, '..');
  const base = process.env.BENCH_BASE;
  const builds =
    base === undefined
      ? [['this build', ours]]
      : [
          ['base', path.resolve(base)],
          ['this build', ours],
        ];
  const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
  console.log(
    `${PEERS} capped peers, ${rounds} runs per build and mode, alternating; MiB, medians`,
  );
  for (const perPeer of [true, false]) {
    const figures = new Map<string, MemoryFigures[]>(builds.map(([name]) => [name!, []]));
    for (let round = 0; round < rounds; round++) {
      for (const [name, dist] of builds) figures.get(name!)!.push(memoryRun(dist!, perPeer));
    }
    for (const [name, runs] of figures) {
      const peaks = runs.map((r) => r.peakMiB);
      console.log(
        `${perPeer ? 'per-peer series' : '--metrics-per-peer false'}, ${name}: peak RSS ` +
          `${median(peaks).toFixed(0)} [${peaks.map((p) => p.toFixed(0)).join(' ')}], held after GC ` +
          `${median(runs.map((r) => r.heldMiB)).toFixed(0)}; list ${runs[0]!.listMB.toFixed(1)} MB, ` +
          `scrape ${runs[0]!.scrapeMB.toFixed(1)} MB`,
      );
    }
  }
}

if (process.env.BENCH_MEMORY_CHILD !== undefined) {
  void memoryChild(process.env.BENCH_MEMORY_CHILD, process.env.BENCH_PER_PEER === 'true');
} else if (process.env.BENCH_MEMORY === '1') {
  memory();
} else {
  void main().then(scrapes);
}
