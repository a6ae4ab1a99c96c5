/**
 * Issue 31: the create body and the daemon-wide defaults of the client config. Every field is
 * optional; none, or `{}`, is exactly the config every create gave before; bad fields are 400
 * with `details`.
 */
import { expect } from 'chai';
import request from 'supertest';
import { DEFAULT_CLIENT_DEFAULTS } from '../../../src/peers';
import { expectError, setup } from './helpers';

/** The lines of a wg-quick config, section by section, in order. */
function sections(text: string): Record<string, string[]> {
  const found: Record<string, string[]> = {};
  let current = '';
  for (const line of text.split('\n')) {
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) found[(current = header[1]!)] = [];
    else if (line !== '') found[current]!.push(line.replace(/ = .*/, ''));
  }
  return found;
}

/** The value of `key` in the config, or undefined. */
function valueOf(config: string, key: string): string | undefined {
  return new RegExp(`^${key} = (.*)$`, 'm').exec(config)?.[1];
}

describe('http POST /api/peer with a body (issue 31)', () => {
  it('writes exactly the DNS, MTU, AllowedIPs and PersistentKeepalive asked for', async () => {
    const res = await setup()
      .http.post('/api/peer')
      .send({
        dns: ['10.8.0.1', 'fd42::53'],
        mtu: 1420,
        allowedIps: ['0.0.0.0/0', '::/0'],
        persistentKeepalive: 15,
      });
    expect(res.status, JSON.stringify(res.body)).to.equal(201);
    const { config } = res.body;
    expect(sections(config)).to.deep.equal({
      Interface: ['PrivateKey', 'Address', 'DNS', 'MTU'],
      Peer: ['PublicKey', 'Endpoint', 'AllowedIPs', 'PersistentKeepalive'],
    });
    expect(valueOf(config, 'DNS')).to.equal('10.8.0.1, fd42::53');
    expect(valueOf(config, 'MTU')).to.equal('1420');
    expect(valueOf(config, 'AllowedIPs')).to.equal('0.0.0.0/0, ::/0');
    expect(valueOf(config, 'PersistentKeepalive')).to.equal('15');
  });

  it('writes no PersistentKeepalive line for 0 (off)', async () => {
    const res = await setup().http.post('/api/peer').send({ persistentKeepalive: 0 });
    expect(res.status).to.equal(201);
    expect(sections(res.body.config)['Peer']).to.deep.equal([
      'PublicKey',
      'Endpoint',
      'AllowedIPs',
    ]);
  });

  it('keeps the peer in the kernel as without a body: its own /32, whatever the client routes', async () => {
    const { kernel, http } = setup();
    const res = await http.post('/api/peer').send({ allowedIps: ['0.0.0.0/0'] });
    const peer = kernel.peers().find((p) => p.publicKey === res.body.peer.publicKey);
    expect(peer?.allowedIps).to.deep.equal([{ family: 4, address: res.body.peer.ip, cidr: 32 }]);
  });

  it('gives an empty body the same config lines as no body at all', async () => {
    const { http } = setup();
    const none = await http.post('/api/peer');
    const empty = await http.post('/api/peer').send({});
    expect(sections(empty.body.config)).to.deep.equal(sections(none.body.config));
    expect(sections(none.body.config)).to.deep.equal({
      Interface: ['PrivateKey', 'Address'],
      Peer: ['PublicKey', 'Endpoint', 'AllowedIPs', 'PersistentKeepalive'],
    });
    expect(valueOf(none.body.config, 'AllowedIPs')).to.equal('10.8.0.0/24');
    expect(valueOf(none.body.config, 'PersistentKeepalive')).to.equal('25');
  });

  it('takes left-out fields from the daemon-wide defaults, and a field given over them', async () => {
    const { http } = setup({
      clientDefaults: {
        ...DEFAULT_CLIENT_DEFAULTS,
        dns: ['1.1.1.1'],
        allowedIps: ['0.0.0.0/0', '::/0'],
        mtu: 1380,
        persistentKeepalive: 0,
      },
    });
    const defaults = (await http.post('/api/peer')).body.config;
    expect(valueOf(defaults, 'DNS')).to.equal('1.1.1.1');
    expect(valueOf(defaults, 'MTU')).to.equal('1380');
    expect(valueOf(defaults, 'AllowedIPs')).to.equal('0.0.0.0/0, ::/0');
    expect(valueOf(defaults, 'PersistentKeepalive')).to.equal(undefined);
    const own = (
      await http.post('/api/peer').send({ dns: [], mtu: 1280, allowedIps: ['10.8.0.0/24'] })
    ).body.config;
    expect(valueOf(own, 'DNS')).to.equal(undefined);
    expect(valueOf(own, 'MTU')).to.equal('1280');
    expect(valueOf(own, 'AllowedIPs')).to.equal('10.8.0.0/24');
  });

  it('answers 400 with details naming each bad field, and creates nothing', async () => {
    const { kernel, http } = setup();
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ mtu: 1279 }, '/mtu'],
      [{ mtu: 9001 }, '/mtu'],
      [{ mtu: 1420.5 }, '/mtu'],
      [{ persistentKeepalive: 65536 }, '/persistentKeepalive'],
      [{ persistentKeepalive: -1 }, '/persistentKeepalive'],
      [{ dns: '1.1.1.1' }, '/dns'],
      [{ dns: ['dns.example'] }, '/dns/0'],
      [{ dns: ['1.1.1.1', '1.1.1'] }, '/dns/1'],
      [{ allowedIps: [] }, '/allowedIps'],
      [{ allowedIps: ['10.0.0.0'] }, '/allowedIps/0'],
      [{ allowedIps: ['10.0.0.0/33'] }, '/allowedIps/0'],
      [{ allowedIps: ['::/0', 'fd00::/129'] }, '/allowedIps/1'],
      [{ presharedKey: 'yes' }, '/presharedKey'],
    ];
    for (const [body, field] of cases) {
      const res = await http.post('/api/peer').send(body);
      expectError(res, 400, 'VALIDATION_FAILED');
      expect(res.body.details, JSON.stringify(body)).to.deep.include({
        field,
        message: res.body.details[0].message,
      });
      expect(res.body.details[0].field, JSON.stringify(body)).to.equal(field);
    }
    expect(kernel.peers()).to.have.length(0);
  });

  it('says which entry of a list is not an address, in the error sentence', async () => {
    const res = await setup()
      .http.post('/api/peer')
      .send({ dns: ['1.1.1.1', 'dns.example'] });
    expectError(res, 400, 'VALIDATION_FAILED');
    expect(res.body.error).to.contain('"dns.example"');
    expect(res.body.details).to.deep.equal([
      { field: '/dns/1', message: 'must be an IPv4 or IPv6 address' },
    ]);
  });
});

describe('http POST /api/peer: preshared keys (issue 31)', () => {
  it('makes 32 bytes, sets them in the kernel, and returns them once in peer.presharedKey and the config', async () => {
    const { kernel, http, log } = setup();
    const res = await http.post('/api/peer').send({ presharedKey: true });
    expect(res.status).to.equal(201);
    const psk = res.body.peer.presharedKey as string;
    expect(Buffer.from(psk, 'base64')).to.have.length(32);
    expect(kernel.presharedKeys.get(res.body.peer.publicKey)?.toString('base64')).to.equal(psk);
    expect(valueOf(res.body.config, 'PresharedKey')).to.equal(psk);
    expect(sections(res.body.config)['Peer']).to.deep.equal([
      'PublicKey',
      'PresharedKey',
      'Endpoint',
      'AllowedIPs',
      'PersistentKeepalive',
    ]);
    expect(log.lines().length).to.be.greaterThan(0);
    expect(JSON.stringify(log.lines())).to.not.contain(psk);
  });

  it('gives two peers two different keys', async () => {
    const { http } = setup();
    const one = await http.post('/api/peer').send({ presharedKey: true });
    const two = await http.post('/api/peer').send({ presharedKey: true });
    expect(one.body.peer.presharedKey).to.not.equal(two.body.peer.presharedKey);
  });

  it('makes none without asking, and none with presharedKey false even under --preshared-keys', async () => {
    const { kernel, http } = setup({
      clientDefaults: { ...DEFAULT_CLIENT_DEFAULTS, presharedKeys: true },
    });
    const byDefault = await http.post('/api/peer');
    expect(byDefault.body.peer.presharedKey).to.be.a('string');
    const refused = await http.post('/api/peer').send({ presharedKey: false });
    expect(refused.body.peer).to.not.have.property('presharedKey');
    expect(valueOf(refused.body.config, 'PresharedKey')).to.equal(undefined);
    expect(kernel.presharedKeys.has(refused.body.peer.publicKey)).to.equal(false);
    const plain = await setup().http.post('/api/peer');
    expect(plain.body.peer).to.not.have.property('presharedKey');
  });
});

describe('http GET /api/peers: preshared_key (issue 31)', () => {
  it('lists true for a peer the kernel holds a preshared key for, false otherwise, never the key', async () => {
    const { app, http } = setup();
    const withKey = await http.post('/api/peer').send({ presharedKey: true });
    const without = await http.post('/api/peer');
    const res = await http.get('/api/peers');
    const byKey = new Map(
      (res.body.peers as Array<Record<string, unknown>>).map((p) => [p['public_key'], p]),
    );
    expect(byKey.get(withKey.body.peer.publicKey)?.['preshared_key']).to.equal(true);
    expect(byKey.get(without.body.peer.publicKey)?.['preshared_key']).to.equal(false);
    expect(res.text).to.not.contain(withKey.body.peer.presharedKey);
    // A partial response is not the full peer the recorded responses are checked against.
    const partial = await request(app).get('/api/peers?fields=public_key,preshared_key');
    expect(
      partial.body.peers.map((p: Record<string, unknown>) => p['preshared_key']),
    ).to.deep.equal([true, false]);
  });
});
