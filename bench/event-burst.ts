/**
 * Issue 30's burst on the build host (the kernel test test/kernel/hostile-clients.test.ts without
 * the VM): a whole daemon (startDaemon, its logger at warn as the test runs it) over the
 * in-memory kernel, in a child process of its own (`server`), with a history of BURST_HISTORY
 * (10,000) events made as the test makes them (peers added and removed behind the daemon's back,
 * reported by its shared read while a stream listens); then BURST_SOCKETS (200) raw sockets send
 * `GET /api/events` with an old Last-Event-ID (none with BURST_NO_REPLAY=1) and never read, and
 * an admin `POST /api/peer` is timed right behind them and then every 700 ms for BURST_SECONDS
 * (15) or until no stream is open. It prints the POST latencies, the daemon's CPU time from the
 * burst to the first POST's answer (its own process.cpuUsage, and /proc's ticks) and its RSS.
 * `BURST_CPU_PROF=FILE` writes the daemon's CPU profile from the burst on (.cpuprofile, for
 * Chrome's DevTools). The host's loopback sockets take a whole replay each (megabytes), where the
 * VM's stall: the replays here go on at full speed, a turn at a time. Not a test:
 * `node dist/bench/event-burst.js`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import http from 'node:http';
import net from 'node:net';
import pino from 'pino';
import { parseConfig } from '../src/config';
import { createLogger } from '../src/log';
import { startDaemon } from '../src/main';
import { FakeKernel } from '../test/unit/support/fake-kernel';

const ADMIN = 'admin-token-of-the-event-burst-bench-0123456789';
const READ = 'read-token-of-the-event-burst-bench-0123456789';
const HISTORY = Number(process.env.BURST_HISTORY ?? 10_000);
const SOCKETS = Number(process.env.BURST_SOCKETS ?? 200);
const STALL_S = 5;
const SECONDS = Number(process.env.BURST_SECONDS ?? 15);
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function call(
  port: number,
  method: string,
  path: string,
  token: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent: false,
        headers: { authorization: `Bearer ${token}`, ...headers },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? NaN : Number(line.slice(name.length + 1));
}

function published(text: string): number {
  return text
    .split('\n')
    .filter((line) => line.startsWith('wg_peerd_events_total{'))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}

/** The process's CPU time so far, user and system, in ms (/proc/<pid>/stat, clock ticks of 10 ms). */
function cpuMs(pid: number): { user: number; system: number } {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return { user: Number(fields[11]) * 10, system: Number(fields[12]) * 10 };
}

function rssMiB(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) / 1024 : NaN;
}

/** The daemon: prints `{"port":N,"lastId":"..."}` once its history is full, exits on SIGINT. */
async function server(): Promise<void> {
  const outcome = parseConfig(
    [
      '--listen',
      '127.0.0.1:1',
      '--endpoint-host',
      'vpn.example.net',
      '--event-history',
      String(HISTORY),
      '--event-stream-stall',
      String(STALL_S),
      '--log-level',
      'warn',
    ],
    { WG_PEERD_TOKEN: ADMIN, WG_PEERD_READ_TOKEN: READ },
    () => {
      throw new Error('no token file');
    },
  );
  if (outcome.kind !== 'run') throw new Error('not a configuration');
  const kernel = FakeKernel.withInterface();
  const logger = createLogger({
    level: 'warn',
    destination: pino.destination({ dest: 2, sync: true }),
  });
  const daemon = await startDaemon(
    { ...outcome.config, listen: { host: '127.0.0.1', port: 0 } },
    {
      openKernel: async () => kernel,
      logger,
      readBootId: async () => 'boot-1',
    },
  );
  const port = daemon.address.port;
  // A listener of a type that never comes, so that the shared read reports the changes.
  const idle = http.get({
    host: '127.0.0.1',
    port,
    path: '/api/events?types=interface.lost',
    agent: false,
    headers: { authorization: `Bearer ${READ}` },
  });
  idle.on('response', (res) => res.resume());
  await sleep(200);
  const keys = Array.from({ length: HISTORY / 2 }, () => randomBytes(32).toString('base64'));
  const until = async (count: number): Promise<void> => {
    while (published((await call(port, 'GET', '/metrics', READ)).text) < count) await sleep(200);
  };
  await kernel.wireguard.addPeers(
    'wg0',
    keys.map((publicKey, i) => ({
      publicKey,
      allowedIps: [
        { family: 4, address: `10.71.${1 + Math.floor(i / 250)}.${2 + (i % 250)}`, cidr: 32 },
      ],
    })),
  );
  await until(HISTORY / 2);
  await kernel.wireguard.removePeers('wg0', keys);
  await until(HISTORY);
  idle.destroy();
  const reset = await new Promise<string>((resolve) => {
    http.get(
      {
        host: '127.0.0.1',
        port,
        path: '/api/events',
        agent: false,
        headers: { authorization: `Bearer ${READ}`, 'last-event-id': 'zz.1' },
      },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          const match = /^id: (\S+)$/m.exec(chunk);
          if (match) {
            res.destroy();
            resolve(match[1]!);
          }
        });
      },
    );
  });
  await sleep(500);
  // SIGUSR2 marks the burst's start, SIGUSR1 asks for the CPU time since (µs, process.cpuUsage).
  let mark = process.cpuUsage();
  process.on('SIGUSR2', () => (mark = process.cpuUsage()));
  process.on('SIGUSR1', () => {
    const used = process.cpuUsage(mark);
    process.stderr.write(
      `BURST_CPU user ${Math.round(used.user / 1000)} ms, system ${Math.round(used.system / 1000)} ms\n`,
    );
  });
  const profile = process.env.BURST_CPU_PROF;
  const session = new Session();
  if (profile !== undefined) {
    session.connect();
    process.on('SIGUSR2', () => {
      session.post('Profiler.enable', () =>
        session.post('Profiler.setSamplingInterval', { interval: 100 }, () =>
          session.post('Profiler.start'),
        ),
      );
    });
  }
  process.on('SIGINT', () => {
    if (profile === undefined) process.exit(0);
    session.post('Profiler.stop', (error, result) => {
      if (error === null) writeFileSync(profile, JSON.stringify(result.profile));
      process.exit(0);
    });
  });
  process.stdout.write(`${JSON.stringify({ port, lastId: reset })}\n`);
}

async function client(): Promise<void> {
  const child: ChildProcess = spawn(process.execPath, [__filename, 'server'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const ready = await new Promise<{ port: number; lastId: string }>((resolve) => {
    let out = '';
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (c: string) => {
      out += c;
      if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]!) as never);
    });
  });
  const { port, lastId } = ready;
  const [run, last] = lastId.split('.');
  const oldId = `${run}.${Number(last) - HISTORY + 50}`;
  const pid = child.pid!;
  const rssBefore = rssMiB(pid);
  const quiet = performance.now();
  await call(port, 'POST', '/api/peer', ADMIN);
  const quietMs = performance.now() - quiet;

  child.kill('SIGUSR2');
  await sleep(300);
  const request =
    'GET /api/events HTTP/1.1\r\nHost: x\r\n' +
    `Authorization: Bearer ${READ}\r\n` +
    (process.env.BURST_NO_REPLAY ? '' : `Last-Event-ID: ${oldId}\r\n`) +
    '\r\n';
  const sockets: net.Socket[] = [];
  await Promise.all(
    Array.from(
      { length: SOCKETS },
      () =>
        new Promise<void>((resolve, reject) => {
          const socket = net.connect({ host: '127.0.0.1', port });
          socket.pause();
          socket.on('error', () => {});
          socket.once('connect', () => socket.write(request, () => resolve()));
          socket.once('error', reject);
          sockets.push(socket);
        }),
    ),
  );
  const start = Date.now();
  const cpuAtBurst = cpuMs(pid);
  let cpuFirst = '';
  const samples: string[] = [];
  let rssPeak = rssBefore;
  for (;;) {
    const t = performance.now();
    const created = await call(port, 'POST', '/api/peer', ADMIN);
    const ms = Math.round(performance.now() - t);
    if (cpuFirst === '') {
      child.kill('SIGUSR1');
      const cpu = cpuMs(pid);
      cpuFirst = `daemon CPU from the burst to the first POST's answer: user ${cpu.user - cpuAtBurst.user} ms, system ${cpu.system - cpuAtBurst.system} ms`;
    }
    const text = (await call(port, 'GET', '/metrics', READ)).text;
    const open = metric(text, 'wg_peerd_event_streams');
    rssPeak = Math.max(rssPeak, rssMiB(pid));
    samples.push(`${Date.now() - start}: ${ms} ms ${created.status} (${open} open)`);
    if ((open === 0 && samples.length > 3) || Date.now() - start > SECONDS * 1000) break;
    await sleep(700);
  }
  for (const socket of sockets) socket.destroy();
  console.log(`POST before the burst ${Math.round(quietMs)} ms; then ${samples.join(', ')}`);
  console.log(cpuFirst);
  console.log(`RSS ${rssBefore.toFixed(1)} MiB before, ${rssPeak.toFixed(1)} MiB at most`);
  child.kill('SIGINT');
  await new Promise((resolve) => child.once('exit', resolve));
}

if (process.argv[2] === 'server') {
  server().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
} else {
  client().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
