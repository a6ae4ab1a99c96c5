/**
 * The twin test of the list fast path (src/http/list-fast-path.ts): every request is sent to
 * two servers over real sockets, the daemon's (createServer with the fast path before the
 * Express app) and the Express app alone (the reference), and their answers must be equal:
 * status, every header in order and case (Date aside; a generated X-Request-Id is a UUID on both
 * sides), body bytes. Each side has its own log, metrics and ListBodies over one fixed snapshot,
 * and Date is frozen so that Age and X-Data-Age-Ms agree. A counter around the fast path shows
 * which requests it took, so that a fall-through that should not be one (or the reverse) fails.
 */
import { expect } from 'chai';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import sinon from 'sinon';
import {
  ListBodies,
  TokenStore,
  createMetrics,
  createServer,
  listFastPath,
  type ScopedTokens,
} from '../../../src/http';
import { createApp } from '../../../src/http/app';
import type { Metrics } from '../../../src/http/metrics';
import { FIELD_NAMES } from '../../../src/http/schemas';
import type { WireGuardPeer } from '../../../src/kernel/types';
import {
  InterfaceMissingError,
  KernelFailureError,
  type PeerServiceApi,
  type PeerSnapshot,
} from '../../../src/peers';
import { parseSamples } from '../../support/prom-text';
import { captureLog, type CapturedLog } from '../support/log-capture';

const TAKEN_AT = Date.parse('2026-03-01T12:00:00.000Z');
/** Frozen "now": 2.345 s after the read, so Age is 2 and X-Data-Age-Ms 2345 on both sides. */
const NOW = TAKEN_AT + 2_345;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ADMIN = 'admin-token-0123456789abcdef';
const READ = 'read-token-0123456789abcdef';
const TOKENS: ScopedTokens = { admin: [ADMIN], read: [READ] };

/** Peers alive, dead and never handshaked, one with a speed limit and one with a data cap. */
function fixedSnapshot(): PeerSnapshot {
  const ages = [0, 60_000, 200_000, null, 3_600_000];
  const peers: WireGuardPeer[] = ages.map((age, i) => ({
    publicKey: Buffer.alloc(32, i + 1).toString('base64'),
    endpoint: i % 2 === 0 ? `203.0.113.${i + 1}:51820` : null,
    lastHandshake: age === null ? null : new Date(TAKEN_AT - age),
    rxBytes: 1000 * i,
    txBytes: 2000 * i,
    persistentKeepalive: 25,
    allowedIps: [{ family: 4, address: `10.8.0.${i + 2}`, cidr: 32 }],
  }));
  return {
    takenAt: TAKEN_AT,
    readMs: 1,
    device: { name: 'wg0', ifindex: 7, publicKey: null, listenPort: 51820, fwmark: 0, peers },
    limits: new Map([['10.8.0.3', { download: 125_000, upload: 125_000 }]]),
    caps: new Map([['10.8.0.4', { quotaBytes: 10_000_000, usedBytes: 4_000, enforced: true }]]),
  };
}

/** The list's service: one fixed snapshot, or a failure; nothing else is called by a list. */
class FixedService implements PeerServiceApi {
  failure: unknown = null;
  /** When set, snapshot() waits for this before answering. */
  gate: Promise<void> | null = null;
  snapshots = 0;
  constructor(private readonly fixed: PeerSnapshot) {}
  /** Set once snapshot() answered: from then on the snapshot is "in the window". */
  private read = false;
  async snapshot(): Promise<PeerSnapshot> {
    this.snapshots += 1;
    if (this.gate !== null) await this.gate;
    if (this.failure !== null) throw this.failure;
    this.read = true;
    return this.fixed;
  }
  /** Polls the fast path answered without a promise (freshSnapshot gave the snapshot). */
  fresh = 0;
  freshSnapshot(): PeerSnapshot | null {
    if (!this.read || this.failure !== null || this.gate !== null) return null;
    this.fresh += 1;
    return this.fixed;
  }
  private unused(): Promise<never> {
    return Promise.reject(new Error('not called by a list'));
  }
  listPeers = () => this.unused();
  createPeer = () => this.unused();
  deletePeer = () => this.unused();
  setSpeedLimit = () => this.unused();
  removeSpeedLimit = () => this.unused();
  setDataCap = () => this.unused();
  removeDataCap = () => this.unused();
  setSuspension = () => this.unused();
  setName = () => this.unused();
  setExpiry = () => this.unused();
  resetDataCap = () => this.unused();
}

interface Side {
  server: http.Server;
  port: number;
  log: CapturedLog;
  metrics: Metrics;
  /** Requests the fast path took (always 0 on the Express side). */
  fast: number;
}

async function start(
  service: PeerServiceApi,
  tokens: ScopedTokens | null,
  withFastPath: boolean,
): Promise<Side> {
  const log = captureLog();
  const metrics = createMetrics({ service, perPeer: false, processMetrics: false });
  const api = {
    service,
    tokens: tokens === null ? null : new TokenStore(tokens),
    logger: log.logger,
    metrics,
    version: 'test',
    listBodies: new ListBodies(),
  };
  const fastPath = listFastPath(api);
  const side: Side = {
    server: undefined as unknown as http.Server,
    port: 0,
    log,
    metrics,
    fast: 0,
  };
  side.server = createServer(
    createApp(api),
    { logger: api.logger },
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

function stop(side: Side): Promise<void> {
  side.server.closeAllConnections();
  return new Promise((resolve) => side.server.close(() => resolve()));
}

interface Ask {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string;
}

interface Answer {
  status: number;
  /** Name and value pairs as sent, Date and a generated X-Request-Id replaced. */
  headers: Array<[string, string]>;
  body: Buffer;
}

function exchange(port: number, ask: Ask): Promise<Answer> {
  const headers = { ...ask.headers };
  // Node's client frames no body of a GET by itself: it would follow the request unannounced.
  if (ask.body !== undefined && headers['Transfer-Encoding'] === undefined) {
    headers['Content-Length'] = String(Buffer.byteLength(ask.body));
  }
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: ask.method ?? 'GET',
        path: ask.path,
        headers,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const headers: Array<[string, string]> = [];
          for (let i = 0; i < res.rawHeaders.length; i += 2) {
            const name = res.rawHeaders[i]!;
            let value = res.rawHeaders[i + 1]!;
            if (name.toLowerCase() === 'date') value = '<date>';
            if (name.toLowerCase() === 'x-request-id' && value !== ask.headers?.['X-Request-Id']) {
              expect(value, 'a generated X-Request-Id').to.match(UUID);
              value = '<uuid>';
            }
            headers.push([name, value]);
          }
          resolve({ status: res.statusCode ?? 0, headers, body: Buffer.concat(chunks) });
        });
      },
    );
    req.on('error', reject);
    req.end(ask.body);
  });
}

/** The "request" lines of a log, without the fields that differ between any two requests. */
function requestLines(log: CapturedLog): Array<Record<string, unknown>> {
  return log
    .lines()
    .filter((line) => line['msg'] === 'request' || line['msg'] === 'request failed')
    .map((line) => {
      const kept = { ...line };
      if (kept['msg'] === 'request') expect(kept['ms']).to.be.a('number');
      // The time taken differs, and so does the stack of an error; its message may not.
      delete kept['ms'];
      delete kept['time'];
      if (kept['err'] !== undefined) kept['err'] = (kept['err'] as { message?: unknown }).message;
      const id = kept['requestId'];
      if (typeof id === 'string' && UUID.test(id)) kept['requestId'] = '<uuid>';
      return kept;
    });
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 2));
}

/** Each request has its line once its response closed. */
function settled(side: Side, count: number): Promise<void> {
  return until(() => requestLines(side.log).filter((l) => l['msg'] === 'request').length >= count);
}

/** The request-duration counts by labels: equal sides were timed under the same series. */
async function durationCounts(side: Side): Promise<string[]> {
  const samples = parseSamples(await side.metrics.registry.metrics());
  return samples
    .filter((s) => s.name === 'wg_peerd_http_request_duration_seconds_count')
    .map((s) => `${s.labels['method']} ${s.labels['route']} ${s.labels['code']} ${s.value}`);
}

describe('list fast path: the twin of the Express route', () => {
  let clock: sinon.SinonFakeTimers;
  let sides: Side[] = [];
  const service = new FixedService(fixedSnapshot());

  beforeEach(() => {
    clock = sinon.useFakeTimers({ now: NOW, toFake: ['Date'] });
    service.failure = null;
    service.gate = null;
  });
  afterEach(async () => {
    clock.restore();
    await Promise.all(sides.map(stop));
    sides = [];
  });

  async function twins(tokens: ScopedTokens | null): Promise<[Side, Side]> {
    const pair: [Side, Side] = [
      await start(service, tokens, true),
      await start(service, tokens, false),
    ];
    sides.push(...pair);
    return pair;
  }

  /** Sends `ask` to both, expects equal answers, and returns the fast side's. */
  async function same(fast: Side, express: Side, ask: Ask): Promise<Answer> {
    const a = await exchange(fast.port, ask);
    const b = await exchange(express.port, ask);
    const what = JSON.stringify(ask);
    expect(a.status, what).to.equal(b.status);
    expect(a.headers, what).to.deep.equal(b.headers);
    expect(a.body.equals(b.body), `${what}: body bytes`).to.equal(true);
    return a;
  }

  // Issue 29: the partial poll too, and a field list that names every field (the full body).
  const QUERIES = [
    '',
    '?status=ALIVE',
    '?status=DEAD',
    '?fields=public_key,status,data_cap.used_bytes',
    '?fields=data_cap,name',
    `?fields=${FIELD_NAMES.join(',')}`,
  ];
  const ENCODINGS = [undefined, 'gzip', 'br', 'gzip;q=0, br;q=0, identity'];
  const IDS = [undefined, 'poller-42:1', 'not a sane id'];

  for (const [label, tokens, authorizations] of [
    ['without tokens', null, [undefined, `Bearer ${READ}`]],
    ['with tokens', TOKENS, [`Bearer ${READ}`, `Bearer ${ADMIN}`, `bearer   ${READ}`]],
  ] as const) {
    it(`answers every common poll ${label} as Express does, and takes each one`, async () => {
      const [fast, express] = await twins(tokens);
      const freshBefore = service.fresh;
      let sent = 0;
      for (const query of QUERIES) {
        for (const encoding of ENCODINGS) {
          for (const id of IDS) {
            for (const authorization of authorizations) {
              const headers: Record<string, string> = {};
              if (encoding !== undefined) headers['Accept-Encoding'] = encoding;
              if (id !== undefined) headers['X-Request-Id'] = id;
              if (authorization !== undefined) headers['Authorization'] = authorization;
              const answer = await same(fast, express, { path: `/api/peers${query}`, headers });
              expect(answer.status).to.equal(200);
              sent += 1;
              expect(fast.fast, `${query} ${JSON.stringify(headers)}`).to.equal(sent);
            }
          }
        }
      }
      // A bodiless GET may still say Content-Length: 0.
      const headers: Record<string, string> = { 'Content-Length': '0' };
      if (authorizations[0] !== undefined) headers['Authorization'] = authorizations[0];
      await same(fast, express, { path: '/api/peers', headers });
      sent += 1;
      expect(fast.fast).to.equal(sent);
      expect(express.fast).to.equal(0);
      // Most were answered at once from the built body (the first of each filter and encoding
      // through answer(), which builds it): both branches are held equal to Express here.
      expect(service.fresh - freshBefore).to.be.greaterThan(sent / 2);
      await settled(fast, sent);
      await settled(express, sent);
      expect(requestLines(fast.log)).to.deep.equal(requestLines(express.log));
      expect(await durationCounts(fast)).to.deep.equal([`GET /api/peers 200 ${sent}`]);
      expect(await durationCounts(fast)).to.deep.equal(await durationCounts(express));
    });
  }

  it('writes one debug line and one duration per poll, with the fields of requestLog', async () => {
    const [fast] = await twins(TOKENS);
    await exchange(fast.port, {
      path: '/api/peers?status=DEAD',
      headers: { Authorization: `Bearer ${READ}`, 'X-Request-Id': 'poll-1' },
    });
    await settled(fast, 1);
    const lines = fast.log.lines().filter((l) => l['msg'] === 'request');
    expect(lines).to.have.length(1);
    const [line] = lines;
    // pino: debug is 20.
    expect(line).to.include({
      level: 20,
      method: 'GET',
      path: '/api/peers',
      status: 200,
      requestId: 'poll-1',
    });
    expect(line!['client']).to.match(/^(::ffff:)?127\.0\.0\.1$|^::1$/);
    expect(line!['ms']).to.be.a('number');
    expect(line).to.not.have.property('aborted');
    expect(fast.log.lines()).to.have.length(1);
    expect(await durationCounts(fast)).to.deep.equal(['GET /api/peers 200 1']);
  });

  const FALL_THROUGH: Array<[string, Ask]> = [
    ['a status of another case (400)', { path: '/api/peers?status=alive' }],
    ['another parameter (400)', { path: '/api/peers?status=ALIVE&x=1' }],
    ['an empty query', { path: '/api/peers?' }],
    ['a percent-encoded query', { path: '/api/peers?status=%41LIVE' }],
    ['a field no peer has (400)', { path: '/api/peers?fields=public_key,nope' }],
    ['an empty field name (400)', { path: '/api/peers?fields=public_key,,status' }],
    ['an empty field list (400)', { path: '/api/peers?fields=' }],
    ['a field of another case (400)', { path: '/api/peers?fields=Status' }],
    ['a percent-encoded field list', { path: '/api/peers?fields=public%5Fkey,status' }],
    ['fields with a status', { path: '/api/peers?fields=status&status=DEAD' }],
    ['fields with a name', { path: '/api/peers?fields=status&name=ada' }],
    ['a trailing slash', { path: '/api/peers/' }],
    ['another case of the path', { path: '/API/Peers' }],
    ['HEAD', { method: 'HEAD', path: '/api/peers' }],
    ['POST', { method: 'POST', path: '/api/peers' }],
    [
      'a JSON body on GET',
      { path: '/api/peers', headers: { 'Content-Type': 'application/json' }, body: '{}' },
    ],
    ['a text body on GET (415)', { path: '/api/peers', body: 'hello' }],
    [
      'a chunked body on GET',
      {
        path: '/api/peers',
        headers: { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' },
        body: '{}',
      },
    ],
    [
      'Content-Length: 0 with an unsupported charset (415)',
      {
        path: '/api/peers',
        headers: { 'Content-Type': 'application/json; charset=latin1', 'Content-Length': '0' },
      },
    ],
    ['another route', { path: '/api/openapi.json' }],
  ];

  for (const [label, ask] of FALL_THROUGH) {
    it(`hands ${label} to Express, which answers as before`, async () => {
      const [fast, express] = await twins(null);
      await same(fast, express, ask);
      expect(fast.fast).to.equal(0);
      await settled(fast, 1);
      await settled(express, 1);
      expect(requestLines(fast.log)).to.deep.equal(requestLines(express.log));
      expect(await durationCounts(fast)).to.deep.equal(await durationCounts(express));
    });
  }

  const REFUSED: Array<[string, Ask, number]> = [
    ['no token (401)', { path: '/api/peers' }, 401],
    [
      'a wrong token (401)',
      { path: '/api/peers', headers: { Authorization: 'Bearer wrong' } },
      401,
    ],
    ['a Basic header (401)', { path: '/api/peers', headers: { Authorization: 'Basic eDp5' } }, 401],
    [
      'a read token on POST (403)',
      { method: 'POST', path: '/api/peers', headers: { Authorization: `Bearer ${READ}` } },
      403,
    ],
  ];

  for (const [label, ask, status] of REFUSED) {
    it(`hands ${label} to Express, so refusals come from one place`, async () => {
      const [fast, express] = await twins(TOKENS);
      const answer = await same(fast, express, ask);
      expect(answer.status).to.equal(status);
      expect(JSON.parse(answer.body.toString()) as unknown).to.include({ success: false });
      expect(fast.fast).to.equal(0);
      await settled(fast, 1);
      await settled(express, 1);
      expect(requestLines(fast.log)).to.deep.equal(requestLines(express.log));
    });
  }

  const FAILURES: Array<[string, unknown]> = [
    ['a kernel failure (500)', new KernelFailureError('WG_CMD_GET_DEVICE', 'EPERM', undefined)],
    ['a missing interface (503)', new InterfaceMissingError('wg0')],
    ['an unexpected error (500)', new Error('a bug')],
  ];

  for (const [label, failure] of FAILURES) {
    it(`answers ${label} of the snapshot as the Express error handler does`, async () => {
      const [fast, express] = await twins(null);
      service.failure = failure;
      const before = service.snapshots;
      const answer = await same(fast, express, {
        path: '/api/peers?status=ALIVE',
        headers: { 'X-Request-Id': 'failing-1', 'Accept-Encoding': 'gzip' },
      });
      expect(answer.status).to.be.oneOf([500, 503]);
      // One read per request on each side: the fast path did not hand it on to read again.
      expect(service.snapshots - before).to.equal(2);
      expect(fast.fast).to.equal(1);
      await settled(fast, 1);
      await settled(express, 1);
      const lines = requestLines(fast.log);
      expect(lines).to.deep.equal(requestLines(express.log));
      expect(lines.map((l) => [l['msg'], l['level']])).to.deep.equal([
        ['request failed', 50],
        ['request', 30],
      ]);
      expect(await durationCounts(fast)).to.deep.equal(await durationCounts(express));
    });
  }

  it('logs a poll cut before its answer as aborted, as Express does', async () => {
    const [fast, express] = await twins(null);
    for (const side of [fast, express]) {
      let open!: () => void;
      service.gate = new Promise((resolve) => (open = resolve));
      const req = http.request({ host: '127.0.0.1', port: side.port, path: '/api/peers' });
      req.on('error', () => undefined);
      const before = service.snapshots;
      req.end();
      // The route waits on the snapshot: nothing has been answered yet.
      await until(() => service.snapshots > before);
      req.destroy();
      await settled(side, 1);
      open();
    }
    expect(fast.fast).to.equal(1);
    const lines = requestLines(fast.log);
    expect(lines).to.deep.equal(requestLines(express.log));
    expect(lines[0]).to.include({ aborted: true, status: 200 });
    expect(await durationCounts(fast)).to.deep.equal(await durationCounts(express));
  });
});
