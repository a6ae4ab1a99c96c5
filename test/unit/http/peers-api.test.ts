import { expect } from 'chai';
import nacl from 'tweetnacl';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { FacilityUnavailableError } from '../../../src/kernel/errors';
import { FakeKernel, kernelFailure } from '../support/fake-kernel';
import { NOW, SLASHY_KEY, encoded, expectError, key, setup, urlSafe } from './helpers';
import { PeerService } from '../../../src/peers';
import { captureLog } from '../support/log-capture';
import { NO_PERIOD } from './helpers';
import { withoutReadAt } from '../../support/peer-list';
import { peersWithoutReadAt } from '../../support/peer-list';

describe('http GET /api/peers (SPEC §4.1)', () => {
  it('answers an empty list with success, total_count 0 and filter null', async () => {
    const res = await setup().http.get('/api/peers');
    expect(res.status).to.equal(200);
    expect(res.headers['content-type']).to.match(/^application\/json/);
    expect(res.body).to.deep.equal({ success: true, peers: [], total_count: 0, filter: null });
  });

  it('gives each peer the five SPEC §2.1 fields with their types, plus the added fields', async () => {
    const { kernel, http } = setup();
    kernel.putPeer(key(1), ['10.8.0.2/32'], {
      lastHandshake: new Date(NOW - 125_000),
      endpoint: '198.51.100.7:40000',
      rxBytes: 100,
      txBytes: 200,
    });
    const res = await http.get('/api/peers');
    expect(res.status).to.equal(200);
    const [peer] = res.body.peers;
    expect(peer).to.deep.equal({
      public_key: key(1),
      ip_address: '10.8.0.2',
      ipv6_address: null,
      last_handshake: '2026-03-01T11:57:55.000Z',
      minutes_since_handshake: 2,
      status: 'ALIVE',
      allowed_ips: ['10.8.0.2/32'],
      endpoint: '198.51.100.7:40000',
      rx_bytes: 100,
      tx_bytes: 200,
      persistent_keepalive_seconds: 0,
      preshared_key: false,
      speed_limit_bytes_per_second: null,
      speed_limit_holds: null,
      data_cap: null,
      suspended: false,
      name: null,
      expires_at: null,
      expired: false,
    });
    expect(Number.isInteger(peer.minutes_since_handshake)).to.equal(true);
    expect(peer.ip_address).to.match(/^\d+\.\d+\.\d+\.\d+$/);
  });

  it('gives null last_handshake and minutes_since_handshake for a peer without a handshake', async () => {
    const { kernel, http } = setup();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const res = await http.get('/api/peers');
    expect(res.body.peers[0]).to.include({
      status: 'No handshake yet',
      last_handshake: null,
      minutes_since_handshake: null,
    });
  });

  it('is ALIVE at exactly 150 s and DEAD at 151 s', async () => {
    const { kernel, http } = setup();
    kernel.putPeer(key(1), ['10.8.0.2/32'], { lastHandshake: new Date(NOW - 150_000) });
    kernel.putPeer(key(2), ['10.8.0.3/32'], { lastHandshake: new Date(NOW - 151_000) });
    const res = await http.get('/api/peers');
    expect(res.body.peers.map((p: { status: string }) => p.status)).to.deep.equal([
      'ALIVE',
      'DEAD',
    ]);
  });

  describe('status filter', () => {
    function threePeers() {
      const s = setup();
      s.kernel.putPeer(key(1), ['10.8.0.2/32'], { lastHandshake: new Date(NOW - 5_000) });
      s.kernel.putPeer(key(2), ['10.8.0.3/32'], { lastHandshake: new Date(NOW - 500_000) });
      s.kernel.putPeer(key(3), ['10.8.0.4/32'], { lastHandshake: new Date(NOW - 900_000) });
      s.kernel.putPeer(key(4), ['10.8.0.5/32']);
      return s;
    }

    it('echoes ALIVE and counts only the returned peers', async () => {
      const res = await threePeers().http.get('/api/peers?status=ALIVE');
      expect(res.status).to.equal(200);
      expect(res.body.filter).to.equal('ALIVE');
      expect(res.body.total_count).to.equal(1);
      expect(res.body.peers.map((p: { public_key: string }) => p.public_key)).to.deep.equal([
        key(1),
      ]);
    });

    it('echoes DEAD and counts only the returned peers', async () => {
      const res = await threePeers().http.get('/api/peers').query({ status: 'DEAD' });
      expect(res.body.filter).to.equal('DEAD');
      expect(res.body.total_count).to.equal(2);
      expect(res.body.peers).to.have.length(2);
    });

    it('returns every peer, counted, with filter null when absent', async () => {
      const res = await threePeers().http.get('/api/peers');
      expect(res.body.filter).to.equal(null);
      expect(res.body.total_count).to.equal(4);
    });

    const bad = [
      'status=alive',
      'status=',
      'status=No%20handshake%20yet',
      'status=Peer%20not%20found%20in%20VPN',
      'status=ALIVE&status=DEAD',
      'limit=10',
    ];
    for (const query of bad) {
      it(`rejects ?${query} with 400`, async () => {
        const res = await setup().http.get(`/api/peers?${query}`);
        expectError(res, 400, 'VALIDATION_FAILED');
        expect(res.body.details).to.be.an('array').that.is.not.empty;
      });
    }
  });

  it('answers 503 INTERFACE_MISSING naming the interface when it is gone', async () => {
    const res = await setup({ kernel: new FakeKernel() }).http.get('/api/peers');
    expectError(res, 503, 'INTERFACE_MISSING');
    expect(res.body.error).to.contain('wg0');
  });

  it("answers 500 KERNEL_ERROR with the kernel's extended-ACK text", async () => {
    const { kernel, http } = setup();
    kernel.fail(
      'getDevice',
      kernelFailure('EMSGSIZE', 'WG_CMD_GET_DEVICE wg0', 'message too big for the buffer'),
    );
    const res = await http.get('/api/peers');
    expectError(res, 500, 'KERNEL_ERROR');
    expect(res.body.error).to.contain('message too big for the buffer');
  });

  it('answers 500 INTERNAL_ERROR without stack or message for a bug', async () => {
    const { kernel, http, log } = setup();
    kernel.fail(
      'getDevice',
      new TypeError("Cannot read properties of undefined (reading 'peers')"),
    );
    const res = await http.get('/api/peers');
    expectError(res, 500, 'INTERNAL_ERROR');
    expect(res.text).to.not.contain('Cannot read properties');
    // The log keeps what the client does not get.
    expect(log.text()).to.contain('Cannot read properties');
  });
});

describe('http POST /api/peer (SPEC §4.2)', () => {
  it('answers 201 with exactly the SPEC §2.2 fields plus config, uncached', async () => {
    const { kernel, http } = setup();
    const res = await http.post('/api/peer');
    expect(res.status).to.equal(201);
    expect(res.headers['cache-control']).to.equal('no-store');
    expect(Object.keys(res.body).sort()).to.deep.equal(['config', 'peer', 'server', 'success']);
    expect(Object.keys(res.body.peer).sort()).to.deep.equal(['ip', 'privateKey', 'publicKey']);
    expect(Object.keys(res.body.server).sort()).to.deep.equal(['endpoint', 'publicKey']);
    expect(res.body.success).to.equal(true);
    expect(res.body.peer.ip).to.equal('10.8.0.2');
    expect(res.body.server.publicKey).to.equal(kernel.serverPublicKey());
    expect(res.body.server.endpoint).to.equal('vpn.example.net:51820');
    expect(res.body.server.endpoint).to.match(/^[^:]+:\d+$/);
  });

  it('returns a private key whose X25519 public key is peer.publicKey, and that peer is in the kernel', async () => {
    const { kernel, http } = setup();
    const res = await http.post('/api/peer');
    const derived = Buffer.from(
      nacl.scalarMult.base(Buffer.from(res.body.peer.privateKey, 'base64')),
    );
    expect(derived.toString('base64')).to.equal(res.body.peer.publicKey);
    const peer = kernel.peers().find((p) => p.publicKey === res.body.peer.publicKey);
    expect(peer?.allowedIps).to.deep.equal([{ family: 4, address: res.body.peer.ip, cidr: 32 }]);
  });

  it('adds a wg-quick config built from the same values', async () => {
    const res = await setup().http.post('/api/peer');
    const { config, peer, server } = res.body;
    expect(config).to.contain('[Interface]').and.contain('[Peer]');
    expect(config).to.contain(`PrivateKey = ${peer.privateKey}`);
    expect(config).to.contain(`Address = ${peer.ip}/32`);
    expect(config).to.contain(`PublicKey = ${server.publicKey}`);
    expect(config).to.contain(`Endpoint = ${server.endpoint}`);
    expect(config).to.contain('AllowedIPs = 10.8.0.0/24');
    expect(config).to.contain('PersistentKeepalive = 25');
  });

  it("uses the host's primary IPv4 address when no endpoint host is configured", async () => {
    const kernel = FakeKernel.withInterface();
    kernel.primaryAddress = '192.0.2.9';
    const res = await setup({ kernel, endpointHost: null }).http.post('/api/peer');
    expect(res.body.server.endpoint).to.equal('192.0.2.9:51820');
  });

  it('answers 503 ENDPOINT_UNKNOWN when there is neither endpoint host nor default route', async () => {
    const kernel = FakeKernel.withInterface();
    kernel.primaryAddress = null;
    const res = await setup({ kernel, endpointHost: null }).http.post('/api/peer');
    expectError(res, 503, 'ENDPOINT_UNKNOWN');
    expect(res.body.error).to.contain('--endpoint-host');
  });

  it('accepts an empty JSON object as body', async () => {
    const res = await setup().http.post('/api/peer').send({});
    expect(res.status).to.equal(201);
  });

  it('rejects unknown body fields with 400 and details naming them', async () => {
    const res = await setup().http.post('/api/peer').send({ colour: 'blue' });
    expectError(res, 400, 'VALIDATION_FAILED');
    expect(res.body.details).to.deep.equal([{ field: '/colour', message: 'is not a known field' }]);
  });

  it('rejects a JSON array body with 400', async () => {
    const res = await setup()
      .http.post('/api/peer')
      .set('Content-Type', 'application/json')
      .send('[]');
    expectError(res, 400, 'VALIDATION_FAILED');
  });

  it('rejects broken JSON and JSON that is not an object or array with 400 INVALID_JSON', async () => {
    for (const text of ['{', '{"a":}', '"text"', 'null', '42']) {
      const res = await setup()
        .http.post('/api/peer')
        .set('Content-Type', 'application/json')
        .send(text);
      expectError(res, 400, 'INVALID_JSON');
    }
  });

  it('answers 415 for a body that is not JSON', async () => {
    const plain = await setup()
      .http.post('/api/peer')
      .set('Content-Type', 'text/plain')
      .send('hello');
    expectError(plain, 415, 'UNSUPPORTED_MEDIA_TYPE');
    const form = await setup().http.post('/api/peer').type('form').send({ a: '1' });
    expectError(form, 415, 'UNSUPPORTED_MEDIA_TYPE');
  });

  it('answers 415 for JSON in a charset other than UTF-8', async () => {
    const res = await setup()
      .http.post('/api/peer')
      .set('Content-Type', 'application/json; charset=latin1')
      .send('{}');
    expectError(res, 415, 'UNSUPPORTED_MEDIA_TYPE');
  });

  it('takes a gzip or deflate body, and answers 415 for br or zstd, creating nothing (as under Express 4)', async () => {
    const json = Buffer.from('{"name":"packed"}');
    // superagent would JSON-serialize a Buffer sent as application/json: send the bytes as they are.
    const asIs = (bytes: unknown): string => bytes as string;
    for (const [encoding, body] of [
      ['gzip', gzipSync(json)],
      ['deflate', deflateSync(json)],
    ] as const) {
      const res = await setup()
        .http.post('/api/peer')
        .set('Content-Type', 'application/json')
        .set('Content-Encoding', encoding)
        .serialize(asIs)
        .send(body);
      expect(res.status, encoding).to.equal(201);
    }
    // Bytes of no real encoding, and an empty body (the parser decodes that too): the answer
    // comes from the header, before any decoding.
    for (const [encoding, body] of [
      ['br', brotliCompressSync(json)],
      ['BR', Buffer.alloc(0)],
      ['zstd', Buffer.from('not zstd')],
    ] as const) {
      const { http, kernel } = setup();
      const res = await http
        .post('/api/peer')
        .set('Content-Type', 'application/json')
        .set('Content-Encoding', encoding)
        .serialize(asIs)
        .send(body);
      expectError(res, 415, 'UNSUPPORTED_MEDIA_TYPE');
      expect(res.body.error).to.contain('without content encoding');
      expect(kernel.peers()).to.deep.equal([]);
    }
  });

  it('answers 413 for a body over 4 KiB', async () => {
    const res = await setup()
      .http.post('/api/peer')
      .send({ padding: 'x'.repeat(5000) });
    expectError(res, 413, 'BODY_TOO_LARGE');
  });

  it('answers 409 ADDRESS_POOL_EXHAUSTED when the subnet is full', async () => {
    const kernel = FakeKernel.withInterface({ address: '10.8.0.1', prefixLength: 30 });
    const { http } = setup({ kernel });
    expect((await http.post('/api/peer')).status).to.equal(201);
    const res = await http.post('/api/peer');
    expectError(res, 409, 'ADDRESS_POOL_EXHAUSTED');
    expect(res.body.error).to.contain('10.8.0.0/30');
  });

  it('answers 503 INTERFACE_MISSING when the interface is gone', async () => {
    const res = await setup({ kernel: new FakeKernel() }).http.post('/api/peer');
    expectError(res, 503, 'INTERFACE_MISSING');
  });

  it('answers 503 FACILITY_MISSING when the WireGuard module is not loaded', async () => {
    const { kernel, http } = setup();
    kernel.fail(
      'getDevice',
      new FacilityUnavailableError(
        'WireGuard (generic netlink family "wireguard")',
        'load the module with `modprobe wireguard`',
      ),
    );
    const res = await http.post('/api/peer');
    expectError(res, 503, 'FACILITY_MISSING');
    expect(res.body.error).to.contain('modprobe wireguard');
  });

  it('gives 100 concurrent creates 100 distinct addresses that are all in the kernel', async () => {
    const { kernel, http } = setup();
    const responses = await Promise.all(Array.from({ length: 100 }, () => http.post('/api/peer')));
    expect(responses.every((r) => r.status === 201)).to.equal(true);
    const ips = responses.map((r) => r.body.peer.ip as string);
    expect(new Set(ips).size).to.equal(100);
    const held = new Set(kernel.peers().flatMap((p) => p.allowedIps.map((a) => a.address)));
    expect(ips.every((ip) => held.has(ip))).to.equal(true);
    expect(held.size).to.equal(100);
  });
});

describe('http dual-stack peers (issue 18)', () => {
  it('adds peer.ipv6 to the create response, keeping peer.ip the IPv4 address', async () => {
    const { kernel, http } = setup({ address6: 'fd42:42::1/64' });
    const res = await http.post('/api/peer');
    expect(res.status).to.equal(201);
    expect(Object.keys(res.body.peer).sort()).to.deep.equal([
      'ip',
      'ipv6',
      'privateKey',
      'publicKey',
    ]);
    expect(res.body.peer).to.include({ ip: '10.8.0.2', ipv6: 'fd42:42::2' });
    expect(res.body.config).to.contain('Address = 10.8.0.2/32, fd42:42::2/128');
    expect(res.body.config).to.contain('AllowedIPs = 0.0.0.0/0, ::/0');
    const peer = kernel.peers().find((p) => p.publicKey === res.body.peer.publicKey);
    expect(peer?.allowedIps).to.deep.equal([
      { family: 4, address: '10.8.0.2', cidr: 32 },
      { family: 6, address: 'fd42:42::2', cidr: 128 },
    ]);
  });

  it('lists ipv6_address for every peer, null for one without an IPv6 /128', async () => {
    const { kernel, http } = setup({ address6: 'fd42:42::1/64' });
    await http.post('/api/peer');
    kernel.putPeer(key(9), ['10.8.0.9/32']);
    const res = await http.get('/api/peers');
    expect(res.status).to.equal(200);
    expect(
      res.body.peers.map((p: Record<string, unknown>) => [p['ip_address'], p['ipv6_address']]),
    ).to.deep.equal([
      ['10.8.0.2', 'fd42:42::2'],
      ['10.8.0.9', null],
    ]);
  });

  it('answers 409 ADDRESS_POOL_EXHAUSTED when the IPv6 prefix is full', async () => {
    const { kernel, http } = setup({ address6: 'fd42::1/120' });
    for (let i = 2; i <= 0xff; i++) kernel.putPeer(key(i), [`fd42::${i.toString(16)}/128`]);
    const res = await http.post('/api/peer');
    expectError(res, 409, 'ADDRESS_POOL_EXHAUSTED');
    expect(res.body.error).to.contain('fd42::/120');
  });
});

describe('http DELETE /api/peer/<publicKey> (SPEC §4.3)', () => {
  async function deleted(path: string, stored = SLASHY_KEY) {
    const { kernel, http } = setup();
    kernel.putPeer(stored, ['10.8.0.2/32']);
    const res = await http.delete(path);
    return { res, kernel };
  }

  it('deletes a peer named with percent-encoded / + = and confirms it', async () => {
    expect(encoded(SLASHY_KEY)).to.contain('%2F').and.contain('%2B').and.contain('%3D');
    const { res, kernel } = await deleted(`/api/peer/${encoded(SLASHY_KEY)}`);
    expect(res.status).to.equal(200);
    expect(res.body.success).to.equal(true);
    expect(res.body.message)
      .to.be.a('string')
      .and.match(/deleted/i);
    expect(kernel.peers()).to.have.length(0);
  });

  it('accepts the URL-safe alphabet without padding', async () => {
    const { res, kernel } = await deleted(`/api/peer/${urlSafe(SLASHY_KEY)}`);
    expect(res.status).to.equal(200);
    expect(kernel.peers()).to.have.length(0);
  });

  it("accepts a literal '+' and '=' with only '/' encoded", async () => {
    const { res } = await deleted(`/api/peer/${SLASHY_KEY.replace(/\//g, '%2F')}`);
    expect(res.status).to.equal(200);
  });

  it("accepts unencoded '/' in the key", async () => {
    const { res, kernel } = await deleted(`/api/peer/${SLASHY_KEY}`);
    expect(res.status).to.equal(200);
    expect(kernel.peers()).to.have.length(0);
  });

  it('answers 404 "Peer not found in VPN" for an unknown key, and for a second delete', async () => {
    const { kernel, http } = setup();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const unknown = await http.delete(`/api/peer/${encoded(key(2))}`);
    expectError(unknown, 404, 'PEER_NOT_FOUND');
    expect(unknown.body.error).to.equal('Peer not found in VPN');
    expect((await http.delete(`/api/peer/${encoded(key(1))}`)).status).to.equal(200);
    const again = await http.delete(`/api/peer/${encoded(key(1))}`);
    expectError(again, 404, 'PEER_NOT_FOUND');
  });

  const malformed: Array<[string, string]> = [
    ['too short', 'abc'],
    ['33 bytes', encoded(Buffer.alloc(33, 1).toString('base64'))],
    ['bad trailing bits', encoded(`${SLASHY_KEY.slice(0, 42)}B=`)],
    ['hex', 'ab'.repeat(32)],
    ['a space', encoded(`${SLASHY_KEY.slice(0, 10)} ${SLASHY_KEY.slice(11)}`)],
  ];
  for (const [what, segment] of malformed) {
    it(`answers 400 INVALID_PUBLIC_KEY for a key that is ${what}`, async () => {
      const res = await setup().http.delete(`/api/peer/${segment}`);
      expectError(res, 400, 'INVALID_PUBLIC_KEY');
    });
  }

  it('answers 400 for broken percent-encoding in the key', async () => {
    const res = await setup().http.delete('/api/peer/%E0%A4%A');
    expectError(res, 400, 'INVALID_PUBLIC_KEY');
  });

  it('rejects a body with fields on DELETE', async () => {
    const { kernel, http } = setup();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const res = await http.delete(`/api/peer/${encoded(key(1))}`).send({ force: true });
    expectError(res, 400, 'VALIDATION_FAILED');
    expect(kernel.peers()).to.have.length(1);
  });

  it('removes the speed limit and data cap of the deleted peer', async () => {
    const { kernel, http } = setup();
    kernel.putPeer(key(1), ['10.8.0.2/32']);
    const path = `/api/peer/${encoded(key(1))}`;
    expect(
      (await http.patch(`${path}/speed-limit`).send({ bytesPerSecond: 5000 })).status,
    ).to.equal(200);
    expect((await http.patch(`${path}/data-cap`).send({ quotaBytes: 5000 })).status).to.equal(200);
    expect((await http.delete(path)).status).to.equal(200);
    expect(kernel.limits.get('wg0')!.size).to.equal(0);
    expect(kernel.caps.get('wg0')!.size).to.equal(0);
  });
});

describe('http GET /api/peer/<publicKey>/config (SPEC §4.4)', () => {
  it('always answers 404 with a JSON body saying why', async () => {
    const { kernel, http } = setup();
    kernel.putPeer(SLASHY_KEY, ['10.8.0.2/32']);
    for (const segment of [encoded(SLASHY_KEY), encoded(key(9)), 'not-a-key']) {
      const res = await http.get(`/api/peer/${segment}/config`);
      expectError(res, 404, 'CONFIG_NOT_STORED');
      expect(res.body.error).to.match(/not stored/);
    }
  });
});

describe('http speed limit (PATCH/DELETE /api/peer/<publicKey>/speed-limit)', () => {
  function withPeer() {
    const s = setup();
    s.kernel.putPeer(SLASHY_KEY, ['10.8.0.2/32']);
    return { ...s, path: `/api/peer/${encoded(SLASHY_KEY)}/speed-limit` };
  }

  it('sets the limit, confirms it, and the list shows it', async () => {
    const { kernel, http, path } = withPeer();
    const res = await http.patch(path).send({ bytesPerSecond: 200_000 });
    expect(res.status).to.equal(200);
    expect(res.body.success).to.equal(true);
    expect(res.body.message)
      .to.be.a('string')
      .and.match(/speed limit/i);
    expect(kernel.limits.get('wg0')!.get('10.8.0.2')).to.deep.equal({
      bytesPerSecond: 200_000,
      publicKey: SLASHY_KEY,
    });
    const list = await http.get('/api/peers');
    expect(list.body.peers[0].speed_limit_bytes_per_second).to.equal(200_000);
    expect(list.body.peers[0].speed_limit_holds).to.equal('both');
  });

  it('accepts the bounds 1,000 and 10^12', async () => {
    const { http, path } = withPeer();
    expect((await http.patch(path).send({ bytesPerSecond: 1000 })).status).to.equal(200);
    expect((await http.patch(path).send({ bytesPerSecond: 1e12 })).status).to.equal(200);
  });

  const bad: Array<[string, unknown]> = [
    ['999', { bytesPerSecond: 999 }],
    ['10^12 + 1', { bytesPerSecond: 1e12 + 1 }],
    ['a string', { bytesPerSecond: '1000' }],
    ['a fraction', { bytesPerSecond: 1000.5 }],
    ['null', { bytesPerSecond: null }],
    ['a boolean', { bytesPerSecond: true }],
    ['missing', {}],
    ['with an unknown field', { bytesPerSecond: 1000, burst: 10 }],
    ['an array', [1000]],
  ];
  for (const [what, body] of bad) {
    it(`answers 400 for bytesPerSecond ${what}`, async () => {
      const { kernel, http, path } = withPeer();
      const res = await http.patch(path).send(body as object);
      expectError(res, 400, 'VALIDATION_FAILED');
      expect(res.body.details).to.be.an('array').that.is.not.empty;
      expect(kernel.count('shaper.setLimit')).to.equal(0);
    });
  }

  it('names the offending fields in details', async () => {
    const { http, path } = withPeer();
    const missing = await http.patch(path).send({});
    expect(missing.body.details).to.deep.equal([
      { field: '/bytesPerSecond', message: 'is required' },
    ]);
    const unknown = await http.patch(path).send({ bytesPerSecond: 1000, burst: 1 });
    expect(unknown.body.details).to.deep.equal([
      { field: '/burst', message: 'is not a known field' },
    ]);
  });

  it('answers 415 for a non-JSON body and 400 for no body', async () => {
    const { http, path } = withPeer();
    expectError(
      await http.patch(path).set('Content-Type', 'text/plain').send('1000'),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    );
    expectError(await http.patch(path), 400, 'VALIDATION_FAILED');
  });

  it('answers 404 for an unknown peer and 400 for a malformed key', async () => {
    const { http } = withPeer();
    const unknown = await http
      .patch(`/api/peer/${encoded(key(3))}/speed-limit`)
      .send({ bytesPerSecond: 1000 });
    expectError(unknown, 404, 'PEER_NOT_FOUND');
    expect(unknown.body.error).to.equal('Peer not found in VPN');
    expectError(
      await http.patch('/api/peer/xyz/speed-limit').send({ bytesPerSecond: 1000 }),
      400,
      'INVALID_PUBLIC_KEY',
    );
  });

  it('answers 503 FACILITY_MISSING when the kernel lacks tc', async () => {
    const { kernel, http, path } = withPeer();
    kernel.fail(
      'shaper.ensure',
      new FacilityUnavailableError('the HTB qdisc (sch_htb)', 'modprobe sch_htb'),
    );
    const res = await http.patch(path).send({ bytesPerSecond: 1000 });
    expectError(res, 503, 'FACILITY_MISSING');
    expect(res.body.error).to.contain('sch_htb');
  });

  it('removes the limit with DELETE', async () => {
    const { http, path } = withPeer();
    await http.patch(path).send({ bytesPerSecond: 5000 });
    const res = await http.delete(path);
    expect(res.status).to.equal(200);
    expect(res.body).to.include({ success: true });
    expect((await http.get('/api/peers')).body.peers[0].speed_limit_bytes_per_second).to.equal(
      null,
    );
    expectError(
      await http.delete(`/api/peer/${encoded(key(3))}/speed-limit`),
      404,
      'PEER_NOT_FOUND',
    );
  });
});

describe('http data cap (PATCH/DELETE /api/peer/<publicKey>/data-cap)', () => {
  function withPeer() {
    const s = setup();
    s.kernel.putPeer(key(1), ['10.8.0.2/32']);
    return { ...s, path: `/api/peer/${urlSafe(key(1))}/data-cap` };
  }

  it('sets the cap, confirms it, and the list shows cap and bytes used', async () => {
    const { kernel, http, path } = withPeer();
    const res = await http.patch(path).send({ quotaBytes: 1_000_000 });
    expect(res.status).to.equal(200);
    expect(res.body.success).to.equal(true);
    expect(res.body.message)
      .to.be.a('string')
      .and.match(/data cap/i);
    kernel.setUsed('10.8.0.2', 1234);
    const list = await http.get('/api/peers');
    expect(withoutReadAt(list.body.peers[0].data_cap)).to.deep.equal({
      quota_bytes: 1_000_000,
      used_bytes: 1234,
      enforced: true,
      ...NO_PERIOD,
      after_cap: 'block',
      throttle_bytes_per_second: null,
      exhausted_at: null,
      throttled: false,
    });
  });

  it('accepts the bounds 1 and 2^53-1', async () => {
    const { http, path } = withPeer();
    expect((await http.patch(path).send({ quotaBytes: 1 })).status).to.equal(200);
    const max = await http
      .patch(path)
      .set('Content-Type', 'application/json')
      .send('{"quotaBytes": 9007199254740991}');
    expect(max.status).to.equal(200);
  });

  const bad: Array<[string, string]> = [
    ['0', '{"quotaBytes": 0}'],
    ['2^53', '{"quotaBytes": 9007199254740992}'],
    ['negative', '{"quotaBytes": -5}'],
    ['a string', '{"quotaBytes": "5"}'],
    ['a fraction', '{"quotaBytes": 1.5}'],
    ['with an unknown field', '{"quotaBytes": 5, "interval": "month"}'],
    ['under another name', '{"bytesPerSecond": 5000}'],
  ];
  for (const [what, text] of bad) {
    it(`answers 400 for quotaBytes ${what}`, async () => {
      const { kernel, http, path } = withPeer();
      const res = await http.patch(path).set('Content-Type', 'application/json').send(text);
      expectError(res, 400, 'VALIDATION_FAILED');
      expect(kernel.count('quota.setCap')).to.equal(0);
    });
  }

  it('answers 404 for an unknown peer', async () => {
    const { http } = withPeer();
    const res = await http.patch(`/api/peer/${encoded(key(3))}/data-cap`).send({ quotaBytes: 10 });
    expectError(res, 404, 'PEER_NOT_FOUND');
  });

  it('removes the cap with DELETE', async () => {
    const { http, path } = withPeer();
    await http.patch(path).send({ quotaBytes: 5000 });
    const res = await http.delete(path);
    expect(res.status).to.equal(200);
    expect((await http.get('/api/peers')).body.peers[0].data_cap).to.equal(null);
  });
});

describe('http data cap: afterCap block or throttle (PATCH /api/peer/<publicKey>/data-cap)', () => {
  function withPeer() {
    const s = setup();
    s.kernel.putPeer(key(1), ['10.8.0.2/32']);
    return { ...s, path: `/api/peer/${urlSafe(key(1))}/data-cap` };
  }
  const listedCap = async (http: ReturnType<typeof setup>['http']) =>
    withoutReadAt((await http.get('/api/peers')).body.peers[0].data_cap);

  it('sets a cap that throttles: the kernel gets the rate, the list shows it, throttled once used up', async () => {
    const { kernel, http, path } = withPeer();
    const res = await http
      .patch(path)
      .send({ quotaBytes: 1_000_000, afterCap: 'throttle', throttleBytesPerSecond: 5000 });
    expect(res.status).to.equal(200);
    expect(res.body.message).to.match(/throttled to 5000 B\/s/);
    const call = kernel.calls.find((c) => c.method === 'quota.setCap');
    expect(call?.args.slice(3)).to.deep.equal([undefined, { throttleBytesPerSecond: 5000 }]);
    expect(await listedCap(http)).to.deep.equal({
      quota_bytes: 1_000_000,
      used_bytes: 0,
      enforced: true,
      ...NO_PERIOD,
      after_cap: 'throttle',
      throttle_bytes_per_second: 5000,
      exhausted_at: null,
      throttled: false,
    });
    kernel.setUsed('10.8.0.2', 1_000_000);
    expect(await listedCap(http)).to.include({ after_cap: 'throttle', throttled: true });
  });

  it('keeps afterCap and the rate when a PATCH leaves them out, and goes back to block when told', async () => {
    const { kernel, http, path } = withPeer();
    await http
      .patch(path)
      .send({ quotaBytes: 1_000_000, afterCap: 'throttle', throttleBytesPerSecond: 5000 });
    expect((await http.patch(path).send({ quotaBytes: 2_000_000 })).status).to.equal(200);
    expect(kernel.calls.filter((c) => c.method === 'quota.setCap')[1]?.args).to.have.length(3);
    expect(await listedCap(http)).to.include({
      quota_bytes: 2_000_000,
      after_cap: 'throttle',
      throttle_bytes_per_second: 5000,
    });
    expect(
      (await http.patch(path).send({ quotaBytes: 2_000_000, afterCap: 'block' })).status,
    ).to.equal(200);
    expect(await listedCap(http)).to.include({
      after_cap: 'block',
      throttle_bytes_per_second: null,
      exhausted_at: null,
      throttled: false,
    });
  });

  it('changes the rate alone of a cap that throttles, keeping the cap and afterCap', async () => {
    const { kernel, http, path } = withPeer();
    await http
      .patch(path)
      .send({ quotaBytes: 1_000_000, afterCap: 'throttle', throttleBytesPerSecond: 5000 });
    expect((await http.patch(path).send({ throttleBytesPerSecond: 8000 })).status).to.equal(200);
    const last = kernel.calls.filter((c) => c.method === 'quota.setCap').at(-1);
    expect(last?.args.slice(2)).to.deep.equal([
      1_000_000,
      undefined,
      { throttleBytesPerSecond: 8000 },
    ]);
    expect(await listedCap(http)).to.include({
      quota_bytes: 1_000_000,
      after_cap: 'throttle',
      throttle_bytes_per_second: 8000,
    });
  });

  const bad: Array<[string, string, string]> = [
    [
      'throttle without a rate',
      '{"quotaBytes": 5, "afterCap": "throttle"}',
      '/throttleBytesPerSecond',
    ],
    [
      'a rate under 1,000',
      '{"quotaBytes": 5, "afterCap": "throttle", "throttleBytesPerSecond": 999}',
      '/throttleBytesPerSecond',
    ],
    [
      'a rate over 10^12',
      '{"quotaBytes": 5, "afterCap": "throttle", "throttleBytesPerSecond": 1000000000001}',
      '/throttleBytesPerSecond',
    ],
    [
      'a fractional rate',
      '{"quotaBytes": 5, "afterCap": "throttle", "throttleBytesPerSecond": 1500.5}',
      '/throttleBytesPerSecond',
    ],
    [
      'a rate without afterCap',
      '{"quotaBytes": 5, "throttleBytesPerSecond": 5000}',
      '/throttleBytesPerSecond',
    ],
    [
      'a rate with block',
      '{"quotaBytes": 5, "afterCap": "block", "throttleBytesPerSecond": 5000}',
      '/throttleBytesPerSecond',
    ],
    ['an unknown afterCap', '{"quotaBytes": 5, "afterCap": "slow"}', '/afterCap'],
  ];
  for (const [what, text, field] of bad) {
    it(`answers 400 with details for ${what}, and changes nothing in the kernel`, async () => {
      const { kernel, http, path } = withPeer();
      const res = await http.patch(path).set('Content-Type', 'application/json').send(text);
      expectError(res, 400, 'VALIDATION_FAILED');
      expect(res.body.details.map((d: { field: string }) => d.field)).to.include(field);
      expect(kernel.count('quota.setCap')).to.equal(0);
    });
  }
});

describe('http data cap reset (POST /api/peer/<publicKey>/data-cap/reset)', () => {
  function withCappedPeer() {
    const s = setup();
    s.kernel.putPeer(key(1), ['10.8.0.2/32']);
    return { ...s, peer: `/api/peer/${urlSafe(key(1))}` };
  }

  it('zeroes the usage and answers the closing usage; the list then shows 0 used of the same cap', async () => {
    const { kernel, http, peer } = withCappedPeer();
    await http.patch(`${peer}/data-cap`).send({ quotaBytes: 1_000_000 });
    kernel.setUsed('10.8.0.2', 765_432);
    const res = await http.post(`${peer}/data-cap/reset`);
    expect(res.status).to.equal(200);
    expect(res.body).to.deep.equal({
      success: true,
      message: `Data cap usage of peer ${key(1)} (10.8.0.2) reset; 765432 bytes were used`,
      usedBytes: 765_432,
    });
    expect(withoutReadAt((await http.get('/api/peers')).body.peers[0].data_cap)).to.deep.equal({
      quota_bytes: 1_000_000,
      used_bytes: 0,
      enforced: true,
      ...NO_PERIOD,
      after_cap: 'block',
      throttle_bytes_per_second: null,
      exhausted_at: null,
      throttled: false,
    });
  });

  it('answers 409 PEER_HAS_NO_DATA_CAP for a peer without a cap', async () => {
    const { http, peer } = withCappedPeer();
    expectError(await http.post(`${peer}/data-cap/reset`), 409, 'PEER_HAS_NO_DATA_CAP');
  });

  it('answers 404 for an unknown peer and 400 for a body with fields, resetting nothing', async () => {
    const { kernel, http, peer } = withCappedPeer();
    await http.patch(`${peer}/data-cap`).send({ quotaBytes: 1_000_000 });
    kernel.setUsed('10.8.0.2', 10);
    const unknown = await http.post(`/api/peer/${encoded(key(3))}/data-cap/reset`);
    expectError(unknown, 404, 'PEER_NOT_FOUND');
    const bad = await http.post(`${peer}/data-cap/reset`).send({ usedBytes: 0 });
    expectError(bad, 400, 'VALIDATION_FAILED');
    expect(kernel.count('quota.resetCap')).to.equal(0);
    expect((await http.get('/api/peers')).body.peers[0].data_cap.used_bytes).to.equal(10);
  });

  it('publishes peer.cap_reset with the closing usage', async () => {
    const { kernel } = withCappedPeer();
    const changes: unknown[] = [];
    const withSink = new PeerService({
      kernel,
      interfaceName: 'wg0',
      logger: captureLog().logger,
      events: { publish: (c) => changes.push(c) },
    });
    await withSink.setDataCap(key(1), 5000);
    kernel.setUsed('10.8.0.2', 5000);
    expect(await withSink.resetDataCap(key(1))).to.deep.equal({
      publicKey: key(1),
      ip: '10.8.0.2',
      usedBytes: 5000,
    });
    expect(changes[1]).to.deep.equal({
      type: 'peer.cap_reset',
      publicKey: key(1),
      ipAddress: '10.8.0.2',
      details: { quota_bytes: 5000, used_bytes: 5000 },
    });
  });
});

describe('http suspension (PATCH /api/peer/<publicKey>/suspension)', () => {
  function withPeer() {
    const s = setup();
    s.kernel.putPeer(key(1), ['10.8.0.2/32']);
    s.kernel.putPeer(key(2), ['10.8.0.3/32']);
    return { ...s, path: `/api/peer/${urlSafe(key(1))}/suspension` };
  }

  it('suspends the peer in the kernel, confirms it, and the list shows it suspended (the other not)', async () => {
    const { kernel, http, path } = withPeer();
    const res = await http.patch(path).send({ suspended: true });
    expect(res.status).to.equal(200);
    expect(res.body).to.deep.equal({
      success: true,
      message: `Suspended peer ${key(1)} (10.8.0.2)`,
    });
    expect([...kernel.suspended.get('wg0')!]).to.deep.equal([['10.8.0.2', key(1)]]);
    const peers = (await http.get('/api/peers')).body.peers as Array<Record<string, unknown>>;
    expect(peers.map((p) => p.suspended)).to.deep.equal([true, false]);
  });

  it('resumes it: the kernel holds no suspension and the list shows suspended false', async () => {
    const { kernel, http, path } = withPeer();
    await http.patch(path).send({ suspended: true });
    const res = await http.patch(path).send({ suspended: false });
    expect(res.status).to.equal(200);
    expect(res.body.message).to.equal(`Resumed peer ${key(1)} (10.8.0.2)`);
    expect(kernel.suspended.get('wg0')?.size ?? 0).to.equal(0);
    expect((await http.get('/api/peers')).body.peers[0].suspended).to.equal(false);
  });

  it('keeps the speed limit and the data cap of a suspended peer', async () => {
    const { http, path } = withPeer();
    const peer = `/api/peer/${urlSafe(key(1))}`;
    await http.patch(`${peer}/speed-limit`).send({ bytesPerSecond: 5000 });
    await http.patch(`${peer}/data-cap`).send({ quotaBytes: 7000 });
    await http.patch(path).send({ suspended: true });
    const [listed] = peersWithoutReadAt((await http.get('/api/peers')).body.peers);
    expect(listed).to.deep.include({
      speed_limit_bytes_per_second: 5000,
      data_cap: {
        quota_bytes: 7000,
        used_bytes: 0,
        enforced: true,
        ...NO_PERIOD,
        after_cap: 'block',
        throttle_bytes_per_second: null,
        exhausted_at: null,
        throttled: false,
      },
      suspended: true,
    });
  });

  it("does not list a suspension owned by another key as the peer's (an address reused behind the daemon's back)", async () => {
    const { kernel, http } = withPeer();
    kernel.suspended.set('wg0', new Map([['10.8.0.2', key(9)]]));
    expect((await http.get('/api/peers')).body.peers[0].suspended).to.equal(false);
  });

  const bad: Array<[string, string]> = [
    ['a string', '{"suspended": "true"}'],
    ['a number', '{"suspended": 1}'],
    ['null', '{"suspended": null}'],
    ['missing', '{}'],
    ['with an unknown field', '{"suspended": true, "until": "2026-04-01"}'],
  ];
  for (const [what, text] of bad) {
    it(`answers 400 with details for suspended ${what}, changing nothing in the kernel`, async () => {
      const { kernel, http, path } = withPeer();
      const res = await http.patch(path).set('Content-Type', 'application/json').send(text);
      expectError(res, 400, 'VALIDATION_FAILED');
      expect(res.body.details).to.be.an('array').that.is.not.empty;
      expect(kernel.count('suspension.suspend') + kernel.count('suspension.resume')).to.equal(0);
    });
  }

  it('names the field in details when suspended is not a boolean', async () => {
    const { http, path } = withPeer();
    const res = await http.patch(path).send({ suspended: 'yes' });
    expect(res.body.details).to.deep.equal([{ field: '/suspended', message: 'must be boolean' }]);
  });

  it('answers 404 for an unknown peer', async () => {
    const { kernel, http } = withPeer();
    const res = await http
      .patch(`/api/peer/${encoded(key(3))}/suspension`)
      .send({ suspended: true });
    expectError(res, 404, 'PEER_NOT_FOUND');
    expect(res.body.error).to.equal('Peer not found in VPN');
    expect(kernel.count('suspension.suspend')).to.equal(0);
  });

  it('deleting a suspended peer removes its suspension from the kernel', async () => {
    const { kernel, http, path } = withPeer();
    await http.patch(path).send({ suspended: true });
    expect((await http.delete(`/api/peer/${urlSafe(key(1))}`)).status).to.equal(200);
    expect(kernel.suspended.get('wg0')?.size ?? 0).to.equal(0);
  });
});

describe('http unknown routes', () => {
  const routes: Array<[string, string]> = [
    ['get', '/api'],
    ['get', '/api/peerz'],
    ['get', '/metrics/x'],
    ['get', '/'],
    ['get', '/index.html'],
  ];
  for (const [method, path] of routes) {
    it(`answers ${method.toUpperCase()} ${path} with a JSON 404`, async () => {
      const http = setup().http;
      const res = await (
        http as unknown as Record<string, (p: string) => Promise<import('supertest').Response>>
      )[method]!(path);
      expectError(res, 404, 'ROUTE_NOT_FOUND');
    });
  }
});

// README: a known path with a method it does not take answers 405 with Allow (RFC 9110 §15.5.6).
describe('http known paths with another method', () => {
  const wrong: Array<[string, () => string, string]> = [
    ['put', () => '/api/peers', 'GET, HEAD'],
    ['post', () => '/api/peers', 'GET, HEAD'],
    ['get', () => '/api/peer', 'POST'],
    ['get', () => '/api/peer/abc', 'DELETE'],
    ['put', () => `/api/peer/${encoded(key(1))}/speed-limit`, 'PATCH, DELETE'],
    ['post', () => `/api/peer/${encoded(key(1))}`, 'DELETE'],
    ['delete', () => '/healthz', 'GET, HEAD'],
    ['post', () => '/api/docs', 'GET, HEAD'],
  ];
  for (const [method, path, allow] of wrong) {
    it(`answers ${method.toUpperCase()} ${path().replace(/peer\/[^/]+/, 'peer/<key>')} with a JSON 405 and Allow: ${allow}`, async () => {
      const http = setup().http;
      const res = await (
        http as unknown as Record<string, (p: string) => Promise<import('supertest').Response>>
      )[method]!(path());
      expectError(res, 405, 'METHOD_NOT_ALLOWED');
      expect(res.headers['allow']).to.equal(allow);
      expect(res.body.error).to.contain(`it takes ${allow}`);
    });
  }

  it('asks for a token first on /api, so a 405 tells a client without one nothing', async () => {
    const http = setup({ token: 'a-long-random-token-0123456789' }).http;
    const res = await http.put('/api/peers');
    expectError(res, 401, 'AUTH_REQUIRED');
    expect(res.headers['allow']).to.equal(undefined);
  });
});
