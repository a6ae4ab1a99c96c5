/**
 * What an operator hands a customer, against a real kernel (issue 31, Done when 1): a create
 * with `presharedKey` gives a config that completes a handshake with a real client (wg-quick),
 * `wg show <if> preshared-keys` shows the key the response gave, and the same config without
 * its PresharedKey line fails to handshake; a create with `dns`, `mtu` and `allowedIps` gives a
 * config with exactly those lines, which `wg-quick strip` accepts. `wg` and wg-quick are the
 * oracles.
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  clientHandshake,
  connectClient,
  pings,
  saveClientConfig,
} from '../kernel-reboot/support/clients';
import { type DaemonProcess, api, startDaemon } from './support/daemon';
import {
  CLIENT_NS,
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  inNs,
  q,
  removeDaemonLeftovers,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  trySh,
} from './support/topology';

const IFNAME = 'wgpsk';
const LISTEN = '127.0.0.1:18131';
const DAEMON_ARGS = [
  '--interface',
  IFNAME,
  '--listen',
  LISTEN,
  '--endpoint-host',
  SERVER_UNDERLAY_IP,
  '--address',
  '10.31.0.1/24',
];

interface Created {
  peer: { ip: string; privateKey: string; publicKey: string; presharedKey?: string };
  config: string;
}

/** `wg show <if> preshared-keys`: public key → preshared key ("(none)" when it has none). */
function presharedKeys(): Map<string, string> {
  const lines = sh(`wg show ${IFNAME} preshared-keys`).trim().split('\n');
  return new Map(lines.filter((l) => l !== '').map((l) => l.split('\t') as [string, string]));
}

/** The config's lines (blank ones left out), as a client file holds them. */
function lines(config: string): string[] {
  return config.split('\n').filter((line) => line !== '');
}

describe('client configs with preshared keys, DNS, MTU and AllowedIPs (real kernel, issue 31)', function () {
  let daemon: DaemonProcess | undefined;
  let dir: string;
  const clients: string[] = [];

  before(function () {
    assertInTestVm();
    setupClientNamespace();
    removeDaemonLeftovers(IFNAME);
    dir = mkdtempSync(path.join(tmpdir(), 'wgpsk-'));
  });

  after(async function () {
    for (const ifname of clients) trySh(inNs(CLIENT_NS, `ip link del ${q(ifname)}`));
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
    teardownClientNamespace();
    rmSync(dir, { recursive: true, force: true });
  });

  let withKey: Created;

  it('sets the preshared key of a create with presharedKey in the kernel, as wg shows it', async () => {
    daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });
    const response = await api(daemon, 'POST', '/api/peer', { presharedKey: true });
    expect(response.status).to.equal(201);
    withKey = response.body as unknown as Created;
    const psk = withKey.peer.presharedKey!;
    expect(Buffer.from(psk, 'base64')).to.have.length(32);
    expect(presharedKeys().get(withKey.peer.publicKey)).to.equal(psk);
    expect(withKey.config).to.contain(`\nPresharedKey = ${psk}\n`);
    const plain = (await api(daemon, 'POST', '/api/peer')).body as unknown as Created;
    expect(presharedKeys().get(plain.peer.publicKey)).to.equal('(none)');
    const listed = (await api(daemon, 'GET', '/api/peers')).body as {
      peers: Array<Record<string, unknown>>;
    };
    const flags = new Map(listed.peers.map((p) => [p['public_key'], p['preshared_key']]));
    expect(flags.get(withKey.peer.publicKey)).to.equal(true);
    expect(flags.get(plain.peer.publicKey)).to.equal(false);
    expect(JSON.stringify(listed)).to.not.contain(psk);
  });

  it('completes a handshake with a real client brought up from that config (wg-quick up)', () => {
    clients.push('wgpskc');
    const client = connectClient(CLIENT_NS, saveClientConfig(dir, 'wgpskc', withKey.config));
    expect(pings(client, '10.31.0.1', 20)).to.equal(true);
    expect(clientHandshake(client)).to.be.greaterThan(0);
    sh(inNs(CLIENT_NS, `wg-quick down ${q(path.join(dir, 'wgpskc.conf'))} 2>&1`));
    clients.pop();
  });

  it('fails to handshake with the same config without its PresharedKey line', () => {
    const stripped = withKey.config.replace(/^PresharedKey = .*\n/m, '');
    expect(stripped).to.not.contain('PresharedKey');
    clients.push('wgpskn');
    const client = connectClient(CLIENT_NS, saveClientConfig(dir, 'wgpskn', stripped));
    expect(pings(client, '10.31.0.1', 6)).to.equal(false);
    expect(clientHandshake(client)).to.equal(0);
  });

  it('writes exactly the DNS, MTU and AllowedIPs lines asked for, and wg-quick strip accepts them', async () => {
    const response = await api(daemon!, 'POST', '/api/peer', {
      dns: ['10.31.0.1', 'fd31::53'],
      mtu: 1380,
      allowedIps: ['0.0.0.0/0', '::/0'],
    });
    expect(response.status).to.equal(201);
    const created = response.body as unknown as Created;
    expect(lines(created.config)).to.deep.equal([
      '[Interface]',
      `PrivateKey = ${created.peer.privateKey}`,
      `Address = ${created.peer.ip}/32`,
      'DNS = 10.31.0.1, fd31::53',
      'MTU = 1380',
      '[Peer]',
      `PublicKey = ${sh(`wg show ${IFNAME} public-key`).trim()}`,
      `Endpoint = ${SERVER_UNDERLAY_IP}:51820`,
      'AllowedIPs = 0.0.0.0/0, ::/0',
      'PersistentKeepalive = 25',
    ]);
    const file = saveClientConfig(dir, 'wgpsks', created.config);
    const stripped = sh(`wg-quick strip ${q(file)}`);
    // wg-quick takes DNS, MTU and Address itself and hands wg the rest.
    expect(stripped).to.not.contain('DNS').and.not.contain('MTU');
    expect(stripped).to.contain('AllowedIPs = 0.0.0.0/0, ::/0');
    expect(stripped).to.contain(`PrivateKey = ${created.peer.privateKey}`);
  });
});
