import { expect } from 'chai';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { EVENT_METRIC, Events } from '../../../src/events';
import { TokenStore } from '../../../src/http';
import { createApp } from '../../../src/http/app';
import { eventStreamHandler } from '../../../src/http/events';
import { PeerService, type PeerSnapshot } from '../../../src/peers';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

const READ = 'r'.repeat(32);
const ADMIN = 'a'.repeat(32);
const BOUND = 64 * 1024;
const STALL_MS = 400;

/**
 * Issue 30: GET /api/events against clients that never read, over real loopback sockets. A
 * history of 3,000 events of about 4 KiB (12 MB, more than the kernel's socket buffers of a
 * reader that takes nothing) is what each of them asks to have replayed.
 */
async function setup(maxStreams: number, stallMs = 60_000) {
  const kernel = FakeKernel.withInterface();
  const log = captureLog();
  const registry = new Registry();
  const events: Events = new Events({
    interfaceName: 'wg0',
    historySize: 3000,
    snapshot: (): Promise<PeerSnapshot> => service.snapshot(),
    listMaxAgeMs: 1000,
    logger: log.logger,
    registry,
    maxStreams,
    streamStallMs: stallMs,
    maxBufferedBytes: BOUND,
  });
  const service: PeerService = new PeerService({
    kernel,
    interfaceName: 'wg0',
    endpointHost: 'vpn.example.net',
    logger: log.logger,
    events: events.sink,
  });
  const app = createApp({
    service,
    logger: log.logger,
    tokens: new TokenStore({ admin: [ADMIN], read: [READ] }),
    handlers: { events: eventStreamHandler(events.streams) },
  });
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  for (let i = 0; i < 3000; i++) {
    events.hub.publish({ type: 'interface.lost', details: { reason: 'x'.repeat(4000) } });
  }
  const sockets: net.Socket[] = [];
  /** A raw client that asks for everything since the first event and never reads a byte. */
  const stalled = (): Promise<net.Socket> =>
    new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.pause();
        socket.write(
          `GET /api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${READ}\r\n` +
            `Last-Event-ID: ${events.hub.run}.0\r\n\r\n`,
        );
        resolve(socket);
      });
      socket.on('error', reject);
      sockets.push(socket);
    });
  const get = (path: string, token: string) =>
    new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>(
      (resolve, reject) => {
        const req = http.get(
          {
            host: '127.0.0.1',
            port,
            path,
            agent: false,
            headers: { authorization: `Bearer ${token}` },
          },
          (res) => {
            let body = '';
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => (body += chunk));
            res.on('end', () =>
              resolve({ status: res.statusCode ?? 0, headers: res.headers, body }),
            );
          },
        );
        req.on('error', reject);
      },
    );
  const metric = async (name: string): Promise<number> => {
    const text = await registry.metrics();
    const match = new RegExp(`^${name} (\\d+)$`, 'm').exec(text);
    return match === null ? NaN : Number(match[1]);
  };
  const close = async () => {
    for (const socket of sockets) socket.destroy();
    events.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return { events, stalled, get, metric, close, log };
}

const until = async (what: () => boolean, ms: number): Promise<number> => {
  const start = Date.now();
  while (!what()) {
    if (Date.now() - start > ms) throw new Error(`not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return Date.now() - start;
};

describe('GET /api/events against readers that never read (issue 30, real sockets)', function () {
  this.timeout(20_000);
  let env: Awaited<ReturnType<typeof setup>>;
  afterEach(() => env.close());

  it('holds each replaying stream to the per-stream bound while the reader takes nothing', async () => {
    env = await setup(16);
    for (let i = 0; i < 8; i++) await env.stalled();
    await until(() => env.events.streams.size === 8, 5000);
    const frame = env.events.hub.eventAt(1)!.frame.length;
    // Sampled while the replays run into their sockets' backpressure: the kernel takes a few
    // MB of each first, then the daemon holds what is left of a slice, never more than the bound.
    let most = 0;
    const start = Date.now();
    while (Date.now() - start < 1500) {
      const buffered = env.events.streams.bufferedBytes;
      expect(buffered).to.be.at.most(8 * (BOUND + frame));
      most = Math.max(most, buffered);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(most, 'bytes the readers did not take').to.be.above(0);
    expect(env.events.streams.size).to.equal(8);
  });

  it('closes the stalled streams within the stall bound, logs them and counts them', async () => {
    env = await setup(16, STALL_MS);
    for (let i = 0; i < 5; i++) await env.stalled();
    // The bound, plus the sweep's period (a quarter of it) and a loaded machine's slack.
    await until(
      () => env.log.lines().filter((l) => l.event === 'event_stream_stalled').length === 5,
      STALL_MS * 1.25 + 3000,
    );
    expect(env.events.streams.size).to.equal(0);
    expect(await env.metric(EVENT_METRIC.stalledClosed)).to.equal(5);
    const lines = env.log.lines().filter((l) => l.event === 'event_stream_stalled');
    expect(lines).to.have.length(5);
    for (const line of lines) {
      expect(line).to.include({ stallMs: STALL_MS });
      // Closed once its socket had held bytes for the bound, and at most a sweep period later.
      expect(line.stalledMs)
        .to.be.at.least(STALL_MS)
        .and.below(STALL_MS * 1.25 + 1500);
    }
  });

  it('answers one stream over --max-event-streams 503 EVENT_STREAMS_FULL in JSON, while the API still answers; a refusal is no error line', async () => {
    env = await setup(3);
    for (let i = 0; i < 3; i++) await env.stalled();
    await until(() => env.events.streams.size === 3, 5000);
    const refused = await env.get('/api/events', READ);
    expect(refused.status).to.equal(503);
    expect(refused.headers['content-type']).to.match(/^application\/json/);
    expect(refused.headers['retry-after']).to.equal('30');
    expect(JSON.parse(refused.body)).to.deep.equal({
      success: false,
      error:
        '3 event streams are open, the most --max-event-streams allows; retry later, or close a stream this client no longer reads',
      code: 'EVENT_STREAMS_FULL',
    });
    expect(await env.metric(EVENT_METRIC.refused)).to.equal(1);
    expect((await env.get('/api/peers', ADMIN)).status).to.equal(200);
    // A limit a client reached, counted above: not the daemon's fault, so no error line (with a
    // stack) that any read-token holder could repeat at will; its request line says 503.
    expect(env.log.lines().filter((l) => l.level === 50)).to.deep.equal([]);
    const line = env.log.lines().find((l) => l.msg === 'request' && l.status === 503);
    expect(line).to.include({ method: 'GET', path: '/api/events', level: 30 });
  });
});
