/**
 * Host-side: what serving one list costs in the daemon's HTTP stack beyond the bytes themselves.
 * Three servers over a service whose snapshot is read once and held (a window longer than the
 * run), autocannon in a process of its own, 8 connections, alternating A E C A E C:
 *   A  the daemon's server as main.ts builds it: createHttpServer (createApp + metrics, with
 *      the list fast path of src/http/list.ts tried before Express);
 *   E  the same without the fast path: every poll through Express (the daemon before it);
 *   C  a plain node http server replaying the same bytes (the ceiling): the body in the
 *      encoding the daemon negotiates for BENCH_ACCEPT_ENCODING, with its Content-Encoding.
 * Each is given as req/s and as the server's CPU time per request (process.cpuUsage over the
 * run divided by the requests; the client's CPU is not in it). With big bodies on a 2-core host
 * the client can be the limit, so req/s may hide what the CPU figure shows.
 * No kernel needed. Run: npx tsc -p tsconfig.json && node dist/bench/http-overhead.js
 * Options: BENCH_SIZES (default "1000,10000"), BENCH_ROUNDS (3), BENCH_DURATION_S (5),
 * BENCH_ACCEPT_ENCODING (none by default; e.g. "gzip" to poll the compressed body).
 *
 * Issue 29's capped host and partial responses: BENCH_CAPPED=1 gives the peers the capped
 * host's caps (bench/capped-population.ts, as `npm run bench:api` with BENCH_CAPPED=1 in the VM:
 * every peer capped, a tenth with a monthly period, a tenth with a speed limit, 1% suspended, 1%
 * throttling), and
 * BENCH_FIELDS (e.g. "public_key,status,data_cap.used_bytes") adds two servers polled at
 * `/api/peers?fields=…`: P the daemon (its fast path, src/http/list.ts, takes a plain field list)
 * and CP the replay of P's body; the body sizes of both lists are printed.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ListBodies, createHttpServer, createMetrics, createServer } from '../src/http';
import { createApp } from '../src/http/app';
import { buildListBody, negotiateEncoding } from '../src/http/list-body';
import { decodeDeviceDump } from '../src/kernel/wireguard/dump';
import type { KernelDataCap, LimitState, WireGuardDevice } from '../src/kernel/types';
import { PeerService, tunnelAddressOf, type PeerServiceOptions } from '../src/peers';
import { checkListQuery } from '../src/http/schemas';
import { createLogger } from '../src/log';
import { generatedDump } from '../test/support/generated-dump';
import { serviceOver } from '../test/support/service-over';
import { asKernelCap, asLimitState, cappedHostPeer } from './capped-population';
import { autocannonLoad, median, type LoadRun } from './support';

const SIZES = (process.env.BENCH_SIZES ?? '1000,10000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 5);
const ACCEPT_ENCODING = process.env.BENCH_ACCEPT_ENCODING ?? '';
const CAPPED = process.env.BENCH_CAPPED === '1';
const FIELDS = process.env.BENCH_FIELDS ?? '';

function listening(server: http.Server): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );
}

type Run = LoadRun;

/**
 * A service over `device` (test/support/service-over.ts) whose kernel also lists the capped
 * host's caps, limits and suspensions (bench/capped-population.ts: every peer capped, a tenth
 * with a monthly period, a tenth with a speed limit, 1% suspended, 1% throttling), peer i of the
 * dump as peer i of that population.
 */
function cappedServiceOver(device: WireGuardDevice, listMaxAgeMs: number): PeerService {
  const caps = new Map<string, KernelDataCap>();
  const limits = new Map<string, LimitState>();
  const suspended = new Map<string, string>();
  const now = Date.now();
  device.peers.forEach((peer, i) => {
    const ip = tunnelAddressOf(peer);
    if (ip === null) return;
    const plan = cappedHostPeer(i, now);
    if (plan.cap !== null) caps.set(ip, asKernelCap(plan.cap));
    const limit = asLimitState(plan.limit);
    if (limit !== null) limits.set(ip, limit);
    if (plan.suspended) suspended.set(ip, peer.publicKey);
  });
  const kernel = {
    wireguard: { getDevice: async () => device },
    shaper: { listLimits: async () => new Map(limits) },
    quota: { listCaps: async () => new Map(caps) },
    suspension: { listSuspended: async () => new Map(suspended) },
    link: {},
    changes: { run: <T>(task: () => Promise<T>): Promise<T> => task() },
  } as unknown as PeerServiceOptions['kernel'];
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  return new PeerService({ kernel, interfaceName: 'wgx', logger: silent, listMaxAgeMs });
}

/** The list (or `path`) under autocannon, with the bench's Accept-Encoding. */
function load(port: number, path = '/api/peers'): Promise<Run> {
  const headers = ACCEPT_ENCODING === '' ? [] : ['-H', `accept-encoding=${ACCEPT_ENCODING}`];
  return autocannonLoad(`http://127.0.0.1:${port}${path}`, DURATION_S, headers);
}

async function main(): Promise<void> {
  for (const size of SIZES) {
    const device = decodeDeviceDump('wgx', generatedDump(size));
    const service = CAPPED ? cappedServiceOver(device, 3_600_000) : serviceOver(device, 3_600_000);
    const identity = await buildListBody(await service.snapshot(), null);
    const encoding = negotiateEncoding(ACCEPT_ENCODING === '' ? undefined : ACCEPT_ENCODING);
    // The daemon's own logger, silent: a successful poll's line is at debug, off as by default.
    const silent = createLogger({ level: 'silent' });
    const metrics = createMetrics({
      service: { snapshot: () => service.snapshot() },
      perPeer: true,
    });
    const api = {
      service,
      tokens: null,
      logger: silent,
      metrics,
      version: 'bench',
      listBodies: new ListBodies(),
    };
    const daemon = createHttpServer(api);
    const express = createServer(createApp(api), { logger: silent });
    const body = await api.listBodies.body(await service.snapshot(), null, encoding);
    const replayHeaders: Record<string, string | number> = {
      'Content-Type': 'application/json; charset=utf-8',
      'Content-Length': body.length,
    };
    if (encoding !== 'identity') replayHeaders['Content-Encoding'] = encoding;
    const replayOf = (bytes: Buffer): http.Server =>
      http.createServer((_req, res) => {
        res.writeHead(200, { ...replayHeaders, 'Content-Length': bytes.length });
        res.end(bytes);
      });
    const replay = replayOf(body);
    const servers = [
      { name: 'A daemon', port: await listening(daemon), path: '/api/peers', runs: [] as Run[] },
      {
        name: 'E express alone',
        port: await listening(express),
        path: '/api/peers',
        runs: [] as Run[],
      },
      { name: 'C replay', port: await listening(replay), path: '/api/peers', runs: [] as Run[] },
    ];
    const closing = [daemon, express, replay];
    let partialNote = '';
    if (FIELDS !== '') {
      const path = `/api/peers?fields=${FIELDS}`;
      const { fields } = checkListQuery({ fields: FIELDS });
      const snapshot = await service.snapshot();
      const partialIdentity = await api.listBodies.body(snapshot, null, 'identity', fields);
      const partial = await api.listBodies.body(snapshot, null, encoding, fields);
      const partialReplay = replayOf(partial);
      closing.push(partialReplay);
      servers.push(
        { name: 'P daemon ?fields=', port: servers[0]!.port, path, runs: [] },
        { name: 'CP replay ?fields=', port: await listening(partialReplay), path, runs: [] },
      );
      partialNote =
        `; ?fields=${FIELDS}: ${(partialIdentity.length / 1e6).toFixed(2)} MB ` +
        `(${((100 * partialIdentity.length) / identity.length).toFixed(1)}% of the full body), ` +
        `${(partial.length / 1e6).toFixed(2)} MB sent as ${encoding}`;
    }
    for (const server of servers) await load(server.port, server.path); // warm-up
    for (let round = 0; round < ROUNDS; round++) {
      for (const server of servers) server.runs.push(await load(server.port, server.path));
    }
    const rate = (i: number): number => median(servers[i]!.runs.map((r) => r.rate));
    console.log(
      `${size} peers${CAPPED ? ', every one capped' : ''} (${(identity.length / 1e6).toFixed(2)} MB, ${(body.length / 1e6).toFixed(2)} MB sent as ${encoding}${partialNote}), median of ${ROUNDS}:`,
    );
    for (const server of servers) {
      const rates = server.runs.map((r) => r.rate.toFixed(0)).join(' ');
      const cpus = server.runs.map((r) => r.cpuUs.toFixed(0)).join(' ');
      console.log(
        `  ${server.name}: ${median(server.runs.map((r) => r.rate)).toFixed(0)} req/s (${rates}), ` +
          `${median(server.runs.map((r) => r.cpuUs)).toFixed(0)} µs CPU/request (${cpus})`,
      );
    }
    console.log(
      `  A/C ${(rate(0) / rate(2)).toFixed(2)}, E/C ${(rate(1) / rate(2)).toFixed(2)}, A/E ${(rate(0) / rate(1)).toFixed(2)}`,
    );
    if (FIELDS !== '') {
      console.log(
        `  P/A ${(rate(3) / rate(0)).toFixed(1)} (polls/s with ?fields= over the full list's), P/CP ${(rate(3) / rate(4)).toFixed(2)}`,
      );
    }
    for (const server of closing) server.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
