import { expect } from 'chai';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { encoded, expectError, key, setup } from './helpers';

const TOKEN = 'a-long-random-token-0123456789';

// DESIGN §3: with a token configured, every /api request needs Authorization: Bearer <token>.
describe('http bearer token', () => {
  it('answers 401 AUTH_REQUIRED without the header, with a Bearer challenge', async () => {
    const res = await setup({ token: TOKEN }).http.get('/api/peers');
    expectError(res, 401, 'AUTH_REQUIRED');
    expect(res.headers['www-authenticate']).to.match(/^Bearer /);
  });

  it('answers 401 AUTH_INVALID for a wrong token, of the same or another length', async () => {
    const { http } = setup({ token: TOKEN });
    for (const wrong of [TOKEN.replace(/.$/, 'X'), 'short', `${TOKEN}-and-more`]) {
      const res = await http.get('/api/peers').set('Authorization', `Bearer ${wrong}`);
      expectError(res, 401, 'AUTH_INVALID');
    }
  });

  it('answers 401 for another scheme or an empty bearer', async () => {
    const { http } = setup({ token: TOKEN });
    const basic = Buffer.from(`user:${TOKEN}`).toString('base64');
    expectError(
      await http.get('/api/peers').set('Authorization', `Basic ${basic}`),
      401,
      'AUTH_REQUIRED',
    );
    expectError(await http.get('/api/peers').set('Authorization', 'Bearer '), 401, 'AUTH_REQUIRED');
    expectError(await http.get('/api/peers').set('Authorization', TOKEN), 401, 'AUTH_REQUIRED');
  });

  it('lets the right token through on every endpoint (scheme case-insensitive)', async () => {
    const { kernel, http } = setup({ token: TOKEN });
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const auth = { Authorization: `Bearer ${TOKEN}` };
    expect((await http.get('/api/peers').set(auth)).status).to.equal(200);
    expect((await http.get('/api/peers').set('Authorization', `bearer ${TOKEN}`)).status).to.equal(
      200,
    );
    expect((await http.post('/api/peer').set(auth)).status).to.equal(201);
    const peer = `/api/peer/${encoded(key(1))}`;
    expect(
      (await http.patch(`${peer}/speed-limit`).set(auth).send({ bytesPerSecond: 1000 })).status,
    ).to.equal(200);
    expect(
      (await http.patch(`${peer}/data-cap`).set(auth).send({ quotaBytes: 1000 })).status,
    ).to.equal(200);
    expect((await http.delete(`${peer}/speed-limit`).set(auth)).status).to.equal(200);
    expect((await http.delete(`${peer}/data-cap`).set(auth)).status).to.equal(200);
    expect((await http.get(`${peer}/config`).set(auth)).status).to.equal(404);
    expect((await http.delete(peer).set(auth)).status).to.equal(200);
  });

  it('checks the token before anything else: unknown routes, bad bodies, changes', async () => {
    const { kernel, http } = setup({ token: TOKEN });
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    expectError(await http.get('/api/does-not-exist'), 401, 'AUTH_REQUIRED');
    expectError(
      await http.post('/api/peer').send({ padding: 'x'.repeat(10_000) }),
      401,
      'AUTH_REQUIRED',
    );
    expectError(
      await http.post('/api/peer').set('Content-Type', 'text/plain').send('x'),
      401,
      'AUTH_REQUIRED',
    );
    expectError(await http.delete(`/api/peer/${encoded(key(1))}`), 401, 'AUTH_REQUIRED');
    expect(kernel.peers()).to.have.length(1);
    expect(kernel.count('addPeers')).to.equal(0);
  });

  it('needs no token when none is configured', async () => {
    expect((await setup().http.get('/api/peers')).status).to.equal(200);
  });
});

// DESIGN §4: one JSON log line per request and per kernel change; the private key never logged.
describe('http logging', () => {
  it('writes one JSON line per request with method, path without query, status and ms', async () => {
    const { http, log } = setup();
    await http.get('/api/peers?status=ALIVE');
    await http.get('/api/nope?secret=hunter2');
    const requests = log.lines().filter((l) => l['msg'] === 'request');
    expect(requests).to.have.length(2);
    expect(requests[0]).to.include({ method: 'GET', path: '/api/peers', status: 200 });
    expect(requests[0]!['ms']).to.be.a('number');
    expect(requests[1]).to.include({ method: 'GET', path: '/api/nope', status: 404 });
    expect(log.text()).to.not.contain('status=ALIVE');
    expect(log.text()).to.not.contain('hunter2');
  });

  it('never writes the private key of a created peer, nor the token, to the log', async () => {
    const { http, log } = setup({ token: TOKEN });
    const res = await http.post('/api/peer').set('Authorization', `Bearer ${TOKEN}`);
    expect(res.status).to.equal(201);
    const privateKey: string = res.body.peer.privateKey;
    expect(privateKey).to.have.length(44);
    const text = log.text();
    expect(text).to.not.contain(privateKey);
    expect(text).to.not.contain(privateKey.slice(0, 20));
    expect(text).to.not.contain(TOKEN);
    // The change itself is logged, with the public key and the address.
    const created = log.lines().find((l) => l['event'] === 'peer_created');
    expect(created).to.include({ publicKey: res.body.peer.publicKey, ip: res.body.peer.ip });
  });

  it('logs one line per kernel change of the API', async () => {
    const { http, log } = setup();
    const created = await http.post('/api/peer');
    const peer = `/api/peer/${encoded(created.body.peer.publicKey)}`;
    await http.patch(`${peer}/speed-limit`).send({ bytesPerSecond: 1000 });
    await http.patch(`${peer}/data-cap`).send({ quotaBytes: 1000 });
    await http.delete(peer);
    const events = log.lines().flatMap((l) => (typeof l['event'] === 'string' ? [l['event']] : []));
    expect(events).to.deep.equal([
      'peer_created',
      'speed_limit_set',
      'data_cap_set',
      'peer_deleted',
    ]);
  });
});

// DESIGN §2: http never imports kernel or netlink; peers never imports http.
describe('layers import only downwards', () => {
  const root = path.resolve(__dirname, '../../../../src');
  function importsOf(dir: string): Array<{ file: string; from: string }> {
    return readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts'))
      .flatMap((f) => {
        const text = readFileSync(path.join(root, dir, f), 'utf8');
        return [...text.matchAll(/(?:from|import\()\s*'([^']+)'/g)].map((m) => ({
          file: `${dir}/${f}`,
          from: m[1]!,
        }));
      });
  }

  it('finds the sources it checks', () => {
    expect(importsOf('http').length).to.be.greaterThan(5);
    expect(importsOf('peers').length).to.be.greaterThan(5);
  });

  it('src/http imports neither src/kernel nor src/netlink', () => {
    const bad = importsOf('http').filter((i) => /(^|\/)(kernel|netlink)(\/|$)/.test(i.from));
    expect(bad).to.deep.equal([]);
  });

  it('src/peers does not import src/http', () => {
    const bad = importsOf('peers').filter((i) => /(^|\/)http(\/|$)/.test(i.from));
    expect(bad).to.deep.equal([]);
  });
});
