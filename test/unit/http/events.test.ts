import { expect } from 'chai';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Ajv2020 from 'ajv/dist/2020';
import { Events } from '../../../src/events';
import { TokenStore } from '../../../src/http';
import { createApp } from '../../../src/http/app';
import { eventPayload, eventStreamHandler } from '../../../src/http/events';
import { PeerService, type PeerSnapshot } from '../../../src/peers';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

const READ = 'r'.repeat(32);
const ADMIN = 'a'.repeat(32);

interface Client {
  status: number;
  headers: http.IncomingHttpHeaders;
  text(): string;
  /** Resolves once the stream holds `pattern`. */
  until(pattern: RegExp): Promise<string>;
  close(): void;
}

async function setup() {
  const kernel = FakeKernel.withInterface();
  const log = captureLog();
  const events: Events = new Events({
    interfaceName: 'wg0',
    historySize: 100,
    snapshot: (): Promise<PeerSnapshot> => service.snapshot(),
    listMaxAgeMs: 1000,
    logger: log.logger,
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
  const clients: http.ClientRequest[] = [];
  const open = (path: string, headers: Record<string, string> = {}): Promise<Client> =>
    new Promise((resolve, reject) => {
      const req = http.get({ host: '127.0.0.1', port, path, headers }, (res) => {
        let text = '';
        const waiters: Array<() => void> = [];
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
          for (const w of waiters.splice(0)) w();
        });
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          text: () => text,
          until: (pattern) =>
            new Promise((done) => {
              const check = () => (pattern.test(text) ? done(text) : waiters.push(check));
              check();
            }),
          close: () => req.destroy(),
        });
      });
      req.on('error', reject);
      clients.push(req);
    });
  const call = (method: string, path: string, body?: unknown) =>
    new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const req = http.request(
        {
          host: '127.0.0.1',
          port,
          path,
          method,
          headers: {
            authorization: `Bearer ${ADMIN}`,
            ...(data ? { 'content-type': 'application/json' } : {}),
          },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              body: JSON.parse(text) as Record<string, unknown>,
            }),
          );
        },
      );
      req.on('error', reject);
      req.end(data);
    });
  const close = async () => {
    for (const c of clients) c.destroy();
    events.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return { events, open, call, close, log };
}

const auth = { authorization: `Bearer ${READ}` };

function dataOf(text: string): Array<Record<string, unknown>> {
  return [...text.matchAll(/^data: (.*)$/gm)].map(
    (m) => JSON.parse(m[1]!) as Record<string, unknown>,
  );
}

describe('GET /api/events (Server-Sent Events over HTTP)', () => {
  let env: Awaited<ReturnType<typeof setup>>;
  beforeEach(async () => {
    env = await setup();
  });
  afterEach(() => env.close());

  it('needs a read token', async () => {
    const res = await env.open('/api/events');
    expect(res.status).to.equal(401);
  });

  it('streams text/event-stream to a read token: the changes made through the API as they are made', async () => {
    const stream = await env.open('/api/events', auth);
    expect(stream.status).to.equal(200);
    expect(stream.headers['content-type']).to.equal('text/event-stream; charset=utf-8');
    expect(stream.headers['cache-control']).to.equal('no-store');
    const created = await env.call('POST', '/api/peer');
    const key = (created.body.peer as { publicKey: string }).publicKey;
    await env.call('PATCH', `/api/peer/${encodeURIComponent(key)}/data-cap`, { quotaBytes: 5000 });
    const text = await stream.until(/event: peer\.cap_changed/);
    expect([...text.matchAll(/^event: (.*)$/gm)].map((m) => m[1])).to.deep.equal([
      'peer.created',
      'peer.cap_changed',
    ]);
    const [c, cap] = dataOf(text);
    expect(c).to.include({
      type: 'peer.created',
      public_key: key,
      interface: 'wg0',
      origin: 'api',
    });
    expect(cap).to.include({ type: 'peer.cap_changed', quota_bytes: 5000 });
  });

  it('every payload matches the schema the OpenAPI document publishes for it', async () => {
    const stream = await env.open('/api/events', auth);
    const created = await env.call('POST', '/api/peer');
    const key = encodeURIComponent((created.body.peer as { publicKey: string }).publicKey);
    await env.call('PATCH', `/api/peer/${key}/speed-limit`, { bytesPerSecond: 5000 });
    await env.call('DELETE', `/api/peer/${key}/speed-limit`);
    await env.call('DELETE', `/api/peer/${key}`);
    env.events.capExhausted({
      address: '10.8.0.9',
      publicKey: null,
      quotaBytes: 10,
      usedBytes: 10,
    });
    env.events.hub.publish({ type: 'interface.lost', details: { reason: 'gone' } });
    const text = await stream.until(/event: interface\.lost/);
    // Formats are not checked here (`at` is compared with Date.parse below).
    const ajv = new Ajv2020({ strict: false, validateFormats: false });
    const validate = ajv.compile(eventPayload);
    const payloads = dataOf(text);
    expect(payloads).to.have.length(6);
    for (const p of payloads) {
      expect(validate(p), JSON.stringify([p, validate.errors])).to.equal(true);
      expect(new Date(Date.parse(String(p.at))).toISOString()).to.equal(p.at);
    }
  });

  it('?types= filters; an unknown type is 400 naming the types', async () => {
    const bad = await env.open('/api/events?types=peer.created,peer.nope', auth);
    expect(bad.status).to.equal(400);
    await bad.until(/VALIDATION_FAILED/);
    expect(bad.text()).to.include('peer.nope').and.include('peer.cap_exhausted');
    const stream = await env.open('/api/events?types=peer.deleted', auth);
    const created = await env.call('POST', '/api/peer');
    await env.call(
      'DELETE',
      `/api/peer/${encodeURIComponent((created.body.peer as { publicKey: string }).publicKey)}`,
    );
    const text = await stream.until(/event: peer\.deleted/);
    expect(text).to.not.include('peer.created');
  });

  it('a reconnect with Last-Event-ID misses none; an unknown id gets one reset', async () => {
    const first = await env.open('/api/events', auth);
    await env.call('POST', '/api/peer');
    const text = await first.until(/event: peer\.created/);
    const lastId = /^id: (.*)$/m.exec(text)![1]!;
    first.close();
    await env.call('POST', '/api/peer');
    await env.call('POST', '/api/peer');
    const again = await env.open('/api/events', { ...auth, 'last-event-id': lastId });
    const resumed = await again.until(/(event: peer\.created[\s\S]*){2}/);
    const ids = [...resumed.matchAll(/^id: (.*)$/gm)].map((m) => m[1]);
    const run = lastId.split('.')[0];
    expect(ids).to.deep.equal([`${run}.2`, `${run}.3`]);
    const other = await env.open('/api/events', { ...auth, 'last-event-id': 'zzz.1' });
    const reset = await other.until(/event: reset/);
    expect(reset).to.match(new RegExp(`id: ${run}\\.3\\nevent: reset\\n`));
  });
});
