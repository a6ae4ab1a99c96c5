import { expect } from 'chai';
import { createHash } from 'node:crypto';
import type { Test } from 'supertest';
import { TokenStore } from '../../../src/http';
import { encoded, expectError, key, setup } from './helpers';

const ADMIN = 'admin-token-0123456789abcdef';
const ADMIN2 = 'admin-token-second-9876543210';
const READ = 'read-token-0123456789abcdef';

/** Every route that changes something (SPEC §4 and the DESIGN §3 additions). */
type Http = ReturnType<typeof setup>['http'];

function writes(peer: string): Array<[string, (http: Http) => Test]> {
  return [
    ['POST /api/peer', (http) => http.post('/api/peer')],
    [
      'PATCH speed-limit',
      (http) => http.patch(`${peer}/speed-limit`).send({ bytesPerSecond: 1000 }),
    ],
    ['DELETE speed-limit', (http) => http.delete(`${peer}/speed-limit`)],
    ['PATCH data-cap', (http) => http.patch(`${peer}/data-cap`).send({ quotaBytes: 1000 })],
    ['DELETE data-cap', (http) => http.delete(`${peer}/data-cap`)],
    ['DELETE peer', (http) => http.delete(peer)],
  ];
}

// DESIGN §3: admin tokens may do everything; read tokens may only list peers and read metrics.
describe('http token scopes', () => {
  it('lets a read token list peers (200) and read the config endpoint answer (404)', async () => {
    const { kernel, http } = setup({ tokens: { admin: [ADMIN], read: [READ] } });
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const list = await http.get('/api/peers').set('Authorization', `Bearer ${READ}`);
    expect(list.status).to.equal(200);
    expect(list.body.total_count).to.equal(1);
    const config = await http
      .get(`/api/peer/${encoded(key(1))}/config`)
      .set('Authorization', `Bearer ${READ}`);
    expectError(config, 404, 'CONFIG_NOT_STORED');
  });

  it('answers 403 FORBIDDEN_READ_ONLY to a read token on every write, touching nothing', async () => {
    const { kernel, http } = setup({ tokens: { admin: [ADMIN], read: [READ] } });
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const callsBefore = kernel.calls.length;
    for (const [what, send] of writes(`/api/peer/${encoded(key(1))}`)) {
      const res = await send(http).set('Authorization', `Bearer ${READ}`);
      expectError(res, 403, 'FORBIDDEN_READ_ONLY');
      expect(res.body.error, what).to.match(/^This token may only read: /);
      expect(res.headers['www-authenticate'], what).to.contain('insufficient_scope');
    }
    expect(kernel.calls.slice(callsBefore)).to.deep.equal([]);
    expect(kernel.peers()).to.have.length(1);
  });

  it('lets every admin token of the file do every write', async () => {
    const { kernel, http } = setup({ tokens: { admin: [ADMIN, ADMIN2], read: [READ] } });
    for (const token of [ADMIN, ADMIN2]) {
      const created = await http.post('/api/peer').set('Authorization', `Bearer ${token}`);
      expect(created.status).to.equal(201);
      const peer = `/api/peer/${encoded(created.body.peer.publicKey)}`;
      for (const [what, send] of writes(peer).slice(1)) {
        const res = await send(http).set('Authorization', `Bearer ${token}`);
        expect(res.status, `${what}: ${JSON.stringify(res.body)}`).to.equal(200);
      }
    }
    expect(kernel.peers()).to.have.length(0);
  });

  it('keeps 401 for a missing or unknown token, before the scope is looked at', async () => {
    const { http } = setup({ tokens: { admin: [ADMIN], read: [READ] } });
    expectError(await http.post('/api/peer'), 401, 'AUTH_REQUIRED');
    expectError(
      await http.post('/api/peer').set('Authorization', `Bearer ${READ}x`),
      401,
      'AUTH_INVALID',
    );
    expectError(
      await http.get('/api/peers').set('Authorization', `Bearer ${ADMIN.slice(0, -1)}`),
      401,
      'AUTH_INVALID',
    );
  });

  it('with read tokens alone, lists for them and refuses every change', async () => {
    const { http } = setup({ tokens: { admin: [], read: [READ] } });
    expect((await http.get('/api/peers').set('Authorization', `Bearer ${READ}`)).status).to.equal(
      200,
    );
    expectError(
      await http.post('/api/peer').set('Authorization', `Bearer ${READ}`),
      403,
      'FORBIDDEN_READ_ONLY',
    );
    expectError(await http.post('/api/peer'), 401, 'AUTH_REQUIRED');
  });

  it('serves the new tokens, and refuses the old, once the store is replaced', async () => {
    const { http, tokens } = setup({ tokens: { admin: [ADMIN], read: [READ] } });
    tokens!.replace({ admin: [ADMIN2], read: [] });
    expectError(
      await http.get('/api/peers').set('Authorization', `Bearer ${ADMIN}`),
      401,
      'AUTH_INVALID',
    );
    expectError(
      await http.get('/api/peers').set('Authorization', `Bearer ${READ}`),
      401,
      'AUTH_INVALID',
    );
    expect((await http.post('/api/peer').set('Authorization', `Bearer ${ADMIN2}`)).status).to.equal(
      201,
    );
  });
});

describe('TokenStore', () => {
  it('gives each token its scope, admin winning, and null for anything else', () => {
    const store = new TokenStore({ admin: [ADMIN], read: [READ, ADMIN] });
    expect(store.scopeOf(ADMIN)).to.equal('admin');
    expect(store.scopeOf(READ)).to.equal('read');
    for (const other of ['', READ.toUpperCase(), `${READ} `, READ.slice(1), `${ADMIN}${ADMIN}`]) {
      expect(store.scopeOf(other), other).to.equal(null);
    }
  });

  it('keeps no token in clear, only their SHA-256 digests and names for the log', () => {
    const store = new TokenStore({ admin: [ADMIN], read: [{ name: 'grafana', token: READ }] });
    const held = Object.values(store as unknown as Record<string, unknown>).flat();
    const sha256 = (text: string): Buffer => createHash('sha256').update(text).digest();
    const fingerprint = `sha256:${sha256(ADMIN).toString('hex').slice(0, 8)}`;
    expect(held).to.deep.equal([
      { digest: sha256(ADMIN), name: fingerprint },
      { digest: sha256(READ), name: 'grafana' },
    ]);
    expect(JSON.stringify(held)).to.not.contain(ADMIN).and.not.contain(READ);
    expect(store.counts()).to.deep.equal({ admin: 1, read: 1 });
  });

  it('names a token listed in both scopes by its admin entry', () => {
    const store = new TokenStore({
      admin: [{ name: 'ops', token: ADMIN }],
      read: [{ name: 'grafana', token: ADMIN }, READ],
    });
    expect(store.identify(ADMIN)).to.deep.equal({ scope: 'admin', name: 'ops' });
    expect(store.identify('not-a-token-of-this-store')).to.equal(null);
  });
});
