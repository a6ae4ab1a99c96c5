/**
 * The twin test of the event stream's fast path (src/http/events-fast-path.ts): every request
 * is sent to two servers over real sockets, one with the fast path before the Express app (as
 * createHttpServer builds it) and the Express app alone (the reference), each with its own
 * EventStreams over one history, and their answers must be equal: status, every header in order
 * and case (Date aside), and for a refusal the body bytes. A counter around the fast path shows
 * which requests it took, so that a fall-through that should not be one (or the reverse) fails.
 */
import { expect } from 'chai';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { EventHub, EventStreams } from '../../../src/events';
import {
  TokenStore,
  createMetrics,
  createServer,
  eventStreamHandler,
  eventsFastPath,
  type ScopedTokens,
} from '../../../src/http';
import { createApp } from '../../../src/http/app';
import type { Metrics } from '../../../src/http/metrics';
import type { PeerServiceApi } from '../../../src/peers';
import { captureLog, type CapturedLog } from '../support/log-capture';

const ADMIN = 'admin-token-0123456789abcdef';
const READ = 'read-token-0123456789abcdef';
const TOKENS: ScopedTokens = { admin: [ADMIN], read: [READ] };

/** Nothing of the peer service is called by a stream request. */
const service = new Proxy({} as PeerServiceApi, {
  get: () => () => Promise.reject(new Error('not called by a stream request')),
});

interface Side {
  server: http.Server;
  port: number;
  log: CapturedLog;
  metrics: Metrics;
  streams: EventStreams;
  hub: EventHub;
  /** Requests the fast path took (always 0 on the Express side). */
  fast: number;
}

async function start(maxStreams: number, withFastPath: boolean): Promise<Side> {
  const log = captureLog();
  const metrics = createMetrics({ service, perPeer: false, processMetrics: false });
  const hub = new EventHub({
    interfaceName: 'wg0',
    historySize: 100,
    run: 'r',
    now: () => Date.parse('2026-03-01T12:00:00Z'),
  });
  for (let i = 0; i < 5; i++) hub.publish({ type: 'interface.lost', details: { reason: 'x' } });
  const streams = new EventStreams(hub, { maxStreams, logger: log.logger });
  const tokens = new TokenStore(TOKENS);
  const app = createApp({
    service,
    tokens,
    logger: log.logger,
    metrics,
    handlers: { events: eventStreamHandler(streams) },
  });
  const fastPath = eventsFastPath({ streams, tokens, logger: log.logger, metrics, express: app });
  const side: Side = {
    server: undefined as unknown as http.Server,
    port: 0,
    log,
    metrics,
    streams,
    hub,
    fast: 0,
  };
  side.server = createServer(
    app,
    { logger: log.logger },
    withFastPath
      ? (req, res) => {
          const took = fastPath(req, res);
          if (took) side.fast += 1;
          return took;
        }
      : null,
  );
  await new Promise<void>((resolve) => side.server.listen(0, '127.0.0.1', resolve));
  side.port = (side.server.address() as AddressInfo).port;
  return side;
}

interface Answer {
  status: number;
  /** Every header as sent, name and value, Date left out. */
  headers: string[];
  /** The body of a refusal; the first bytes of a stream. */
  body: string;
}

/**
 * A raw request: its status line and headers as the server wrote them, and its body (a stream's
 * first event, then the socket is closed).
 */
function ask(port: number, request: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
    let text = '';
    const done = (): void => {
      socket.destroy();
      const [head = '', body = ''] = text.split('\r\n\r\n', 2);
      const [statusLine = '', ...lines] = head.split('\r\n');
      resolve({
        status: Number(statusLine.split(' ')[1]),
        headers: lines.filter((l) => !/^date:/i.test(l)),
        body,
      });
    };
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      text += chunk;
      const head = text.indexOf('\r\n\r\n');
      if (head < 0) return;
      const length = /\r\ncontent-length: (\d+)/i.exec(text.slice(0, head));
      const body = text.length - head - 4;
      if (length !== null ? body >= Number(length[1]) : /\n\n/.test(text.slice(head + 4))) done();
    });
    socket.on('end', done);
    socket.on('error', reject);
  });
}

function get(path: string, headers: Record<string, string> = {}, method = 'GET'): string {
  const lines = Object.entries({ Host: 'x', ...headers }).map(([k, v]) => `${k}: ${v}\r\n`);
  return `${method} ${path} HTTP/1.1\r\n${lines.join('')}\r\n`;
}

async function until(what: () => boolean, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!what()) {
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

async function durations(side: Side): Promise<string[]> {
  const text = await side.metrics.registry.metrics();
  return text
    .split('\n')
    .filter((l) => l.startsWith('wg_peerd_http_request_duration_seconds_count{'))
    .map((l) => l.replace(/^[^{]*/, ''));
}

describe('GET /api/events: the fast path answers as Express does (issue 30)', () => {
  const sides: Side[] = [];
  const twins = async (maxStreams: number): Promise<[Side, Side]> => {
    const pair: [Side, Side] = [await start(maxStreams, true), await start(maxStreams, false)];
    sides.push(...pair);
    return pair;
  };
  afterEach(async () => {
    for (const side of sides.splice(0)) {
      side.streams.closeAll();
      side.server.closeAllConnections();
      await new Promise<void>((resolve) => side.server.close(() => resolve()));
    }
  });

  const TAKEN: Array<[string, string]> = [
    ['a stream with a read token', get('/api/events', { Authorization: `Bearer ${READ}` })],
    ['a stream with an admin token', get('/api/events', { Authorization: `Bearer ${ADMIN}` })],
    [
      'a stream of some types, resumed',
      get('/api/events?types=interface.lost,peer.created', {
        Authorization: `Bearer ${READ}`,
        'Last-Event-ID': 'r.3',
      }),
    ],
  ];
  for (const [label, request] of TAKEN) {
    it(`takes ${label} and answers as Express does, header by header`, async () => {
      const [fast, express] = await twins(4);
      const id = { 'X-Request-Id': 'req-1' };
      const withId = request.replace(
        'Host: x\r\n',
        `Host: x\r\nX-Request-Id: ${id['X-Request-Id']}\r\n`,
      );
      const [a, b] = [await ask(fast.port, withId), await ask(express.port, withId)];
      expect(a.status).to.equal(200);
      expect(a.headers).to.deep.equal(b.headers);
      expect(a.body).to.equal(b.body);
      expect(fast.fast).to.equal(1);
    });
  }

  it('refuses a stream over --max-event-streams as Express does: 503, Retry-After, the same bytes, counted', async () => {
    const [fast, express] = await twins(0);
    const request = get('/api/events', { Authorization: `Bearer ${READ}`, 'X-Request-Id': 'r-2' });
    const [a, b] = [await ask(fast.port, request), await ask(express.port, request)];
    expect(a.status).to.equal(503);
    expect(a.headers).to.deep.equal(b.headers);
    expect(a.headers).to.include('Retry-After: 30');
    expect(a.body).to.equal(b.body);
    expect(JSON.parse(a.body)).to.include({ code: 'EVENT_STREAMS_FULL' });
    expect(fast.fast).to.equal(1);
    await until(() => fast.log.lines().some((l) => l['msg'] === 'request'));
    await until(() => express.log.lines().some((l) => l['msg'] === 'request'));
    const line = (side: Side) => {
      const found = side.log.lines().find((l) => l['msg'] === 'request')!;
      return { ...found, ms: 0, time: 0, client: 0 };
    };
    expect(line(fast)).to.deep.equal(line(express));
    expect(line(fast)).to.include({ status: 503, path: '/api/events', requestId: 'r-2' });
    expect(await durations(fast)).to.deep.equal(await durations(express));
  });

  const FALL_THROUGH: Array<[string, string]> = [
    ['an unknown type (400)', get('/api/events?types=nope', { Authorization: `Bearer ${READ}` })],
    [
      'another parameter (400)',
      get('/api/events?types=interface.lost&x=1', { Authorization: `Bearer ${READ}` }),
    ],
    [
      'a percent-encoded type',
      get('/api/events?types=interface%2Elost', { Authorization: `Bearer ${READ}` }),
    ],
    ['a trailing slash (404)', get('/api/events/', { Authorization: `Bearer ${READ}` })],
    ['POST (405)', get('/api/events', { Authorization: `Bearer ${ADMIN}` }, 'POST')],
  ];
  for (const [label, request] of FALL_THROUGH) {
    it(`hands ${label} to Express at once, which answers as before`, async () => {
      const [fast, express] = await twins(4);
      const withId = request.replace('Host: x\r\n', 'Host: x\r\nX-Request-Id: req-3\r\n');
      const [a, b] = [await ask(fast.port, withId), await ask(express.port, withId)];
      expect(a).to.deep.equal(b);
      expect(fast.fast).to.equal(0);
    });
  }

  // The token is checked in the request's turn (a hash each, not in the turn that read it).
  const REFUSED: Array<[string, string]> = [
    ['a request without a token (401)', get('/api/events')],
    ['a wrong token (401)', get('/api/events', { Authorization: 'Bearer nope-nope-nope-nope' })],
  ];
  for (const [label, request] of REFUSED) {
    it(`hands ${label} to Express in its turn, which answers and logs it as before, once`, async () => {
      const [fast, express] = await twins(4);
      const withId = request.replace('Host: x\r\n', 'Host: x\r\nX-Request-Id: req-4\r\n');
      const [a, b] = [await ask(fast.port, withId), await ask(express.port, withId)];
      expect(a.status).to.equal(401);
      expect(a).to.deep.equal(b);
      expect(fast.fast).to.equal(1);
      const lines = (side: Side) =>
        side.log
          .lines()
          .filter((l) => l['msg'] === 'request')
          .map((l) => ({ ...l, ms: 0, time: 0, client: 0 }));
      await until(() => lines(fast).length > 0 && lines(express).length > 0);
      expect(lines(fast)).to.deep.equal(lines(express));
      expect(lines(fast)).to.have.length(1);
      expect(await durations(fast)).to.deep.equal(await durations(express));
    });
  }

  it('answers a stream request on a later turn of the event loop, never in the one that read it', async () => {
    const [fast] = await twins(4);
    let waitingAtRequest = -1;
    fast.server.prependListener('request', () => {
      // After the fast path ran for this request (the next tick): it waits for its admission.
      process.nextTick(() => (waitingAtRequest = fast.streams.waiting));
    });
    const answer = await ask(fast.port, get('/api/events', { Authorization: `Bearer ${READ}` }));
    expect(answer.status).to.equal(200);
    expect(waitingAtRequest).to.equal(1);
  });
});
