/**
 * Issue 31: peer names. Set at create or by PATCH .../name, renamed, cleared (null), listed as
 * `name` (null when none), filtered by `GET /api/peers?name=` (exact); bad names are 400 with
 * `details`, an unknown peer 404.
 */
import { expect } from 'chai';
import request from 'supertest';
import { encoded, expectError, key, setup } from './helpers';

type Listed = Array<Record<string, unknown>>;

describe('http peer names (issue 31)', () => {
  it('lists the name given at create, and null for a peer without one', async () => {
    const { http } = setup();
    const named = await http.post('/api/peer').send({ name: 'Ana – laptop ☂' });
    expect(named.status).to.equal(201);
    await http.post('/api/peer');
    const peers = (await http.get('/api/peers')).body.peers as Listed;
    expect(peers.map((p) => p['name'])).to.deep.equal(['Ana – laptop ☂', null]);
  });

  it('renames and clears a name with PATCH .../name, the list following at once', async () => {
    const { http } = setup();
    const created = await http.post('/api/peer').send({ name: 'first' });
    const path = `/api/peer/${encoded(created.body.peer.publicKey)}/name`;
    const renamed = await http.patch(path).send({ name: 'second' });
    expect(renamed.status).to.equal(200);
    expect(renamed.body.message).to.contain('"second"');
    expect(((await http.get('/api/peers')).body.peers as Listed)[0]!['name']).to.equal('second');
    const cleared = await http.patch(path).send({ name: null });
    expect(cleared.status).to.equal(200);
    expect(((await http.get('/api/peers')).body.peers as Listed)[0]!['name']).to.equal(null);
    const plain = await http.post('/api/peer');
    const given = await http
      .patch(`/api/peer/${encoded(plain.body.peer.publicKey)}/name`)
      .send({ name: 'later' });
    expect(given.status).to.equal(200);
  });

  it('lists only the peers of exactly that name with ?name=, with status and fields too', async () => {
    const { app, http } = setup();
    const a = await http.post('/api/peer').send({ name: 'shop' });
    await http.post('/api/peer').send({ name: 'Shop' });
    const b = await http.post('/api/peer').send({ name: 'shop' });
    await http.post('/api/peer');
    const res = await http.get('/api/peers?name=shop');
    expect(res.status).to.equal(200);
    expect(res.body.total_count).to.equal(2);
    expect((res.body.peers as Listed).map((p) => p['public_key'])).to.deep.equal([
      a.body.peer.publicKey,
      b.body.peer.publicKey,
    ]);
    expect(res.body.filter).to.equal(null);
    const none = await http.get('/api/peers?name=nobody');
    expect(none.body).to.deep.equal({ success: true, peers: [], total_count: 0, filter: null });
    // No handshake yet: neither ALIVE nor DEAD.
    const alive = await http.get('/api/peers?name=shop&status=ALIVE');
    expect(alive.body.total_count).to.equal(0);
    expect(alive.body.filter).to.equal('ALIVE');
    // A partial response is not the full peer the recorded responses are checked against.
    const partial = await request(app).get('/api/peers?name=shop&fields=name');
    expect(partial.body.peers).to.deep.equal([{ name: 'shop' }, { name: 'shop' }]);
  });

  it('answers 400 with details for a name that is empty, too long or holds a control character', async () => {
    const { kernel, http } = setup();
    for (const name of ['', 'x'.repeat(65), 'bell\u0007', 'line\nbreak', 'c1\u0085', 42]) {
      const res = await http.post('/api/peer').send({ name });
      expectError(res, 400, 'VALIDATION_FAILED');
      expect(res.body.details[0].field, JSON.stringify(name)).to.equal('/name');
    }
    expect(kernel.peers()).to.have.length(0);
    const created = await http.post('/api/peer').send({ name: 'ok' });
    const path = `/api/peer/${encoded(created.body.peer.publicKey)}/name`;
    expectError(await http.patch(path).send({ name: '\t' }), 400, 'VALIDATION_FAILED');
    expectError(await http.patch(path).send({}), 400, 'VALIDATION_FAILED');
    expectError(await http.patch(path).send({ name: 'a', other: 1 }), 400, 'VALIDATION_FAILED');
    // The kernel keeps a name in 256 bytes of element userdata with its owner's key: 219 bytes of
    // UTF-8 at most (src/kernel/names), so 54 four-byte characters pass and 55 do not.
    expect((await http.post('/api/peer').send({ name: '😀'.repeat(54) })).status).to.equal(201);
    const long = await http.post('/api/peer').send({ name: '😀'.repeat(55) });
    expectError(long, 400, 'VALIDATION_FAILED');
    expect(long.body.details).to.deep.equal([
      { field: '/name', message: 'must be at most 219 bytes in UTF-8' },
    ]);
    expectError(await http.patch(path).send({ name: '😀'.repeat(55) }), 400, 'VALIDATION_FAILED');
    // 64 three-byte characters (192 bytes) pass.
    expect((await http.patch(path).send({ name: '中'.repeat(64) })).status).to.equal(200);
  });

  it('answers 404 for a peer not on the interface, and forgets the name of a deleted peer', async () => {
    const { http } = setup();
    const missing = await http.patch(`/api/peer/${encoded(key(9))}/name`).send({ name: 'x' });
    expectError(missing, 404, 'PEER_NOT_FOUND');
    const created = await http.post('/api/peer').send({ name: 'gone soon' });
    await http.delete(`/api/peer/${encoded(created.body.peer.publicKey)}`);
    expect((await http.get('/api/peers?name=gone%20soon')).body.total_count).to.equal(0);
  });

  it('keeps names in the kernel, so a daemon started afresh over it without a state dir lists them', async () => {
    const { http, kernel } = setup();
    const ana = await http.post('/api/peer').send({ name: 'Ana' });
    const shop = await http.post('/api/peer').send({ name: 'old shop' });
    await http.patch(`/api/peer/${encoded(shop.body.peer.publicKey)}/name`).send({ name: 'shop' });
    await http
      .post('/api/peer')
      .send({ name: 'gone soon' })
      .then((gone) => http.delete(`/api/peer/${encoded(gone.body.peer.publicKey)}`));
    // The kernel's names set holds each name with its owner; the deleted peer's went with it.
    expect([...kernel.namesSet.get('wg0')!.values()]).to.deep.equal([
      { publicKey: ana.body.peer.publicKey, name: 'Ana' },
      { publicKey: shop.body.peer.publicKey, name: 'shop' },
    ]);
    const restarted = setup({ kernel }).http;
    const peers = (await restarted.get('/api/peers')).body.peers as Listed;
    expect(peers.map((p) => [p['public_key'], p['name']])).to.deep.equal([
      [ana.body.peer.publicKey, 'Ana'],
      [shop.body.peer.publicKey, 'shop'],
    ]);
    const filtered = (await restarted.get('/api/peers?name=shop')).body.peers as Listed;
    expect(filtered.map((p) => p['public_key'])).to.deep.equal([shop.body.peer.publicKey]);
  });
});
