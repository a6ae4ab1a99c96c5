import { expect } from 'chai';
import sinon from 'sinon';
import { Webhook } from 'standardwebhooks';
import {
  DEFAULT_DELIVERY_POLICY,
  EventHub,
  Webhooks,
  MAX_RESPONSE_BYTES,
  WebhooksFileError,
  fetchSend,
  loadWebhooksFile,
  parseWebhooksText,
  retryDelayMs,
  targetLabel,
  type DeliveryPolicy,
  type WebhookTarget,
} from '../../../src/events';

const T0 = Date.parse('2026-03-01T12:00:00.000Z');
const SECRET = `whsec_${Buffer.alloc(32, 9).toString('base64')}`;
const OTHER_SECRET = `whsec_${Buffer.alloc(32, 8).toString('base64')}`;

interface Received {
  url: string;
  headers: Record<string, string>;
  body: string;
  at: number;
}

type Answer = number | 'hang' | 'refuse';

/** Targets answer as the test says, per URL, in turn; every request is kept. */
function setup(policy: Partial<DeliveryPolicy> = {}) {
  const hub = new EventHub({ interfaceName: 'wg0', historySize: 100, run: 'r' });
  const received: Received[] = [];
  const answers = new Map<string, Answer[]>();
  const counts = { attempts: new Map<string, number>(), gaveUp: 0, dropped: 0 };
  const depths = new Map<string, number>();
  const warnings: Array<Record<string, unknown>> = [];
  const webhooks = new Webhooks(hub, {
    policy,
    logger: { info: () => {}, warn: (o) => warnings.push(o) },
    observer: {
      attempt: (target, outcome) =>
        counts.attempts.set(
          `${target} ${outcome}`,
          (counts.attempts.get(`${target} ${outcome}`) ?? 0) + 1,
        ),
      gaveUp: () => (counts.gaveUp += 1),
      dropped: () => (counts.dropped += 1),
      queueDepth: (target, depth) => depths.set(target, depth),
      removed: (target) => depths.delete(target),
    },
    send: (request) => {
      received.push({
        url: request.url,
        headers: request.headers,
        body: request.body,
        at: Date.now(),
      });
      const answer = answers.get(request.url)?.shift() ?? 200;
      if (answer === 'refuse') return Promise.reject(new Error('ECONNREFUSED'));
      if (answer === 'hang') {
        return new Promise((_resolve, reject) =>
          request.signal.addEventListener('abort', () => reject(new Error('aborted'))),
        );
      }
      return Promise.resolve(answer);
    },
  });
  const target = (url: string, types?: string[]): WebhookTarget => ({
    url,
    secret: SECRET,
    types: types ? new Set(types as never[]) : null,
  });
  return { hub, webhooks, received, answers, counts, depths, warnings, target };
}

describe('events: webhooks (Standard Webhooks signatures, retries, bounded queues)', () => {
  let clock: sinon.SinonFakeTimers;
  beforeEach(() => {
    clock = sinon.useFakeTimers({
      now: T0,
      toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'],
    });
  });
  afterEach(() => clock.restore());

  it('POSTs each event signed so that the standardwebhooks library verifies it; webhook-id is the event id', async () => {
    const w = setup();
    w.webhooks.setTargets([w.target('http://a.example/hook')]);
    const event = w.hub.publish({
      type: 'peer.created',
      publicKey: 'k',
      ipAddress: '10.8.0.2',
      details: { origin: 'api' },
    });
    await clock.tickAsync(0);
    expect(w.received).to.have.length(1);
    const [got] = w.received;
    expect(got!.body).to.equal(event.json);
    expect(got!.headers['webhook-id']).to.equal(event.id);
    expect(got!.headers['webhook-timestamp']).to.equal(String(T0 / 1000));
    expect(got!.headers['content-type']).to.equal('application/json');
    expect(new Webhook(SECRET).verify(got!.body, got!.headers)).to.deep.equal(
      JSON.parse(event.json),
    );
    expect(() => new Webhook(OTHER_SECRET).verify(got!.body, got!.headers)).to.throw(/signature/);
  });

  it('sends a target only the types it asked for', async () => {
    const w = setup();
    w.webhooks.setTargets([w.target('http://a.example/', ['interface.restored'])]);
    w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    w.hub.publish({ type: 'interface.restored' });
    await clock.tickAsync(0);
    expect(w.received.map((r) => JSON.parse(r.body).type)).to.deep.equal(['interface.restored']);
  });

  it('retries a failed delivery with the same id: first retry after 5 s (within 30 s), then doubling', async () => {
    const w = setup({ jitter: 0 });
    w.answers.set('http://a.example/', [500, 'refuse', 503, 200]);
    w.webhooks.setTargets([w.target('http://a.example/')]);
    const event = w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    await clock.tickAsync(60_000);
    expect(w.received.map((r) => r.headers['webhook-id'])).to.deep.equal([
      event.id,
      event.id,
      event.id,
      event.id,
    ]);
    expect(w.received.map((r) => r.at - T0)).to.deep.equal([0, 5_000, 15_000, 35_000]);
    // Every attempt is signed afresh at its own time, and verifies.
    for (const r of w.received)
      expect(() => new Webhook(SECRET).verify(r.body, r.headers)).to.not.throw();
    expect(w.counts.attempts.get('http://a.example/ http_error')).to.equal(2);
    expect(w.counts.attempts.get('http://a.example/ network_error')).to.equal(1);
    expect(w.counts.attempts.get('http://a.example/ success')).to.equal(1);
    expect(w.depths.get('http://a.example/')).to.equal(0);
  });

  // DESIGN §3/§4, issue 30: the first retry within 30 s, exponential backoff with jitter, for 36 h.
  it('the default schedule: first retry within 30 s, doubling up to an hour, less up to half at random, for 36 h', () => {
    const p = DEFAULT_DELIVERY_POLICY;
    const at = (r: number) => (retry: number) => retryDelayMs(p, retry, () => r);
    // random() → 0: the backoff itself; random() → 1 (its supremum): half of it.
    const longest = Array.from({ length: 14 }, (_, i) => at(0)(i + 1));
    expect(longest.slice(0, 5)).to.deep.equal([5_000, 10_000, 20_000, 40_000, 80_000]);
    expect(Math.max(...longest)).to.equal(3_600_000);
    const shortest = Array.from({ length: 14 }, (_, i) => at(1)(i + 1));
    expect(shortest.slice(0, 3)).to.deep.equal([2_500, 5_000, 10_000]);
    expect(Math.max(...shortest)).to.equal(1_800_000);
    for (let i = 0; i < 100; i++) expect(retryDelayMs(p, 1)).to.be.within(2_500, 5_000);
    expect(p.giveUpAfterMs).to.equal(36 * 3_600_000);
  });

  it('spreads the retries of many events at random (jitter), each within its bounds', async () => {
    const w = setup({ concurrency: 100 });
    w.answers.set('http://a.example/', [...Array(20).fill(503)]);
    w.webhooks.setTargets([w.target('http://a.example/')]);
    for (let i = 0; i < 20; i++)
      w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    await clock.tickAsync(5_000);
    const retries = w.received.slice(20).map((r) => r.at - T0);
    expect(retries).to.have.length(20);
    for (const at of retries) expect(at).to.be.within(2_500, 5_000);
    expect(new Set(retries).size).to.be.above(10);
  });

  it('keeps retrying for --webhook-retry-for (giveUpAfterMs) and then gives up, logged and counted', async () => {
    const w = setup({ jitter: 0, giveUpAfterMs: 36 * 3_600_000 });
    w.answers.set('http://down.example/', Array(1000).fill('refuse'));
    w.webhooks.setTargets([w.target('http://down.example/')]);
    w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    await clock.tickAsync(35 * 3_600_000);
    expect(w.counts.gaveUp).to.equal(0);
    await clock.tickAsync(2 * 3_600_000);
    expect(w.counts.gaveUp).to.equal(1);
    const last = w.received.at(-1)!.at - T0;
    expect(last)
      .to.be.at.most(36 * 3_600_000)
      .and.above(35 * 3_600_000);
    expect(w.warnings.map((o) => o.event)).to.include('webhook_given_up');
  });

  it('a target that never answers: each attempt times out, retries stop after the bounded time, and it is logged', async () => {
    const w = setup({
      timeoutMs: 1_000,
      firstRetryMs: 1_000,
      maxDelayMs: 4_000,
      jitter: 0,
      giveUpAfterMs: 20_000,
    });
    w.answers.set('http://down.example/', Array(100).fill('hang'));
    w.webhooks.setTargets([w.target('http://down.example/')]);
    w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    await clock.tickAsync(120_000);
    // Attempts at 0, 2 (1 s timeout + 1 s), 5, 10, 15, 20 s: none after 20 s from the first.
    expect(w.received.map((r) => r.at - T0)).to.deep.equal([
      0, 2_000, 5_000, 10_000, 15_000, 20_000,
    ]);
    expect(w.counts.attempts.get('http://down.example/ timeout')).to.equal(6);
    expect(w.counts.gaveUp).to.equal(1);
    expect(w.depths.get('http://down.example/')).to.equal(0);
    expect(w.warnings.map((x) => x.event)).to.include('webhook_given_up');
  });

  it('a target that is down slows neither another target nor the publisher', async () => {
    const w = setup({ timeoutMs: 10_000 });
    w.answers.set('http://down.example/', Array(100).fill('hang'));
    w.webhooks.setTargets([w.target('http://down.example/'), w.target('http://up.example/')]);
    const started = performance.now();
    for (let i = 0; i < 20; i++)
      w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    expect(performance.now() - started).to.be.below(100);
    await clock.tickAsync(0);
    const up = w.received.filter((r) => r.url === 'http://up.example/');
    // All delivered at once, while the other target's first attempts still hang.
    expect(up).to.have.length(20);
    expect(up.every((r) => r.at === T0)).to.equal(true);
  });

  it("bounds each target's queue: events over it are dropped and counted (logged once), nothing grows without limit", async () => {
    const w = setup({ queueSize: 5, concurrency: 1, timeoutMs: 60_000 });
    w.answers.set('http://slow.example/', Array(100).fill('hang'));
    w.webhooks.setTargets([w.target('http://slow.example/')]);
    for (let i = 0; i < 12; i++)
      w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    expect(w.depths.get('http://slow.example/')).to.equal(5);
    expect(w.counts.dropped).to.equal(7);
    expect(w.warnings.filter((x) => x.event === 'webhook_queue_full')).to.have.length(1);
  });

  it('delivers in event order to one target (one attempt at a time with concurrency 1)', async () => {
    const w = setup({ concurrency: 1 });
    w.webhooks.setTargets([w.target('http://a.example/')]);
    const ids = [1, 2, 3].map(
      () => w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } }).id,
    );
    await clock.tickAsync(0);
    expect(w.received.map((r) => r.headers['webhook-id'])).to.deep.equal(ids);
  });

  it('SIGHUP: an unchanged target keeps its queue, a removed one stops, a new one starts', async () => {
    const w = setup({ timeoutMs: 1_000 });
    w.answers.set('http://gone.example/', Array(100).fill(500));
    w.webhooks.setTargets([w.target('http://kept.example/'), w.target('http://gone.example/')]);
    w.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    await clock.tickAsync(0);
    w.webhooks.setTargets([w.target('http://kept.example/'), w.target('http://new.example/')]);
    w.hub.publish({ type: 'interface.restored' });
    await clock.tickAsync(60_000);
    const byUrl = (url: string) => w.received.filter((r) => r.url === url).length;
    expect(byUrl('http://kept.example/')).to.equal(2);
    expect(byUrl('http://gone.example/')).to.equal(1); // no retry after its removal
    expect(byUrl('http://new.example/')).to.equal(1);
    expect(w.depths.has('http://gone.example/')).to.equal(false);
    w.webhooks.close();
    expect(w.hub.listenerCount).to.equal(0);
  });

  it('names a target in metrics and logs without credentials or query', () => {
    expect(targetLabel('https://user:pw@hooks.example:8443/in/x?token=s3cret')).to.equal(
      'https://hooks.example:8443/in/x',
    );
  });
});

describe('events: webhooks over real HTTP', () => {
  it('POSTs with fetch when no sender is given (also when the option is passed as undefined)', async () => {
    const http = await import('node:http');
    const got: Array<{ headers: Record<string, string>; body: string }> = [];
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        got.push({ headers: req.headers as Record<string, string>, body });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const hub = new EventHub({ interfaceName: 'wg0', historySize: 10, run: 'r' });
    const webhooks = new Webhooks(hub, {
      send: undefined,
      now: undefined,
      logger: { info: () => {}, warn: () => {} },
    });
    webhooks.setTargets([{ url: `http://127.0.0.1:${port}/in`, secret: SECRET, types: null }]);
    const event = hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    for (let i = 0; i < 100 && got.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    webhooks.close();
    server.close();
    expect(got).to.have.length(1);
    expect(new Webhook(SECRET).verify(got[0]!.body, got[0]!.headers)).to.deep.equal(
      JSON.parse(event.json),
    );
  });
});

describe('events: webhooks, what is said and read (issue 30)', () => {
  const logger = () => {
    const warnings: Array<Record<string, unknown>> = [];
    return {
      warnings,
      logger: { info: () => {}, warn: (o: Record<string, unknown>) => warnings.push(o) },
    };
  };
  const target = (url: string): WebhookTarget => ({ url, secret: SECRET, types: null });

  it('warns once per target of plain http: to another host, never of https: or this host', () => {
    const hub = new EventHub({ interfaceName: 'wg0', historySize: 10, run: 'r' });
    const { warnings, logger: log } = logger();
    const webhooks = new Webhooks(hub, { logger: log, send: () => Promise.resolve(200) });
    const plain = target('http://hooks.example/in?token=s3cret');
    webhooks.setTargets([
      plain,
      target('https://hooks.example/in'),
      target('http://127.0.0.1:9000/in'),
      target('http://localhost/in'),
      target('http://[::1]:9000/in'),
    ]);
    // SIGHUP with the same file, then with the target changed and back: still one warning.
    webhooks.setTargets([plain]);
    webhooks.setTargets([]);
    webhooks.setTargets([plain]);
    expect(warnings).to.deep.equal([
      { event: 'webhook_plain_http', target: 'http://hooks.example/in' },
    ]);
    webhooks.close();
  });

  it('reads at most 64 KiB of an answer and does not wait for the rest', async () => {
    const http = await import('node:http');
    let closed = false;
    const server = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(16 * 1024, 0x61);
      // An answer that never ends, written as fast as the client takes it.
      const pump = () => {
        while (!closed && res.write(chunk));
      };
      res.on('drain', pump);
      res.on('close', () => (closed = true));
      pump();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const controller = new AbortController();
    const started = Date.now();
    const status = await fetchSend({
      url: `http://127.0.0.1:${port}/in`,
      headers: {},
      body: '{}',
      signal: controller.signal,
    });
    expect(status).to.equal(200);
    expect(Date.now() - started).to.be.below(2_000);
    for (let i = 0; i < 100 && !closed; i++) await new Promise((r) => setTimeout(r, 10));
    expect(closed, 'the answer was cut off').to.equal(true);
    expect(MAX_RESPONSE_BYTES).to.equal(64 * 1024);
    server.closeAllConnections();
    server.close();
  });
});

describe('events: the webhooks file', () => {
  const read =
    (text: string, mode = 0o100600) =>
    () => ({ text, mode });

  it('reads one target a line: URL, secret, optional types; # comments and blank lines', () => {
    const targets = loadWebhooksFile(
      '/etc/wg-peerd/webhooks',
      read(
        `# monitoring\n\nhttps://a.example/in ${SECRET}\nhttp://b.example/ ${SECRET} peer.connected,peer.disconnected\n`,
      ),
    );
    expect(targets).to.have.length(2);
    expect(targets[0]).to.deep.equal({ url: 'https://a.example/in', secret: SECRET, types: null });
    expect([...targets[1]!.types!]).to.deep.equal(['peer.connected', 'peer.disconnected']);
  });

  it('refuses a file group or others may read (it holds secrets)', () => {
    expect(() => loadWebhooksFile('/w', read('', 0o100640))).to.throw(
      WebhooksFileError,
      /may be read by group or others \(mode 0640\): chmod 600/,
    );
  });

  // Issue 30: a refused line is named by file and number; no message quotes the secret.
  it('refuses, naming the line and never the secret: bad URL, bad scheme, userinfo, swapped fields, a secret where a URL belongs, bad secret, unknown type, extra fields', () => {
    const body = SECRET.slice(6);
    const cases: Array<[string, RegExp]> = [
      [`nota-url ${SECRET}`, /line 2: the first field is not a URL/],
      [`ftp://x.example/ ${SECRET}`, /must be http: or https:/],
      [
        `https://user:pa55word@x.example/in ${SECRET}`,
        /line 2: the URL carries a user name or password \(user:pass@\)/,
      ],
      [`https://pa55word@x.example/in ${SECRET}`, /carries a user name or password/],
      [
        `${SECRET} https://x.example/in`,
        /the first field holds a secret \(whsec_\.\.\.\) where the URL belongs/,
      ],
      [`${SECRET} https://x.example/in peer.created`, /the first field holds a secret/],
      [`WHSEC_${body} https://x.example/in`, /the first field holds a secret/],
      [`https://x.example/in?key=${SECRET} ${SECRET}`, /the URL holds a secret \(whsec_\.\.\.\)/],
      [`https://x.example/${SECRET} ${SECRET}`, /the URL holds a secret/],
      [`https://x.example/in peer.created ${SECRET}`, /the third field holds a secret/],
      ['https://x.example/ plainsecret', /whsec_<base64>/],
      ['https://x.example/ whsec_c2hvcnQ=', /holds 5 bytes; it needs at least 16/],
      [`https://x.example/ whsec_${body.slice(0, 10)}!!${body}`, /after whsec_ is not base64/],
      [`https://x.example/ ${SECRET} peer.exploded`, /unknown event type "peer.exploded"/],
      [`https://x.example/ ${SECRET} ${body}`, /line 2: a type that is not an event type/],
      [`https://x.example/ ${SECRET} peer.created extra`, /expected "<url> <secret>/],
      ['https://x.example/', /expected "<url> <secret>/],
    ];
    for (const [line, message] of cases) {
      let error: unknown;
      try {
        parseWebhooksText(`# c\n${line}\n`, 'f');
      } catch (e) {
        error = e;
      }
      expect(error, line).to.be.instanceOf(WebhooksFileError);
      const text = (error as Error).message;
      expect(text, line).to.match(message);
      expect(text, line).to.include('f line 2');
      expect(text, line).to.not.include(body.slice(0, 12));
      expect(text, line).to.not.include('pa55word');
      expect(text, line).to.not.include('\n');
    }
  });

  it('says why a file cannot be read', () => {
    const missing = () => {
      throw Object.assign(new Error('nope'), { code: 'ENOENT' });
    };
    expect(() => loadWebhooksFile('/nope', missing)).to.throw(
      /--webhooks-file \/nope cannot be read \(ENOENT\)/,
    );
  });
});
