/**
 * The event stream at scale (issue 20), in the VM: a WireGuard device of BENCH_EVENTS_PEERS
 * (10,000) idle peers and the daemon as `npm start` runs it, then
 *
 * 1. kernel reads per second with no stream, with one stream, and with BENCH_EVENTS_STREAMS
 *    (1,000) streams open (the daemon's own wg_peerd_kernel_read_duration_seconds_count, read
 *    from /metrics at the start and the end of each phase: every phase pays the same two
 *    scrapes);
 * 2. delivery latency of an event to every stream: BENCH_EVENTS_CHANGES peers created and
 *    deleted through the API, one at a time; each event's latency to each stream is its arrival
 *    in this process minus its `at` (the daemon's clock when it published it; one clock, one VM);
 *    p50 / p99 / max over all (event, stream) pairs, and the median of each event's last arrival;
 * 3. memory per stream: the daemon's VmRSS with one stream and with all of them open, after the
 *    same settling time, divided by the streams added.
 *
 * It is not a test: it prints figures (and a markdown table). The streams' client is this one
 * process, so its own event loop is part of the latency measured: an upper bound for the
 * daemon's share. Run it alone on the machine (`scripts/vm/bench-events.sh`).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { randomPublicKey } from '../test/support/keys';
import { SseReader } from '../test/support/sse';
import { Links } from '../src/kernel/link';
import { WireGuard } from '../src/kernel/wireguard';
import { startNodeFlags } from './support';

const IFNAME = 'wgevb0';
const SERVER_ADDRESS = { address: '10.78.0.1', prefixLength: 16 };
const HOST = '127.0.0.1';
const PORT = 18_470;
const PEERS = Number(process.env.BENCH_EVENTS_PEERS ?? 10_000);
const STREAMS = Number(process.env.BENCH_EVENTS_STREAMS ?? 1_000);
const CHANGES = Number(process.env.BENCH_EVENTS_CHANGES ?? 10);
const PHASE_S = Number(process.env.BENCH_EVENTS_PHASE_S ?? 20);
const SETTLE_S = Number(process.env.BENCH_EVENTS_SETTLE_S ?? 5);

function peerAddress(i: number): string {
  const host = i + 2;
  return `10.78.${host >> 8}.${host & 255}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

function request(method: string, path: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: HOST, port: PORT, method, path, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function kernelReads(): Promise<number> {
  const { text } = await request('GET', '/metrics');
  const match = /^wg_peerd_kernel_read_duration_seconds_count\{result="ok"\} (\d+)/m.exec(text);
  if (!match) throw new Error('no wg_peerd_kernel_read_duration_seconds_count in /metrics');
  return Number(match[1]);
}

function rssMiB(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!match) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(match[1]) / 1024;
}

/** One SSE client: every event's (id, at) and when it arrived. */
class Stream {
  readonly arrivals = new Map<string, { at: number; arrived: number }>();
  private req: http.ClientRequest | undefined;

  open(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.req = http.get({ host: HOST, port: PORT, path: '/api/events', agent: false }, (res) => {
        if (res.statusCode !== 200) {
          reject(new Error(`GET /api/events answered ${res.statusCode}`));
          return;
        }
        res.setEncoding('utf8');
        const reader = new SseReader();
        res.on('data', (chunk: string) => {
          const arrived = Date.now();
          for (const event of reader.push(chunk)) {
            this.arrivals.set(event.id, { at: Date.parse(String(event.data.at)), arrived });
          }
        });
        resolve();
      });
      this.req.on('error', reject);
    });
  }

  close(): void {
    this.req?.destroy();
  }
}

async function startDaemon(): Promise<ChildProcess> {
  const log = `${process.env.BENCH_LOG_DIR ?? '/tmp'}/bench-events-daemon.log`;
  const fd = openSync(log, 'w');
  const child = spawn(
    process.execPath,
    [
      ...startNodeFlags('dist'),
      'dist/src/main.js',
      '--interface',
      IFNAME,
      '--listen',
      `${HOST}:${PORT}`,
      '--max-connections',
      String(STREAMS + 100),
      '--endpoint-host',
      '192.0.2.1',
      '--log-level',
      'warn',
    ],
    { stdio: ['ignore', fd, fd] },
  );
  closeSync(fd);
  for (let i = 0; i < 600; i++) {
    try {
      if ((await request('GET', '/healthz')).status === 200) return child;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null) break;
    await sleep(100);
  }
  throw new Error(`the daemon did not start; its log:\n${readFileSync(log, 'utf8').slice(-2000)}`);
}

async function openStreams(count: number, into: Stream[]): Promise<void> {
  for (let i = 0; i < count; i++) {
    const stream = new Stream();
    await stream.open();
    into.push(stream);
  }
}

/** Kernel reads per second over one phase, with `streams` open meanwhile. */
async function readsPerSecond(label: string): Promise<number> {
  const before = await kernelReads();
  const started = Date.now();
  await sleep(PHASE_S * 1000);
  const after = await kernelReads();
  const perSecond = (after - before) / ((Date.now() - started) / 1000);
  console.log(
    `  ${label}: ${after - before} kernel reads in ${PHASE_S} s (${perSecond.toFixed(2)}/s)`,
  );
  return perSecond;
}

async function main(): Promise<void> {
  const links = new Links();
  const wireguard = new WireGuard();
  await links.getLink(IFNAME).then(
    (link) => links.deleteLink(link.index),
    () => undefined,
  );
  const index = await links.createWireGuard(IFNAME);
  await wireguard.configureDevice(IFNAME, { privateKey: randomBytes(32), listenPort: 51978 });
  await links.addIpv4Address(index, SERVER_ADDRESS);
  await links.setUp(index);
  const peers = Array.from({ length: PEERS }, (_, i) => ({
    publicKey: randomPublicKey(),
    allowedIps: [{ family: 4 as const, address: peerAddress(i), cidr: 32 }],
  }));
  await wireguard.addPeers(IFNAME, peers);
  console.log(`device ${IFNAME}: ${(await wireguard.getDevice(IFNAME)).peers.length} peers`);

  const daemon = await startDaemon();
  const streams: Stream[] = [];
  try {
    console.log(
      'kernel reads (the daemon reads only while someone listens, at most one per --list-max-age):',
    );
    await sleep(SETTLE_S * 1000);
    const none = await readsPerSecond('no stream');
    await openStreams(1, streams);
    await sleep(SETTLE_S * 1000);
    const rssOne = rssMiB(daemon.pid!);
    const one = await readsPerSecond('1 stream');
    await openStreams(STREAMS - 1, streams);
    await sleep(SETTLE_S * 1000);
    const rssAll = rssMiB(daemon.pid!);
    const all = await readsPerSecond(`${STREAMS} streams`);
    const perStreamKiB = ((rssAll - rssOne) * 1024) / (STREAMS - 1);

    console.log(`delivery: ${CHANGES} peers created and deleted through the API, one at a time`);
    const ids: string[] = [];
    for (let i = 0; i < CHANGES; i++) {
      const created = await request('POST', '/api/peer');
      if (created.status !== 201)
        throw new Error(`POST /api/peer: ${created.status} ${created.text}`);
      const key = (JSON.parse(created.text) as { peer: { publicKey: string } }).peer.publicKey;
      await sleep(500);
      const deleted = await request('DELETE', `/api/peer/${encodeURIComponent(key)}`);
      if (deleted.status !== 200) throw new Error(`DELETE: ${deleted.status} ${deleted.text}`);
      await sleep(500);
    }
    await sleep(2000);
    for (const id of streams[0]!.arrivals.keys()) ids.push(id);
    const latencies: number[] = [];
    const lastArrivals: number[] = [];
    let missing = 0;
    for (const id of ids) {
      let last = 0;
      for (const stream of streams) {
        const arrival = stream.arrivals.get(id);
        if (arrival === undefined) {
          missing += 1;
          continue;
        }
        const latency = arrival.arrived - arrival.at;
        latencies.push(latency);
        last = Math.max(last, latency);
      }
      lastArrivals.push(last);
    }
    latencies.sort((a, b) => a - b);
    lastArrivals.sort((a, b) => a - b);
    const p50 = quantile(latencies, 0.5);
    const p99 = quantile(latencies, 0.99);
    const max = latencies.at(-1) ?? NaN;
    const lastMedian = quantile(lastArrivals, 0.5);
    console.log(
      `  ${ids.length} events x ${streams.length} streams: ${latencies.length} arrivals, ${missing} missing; ` +
        `latency p50 ${p50} ms, p99 ${p99} ms, max ${max} ms; last stream reached (median over events) ${lastMedian} ms`,
    );
    console.log(
      `memory: daemon VmRSS ${rssOne.toFixed(1)} MiB with 1 stream, ${rssAll.toFixed(1)} MiB with ${STREAMS}`,
    );
    console.log('');
    console.log(`| ${PEERS} peers | figure |`);
    console.log('| --- | --- |');
    console.log(`| kernel reads/s, no stream | ${none.toFixed(2)} |`);
    console.log(`| kernel reads/s, 1 stream | ${one.toFixed(2)} |`);
    console.log(`| kernel reads/s, ${STREAMS} streams | ${all.toFixed(2)} |`);
    console.log(
      `| delivery latency to ${STREAMS} streams, p50 / p99 / max | ${p50} / ${p99} / ${max} ms |`,
    );
    console.log(
      `| last of ${STREAMS} streams reached (median over ${ids.length} events) | ${lastMedian} ms |`,
    );
    console.log(`| memory per open stream (VmRSS) | ${perStreamKiB.toFixed(1)} KiB |`);
  } finally {
    for (const stream of streams) stream.close();
    daemon.kill('SIGTERM');
    await new Promise((resolve) => daemon.once('exit', resolve));
    await links.getLink(IFNAME).then(
      (link) => links.deleteLink(link.index),
      () => undefined,
    );
    links.close();
    wireguard.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
