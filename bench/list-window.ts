/**
 * Host-side: what the daemon pays per freshness window on a capped host that nothing moves
 * (issue 29: the VM's capped bench, where no peer has a handshake or traffic), beside the
 * replay of its body. The daemon's own service and HTTP server over a fake kernel that answers
 * each read as the real one would on such a host: the WireGuard device decoded from the same
 * dump bytes through the facility's DumpMemo every read, the caps, limits and suspensions as
 * new objects every read they are read (a decode's), the caps read taking BENCH_CAPS_MS
 * (default 500: about what it costs in the VM at 10,000, so that the caps' cadence holds them
 * as it does there; a timer, not CPU). Two servers, one process, loaded one at a time by
 * autocannon in a process of its own (8 connections), alternating A C:
 *   A  the daemon's server (createHttpServer) over PeerService with the default 1 s window;
 *   C  a plain node http server replaying A's body (the ceiling).
 * Each is given as req/s and this process's CPU time per request. BENCH_PROFILE=<file> writes a
 * V8 CPU profile of A's runs (inspector, this process).
 *
 * Run: npx tsc -p tsconfig.json && node dist/bench/list-window.js
 * Options: BENCH_SIZES (default "10000"), BENCH_ROUNDS (3), BENCH_DURATION_S (10),
 * BENCH_CAPS_MS (500), BENCH_FIELDS (adds P: A polled at `?fields=`), BENCH_PROFILE.
 */
import http from 'node:http';
import inspector from 'node:inspector';
import { writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { ListBodies, createHttpServer, createMetrics } from '../src/http';
import { DumpMemo, decodeDeviceDump } from '../src/kernel/wireguard/dump';
import type { KernelDataCap, LimitState } from '../src/kernel/types';
import { PeerService, type PeerServiceOptions } from '../src/peers';
import { createLogger } from '../src/log';
import { generatedDump } from '../test/support/generated-dump';
import { asKernelCap, asLimitState, cappedHostPeer, peerAddress } from './capped-population';
import { autocannonLoad, median, type LoadRun } from './support';

const SIZES = (process.env.BENCH_SIZES ?? '10000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 10);
const CAPS_MS = Number(process.env.BENCH_CAPS_MS ?? 500);
const FIELDS = process.env.BENCH_FIELDS ?? '';
const PROFILE = process.env.BENCH_PROFILE ?? '';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Counters of the fake kernel's reads, printed per run. */
const reads = { device: 0, caps: 0 };

/** The capped host of the VM bench, idle: no handshakes, no traffic, peer i at peerAddress(i). */
function idleCappedService(size: number): PeerService {
  const dump = generatedDump(size, 150, (peer) => {
    peer.handshake = null;
    peer.endpoint = null;
    peer.rx = 0;
    peer.tx = 0;
    peer.keepalive = 0;
    peer.psk = false;
  });
  // The generated addresses are not the population's: each peer's allowed IP is rewritten
  // through its key (peer i's key is unique per i), after the decode.
  const memo = new DumpMemo();
  const plans = Array.from({ length: size }, (_, i) => cappedHostPeer(i));
  const first = decodeDeviceDump('wgx', dump, memo);
  first.peers.forEach((peer, i) => {
    (peer as { allowedIps: unknown }).allowedIps = [
      { family: 4, address: peerAddress(i), cidr: 32 },
    ];
  });
  const kernel = {
    wireguard: {
      getDevice: async () => {
        reads.device += 1;
        return decodeDeviceDump('wgx', dump, memo);
      },
    },
    shaper: {
      listLimits: async () => {
        const limits = new Map<string, LimitState>();
        plans.forEach((plan, i) => {
          const limit = asLimitState(plan.limit);
          if (limit !== null) limits.set(peerAddress(i), limit);
        });
        return limits;
      },
    },
    quota: {
      listCaps: async () => {
        reads.caps += 1;
        await sleep(CAPS_MS);
        const caps = new Map<string, KernelDataCap>();
        plans.forEach((plan, i) => {
          if (plan.cap !== null) caps.set(peerAddress(i), asKernelCap(plan.cap));
        });
        return caps;
      },
    },
    suspension: {
      listSuspended: async () => {
        const suspended = new Map<string, string>();
        plans.forEach((plan, i) => {
          if (plan.suspended) suspended.set(peerAddress(i), first.peers[i]!.publicKey);
        });
        return suspended;
      },
    },
    link: {},
    changes: { run: <T>(task: () => Promise<T>): Promise<T> => task() },
  } as unknown as PeerServiceOptions['kernel'];
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  return new PeerService({ kernel, interfaceName: 'wgx', logger: silent, listMaxAgeMs: 1000 });
}

function listening(server: http.Server): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );
}

type Run = LoadRun;

function load(port: number, path: string): Promise<Run> {
  return autocannonLoad(`http://127.0.0.1:${port}${path}`, DURATION_S);
}

function post<T>(session: inspector.Session, method: string): Promise<T> {
  return new Promise((resolve, reject) =>
    session.post(method, (error, result) => (error ? reject(error) : resolve(result as T))),
  );
}

async function main(): Promise<void> {
  const session = PROFILE === '' ? null : new inspector.Session();
  if (session !== null) {
    session.connect();
    await post(session, 'Profiler.enable');
  }
  for (const size of SIZES) {
    const service = idleCappedService(size);
    const silent = createLogger({ level: 'silent' });
    const metrics = createMetrics({
      service: { snapshot: () => service.snapshot() },
      perPeer: true,
    });
    const listBodies = new ListBodies();
    const api = { service, tokens: null, logger: silent, metrics, version: 'bench', listBodies };
    const daemon = createHttpServer(api);
    const body = await listBodies.body(await service.snapshot(), null, 'identity');
    const replay = http.createServer((_req, res) => {
      res.writeHead(200, {
        'Content-Type': 'application/json; charset=utf-8',
        'Content-Length': body.length,
      });
      res.end(body);
    });
    const servers = [
      { name: 'A', port: await listening(daemon), path: '/api/peers', runs: [] as Run[] },
      { name: 'C', port: await listening(replay), path: '/api/peers', runs: [] as Run[] },
    ];
    if (FIELDS !== '') {
      servers.push({
        name: 'P',
        port: servers[0]!.port,
        path: `/api/peers?fields=${FIELDS}`,
        runs: [],
      });
    }
    for (const server of servers) await load(server.port, server.path); // warm-up
    let profiling = false;
    for (let round = 0; round < ROUNDS; round++) {
      for (const server of servers) {
        const before = { ...reads };
        const builds = listBodies.builds;
        if (session !== null && server.name === 'A' && !profiling) {
          await post(session, 'Profiler.start');
          profiling = true;
        }
        const run = await load(server.port, server.path);
        if (session !== null && profiling) {
          const { profile } = await post<{ profile: unknown }>(session, 'Profiler.stop');
          writeFileSync(PROFILE, JSON.stringify(profile));
          profiling = false;
        }
        server.runs.push(run);
        console.log(
          `  ${size} ${server.name} round ${round + 1}: ${run.rate.toFixed(1)} req/s, ` +
            `${(run.cpuUs / 1000).toFixed(2)} ms CPU/request; device reads ${reads.device - before.device}, ` +
            `caps reads ${reads.caps - before.caps}, body builds ${listBodies.builds - builds}`,
        );
      }
    }
    const rate = (i: number): number => median(servers[i]!.runs.map((r) => r.rate));
    const cpu = (i: number): number => median(servers[i]!.runs.map((r) => r.cpuUs)) / 1000;
    console.log(
      `${size} idle capped peers (${(body.length / 1e6).toFixed(2)} MB), medians of ${ROUNDS}: ` +
        servers
          .map((s, i) => `${s.name} ${rate(i).toFixed(1)} req/s ${cpu(i).toFixed(2)} ms`)
          .join(', ') +
        `; A/C ${(rate(0) / rate(1)).toFixed(2)}` +
        (FIELDS === '' ? '' : `, P/A ${(rate(2) / rate(0)).toFixed(2)}`),
    );
    daemon.close();
    replay.close();
  }
  process.exit(0);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
