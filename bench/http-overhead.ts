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
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { spawn } from 'node:child_process';
import { ListBodies, createApp, createHttpServer, createMetrics, createServer } from '../src/http';
import { buildListBody, negotiateEncoding } from '../src/http/list-body';
import { decodeDeviceDump } from '../src/kernel/wireguard/dump';
import { createLogger } from '../src/log';
import { generatedDump } from '../test/support/generated-dump';
import { serviceOver } from '../test/support/service-over';
import { median } from './support';

const SIZES = (process.env.BENCH_SIZES ?? '1000,10000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 5);
const ACCEPT_ENCODING = process.env.BENCH_ACCEPT_ENCODING ?? '';

function listening(server: http.Server): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );
}

interface Run {
  /** Requests per second. */
  rate: number;
  /** This process's CPU time (user + system) per request, in microseconds. */
  cpuUs: number;
}

/** autocannon in a process of its own, so the client does not share the servers' thread. */
function load(port: number): Promise<Run> {
  return new Promise((resolve, reject) => {
    const headers = ACCEPT_ENCODING === '' ? [] : ['-H', `accept-encoding=${ACCEPT_ENCODING}`];
    const cpu = process.cpuUsage();
    const child = spawn(
      process.execPath,
      [
        require.resolve('autocannon/autocannon.js'),
        '-j',
        '-c',
        '8',
        '-d',
        String(DURATION_S),
        ...headers,
        `http://127.0.0.1:${port}/api/peers`,
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('exit', () => {
      const used = process.cpuUsage(cpu);
      const result = JSON.parse(out) as {
        requests: { total: number };
        duration: number;
        non2xx: number;
      };
      if (result.non2xx !== 0) reject(new Error(`${result.non2xx} answers were not 2xx`));
      resolve({
        rate: result.requests.total / result.duration,
        cpuUs: (used.user + used.system) / result.requests.total,
      });
    });
  });
}

async function main(): Promise<void> {
  for (const size of SIZES) {
    const device = decodeDeviceDump('wgx', generatedDump(size));
    const service = serviceOver(device, 3_600_000);
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
    const replay = http.createServer((_req, res) => {
      res.writeHead(200, replayHeaders);
      res.end(body);
    });
    const servers = [
      { name: 'A daemon', port: await listening(daemon), runs: [] as Run[] },
      { name: 'E express alone', port: await listening(express), runs: [] as Run[] },
      { name: 'C replay', port: await listening(replay), runs: [] as Run[] },
    ];
    for (const server of servers) await load(server.port); // warm-up
    for (let round = 0; round < ROUNDS; round++) {
      for (const server of servers) server.runs.push(await load(server.port));
    }
    const rate = (i: number): number => median(servers[i]!.runs.map((r) => r.rate));
    console.log(
      `${size} peers (${(identity.length / 1e6).toFixed(2)} MB, ${(body.length / 1e6).toFixed(2)} MB sent as ${encoding}), median of ${ROUNDS}:`,
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
    for (const server of [daemon, express, replay]) server.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
