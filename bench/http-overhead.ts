/**
 * Host-side: what serving one list costs in the daemon's HTTP stack beyond the bytes themselves.
 * The daemon's app and server (createApp + createServer + metrics, as main.ts wires them) over a
 * service whose snapshot is read once and held (a window longer than the run), against a plain
 * node http server replaying the same body: autocannon, 8 connections, alternating A C A C.
 * No kernel needed. Run: npx tsc -p tsconfig.json && node dist/bench/http-overhead.js
 * Options: BENCH_SIZES (default "1000,10000"), BENCH_ROUNDS (3), BENCH_DURATION_S (5).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { spawn } from 'node:child_process';
import { createApp, createMetrics, createServer } from '../src/http';
import { buildListBody } from '../src/http/list-body';
import { decodeDeviceDump } from '../src/kernel/wireguard-dump';
import type { Kernel, WireGuardDevice } from '../src/kernel/types';
import { PeerService } from '../src/peers';
import { generatedDump } from '../test/support/generated-dump';

const SIZES = (process.env.BENCH_SIZES ?? '1000,10000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 5);

function serviceOver(device: WireGuardDevice): PeerService {
  const kernel = {
    wireguard: { getDevice: async () => device },
    shaper: { listLimits: async () => new Map() },
    quota: { listCaps: async () => new Map() },
    link: {},
    changes: { run: <T>(task: () => Promise<T>): Promise<T> => task() },
  } as unknown as Pick<Kernel, 'changes' | 'wireguard' | 'link' | 'shaper' | 'quota'>;
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  return new PeerService({ kernel, interfaceName: 'wgx', logger: silent, listMaxAgeMs: 3_600_000 });
}

function listening(server: http.Server): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );
}

/** autocannon in a process of its own, so the client does not share the servers' thread. */
function load(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        require.resolve('autocannon/autocannon.js'),
        '-j',
        '-c',
        '8',
        '-d',
        String(DURATION_S),
        `http://127.0.0.1:${port}/api/peers`,
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('exit', () => {
      const result = JSON.parse(out) as { requests: { total: number }; duration: number };
      resolve(result.requests.total / result.duration);
    });
  });
}

async function main(): Promise<void> {
  for (const size of SIZES) {
    const device = decodeDeviceDump('wgx', generatedDump(size));
    const service = serviceOver(device);
    const body = await buildListBody(await service.snapshot(), null);
    const silent = {
      info() {},
      warn() {},
      error() {},
      debug() {},
      child() {
        return silent;
      },
    };
    const metrics = createMetrics({
      service: { snapshot: () => service.snapshot() },
      perPeer: true,
    });
    const daemon = createServer(
      createApp({ service, tokens: null, logger: silent as never, metrics, version: 'bench' }),
      { logger: silent as never },
    );
    const replay = http.createServer((_req, res) => {
      res.writeHead(200, {
        'Content-Type': 'application/json; charset=utf-8',
        'Content-Length': body.length,
      });
      res.end(body);
    });
    const [a, c] = [await listening(daemon), await listening(replay)];
    const as: number[] = [];
    const cs: number[] = [];
    await load(a);
    await load(c);
    for (let round = 0; round < ROUNDS; round++) {
      as.push(await load(a));
      cs.push(await load(c));
    }
    const med = (v: number[]): number => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)]!;
    console.log(
      `${size} peers (${(body.length / 1e6).toFixed(2)} MB): daemon app ${med(as).toFixed(0)} req/s, replay ${med(cs).toFixed(0)} req/s, ratio ${(med(as) / med(cs)).toFixed(2)}`,
    );
    daemon.close();
    replay.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
