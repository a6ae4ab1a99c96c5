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
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import express from 'express';
import { createMetrics, renderPeerMetrics } from '../src/http/metrics';
import { finalRun } from '../src/http/metrics-gzip';
import type { KernelDataCap, LimitState, WireGuardPeer } from '../src/kernel/types';
import type { PeerSnapshot } from '../src/peers';
import { median } from './support';

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

void main().then(scrapes);
