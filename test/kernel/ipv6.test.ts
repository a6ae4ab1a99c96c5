/**
 * Dual-stack peers against a real kernel (issue 18, Done when 1): the daemon creates a
 * dual-stack interface (`--address6`), a real client comes up with `wg-quick up` from nothing
 * but a create response's config, IPv6 crosses the tunnel, one speed limit holds on IPv6 in both
 * directions, one data cap counts IPv4 and IPv6 bytes together and cuts both families where the
 * sum reaches it, and a delete leaves no filter, class, quota or map element behind, with `wg`,
 * `ip`, `tc` and `nft` as the oracles of what the kernel holds.
 */
import { expect } from 'chai';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  type Client,
  type Direction,
  connectClient,
  measureRate,
  saveClientConfig,
  transfer,
} from '../kernel-reboot/support/clients';
import { type DaemonProcess, api, startDaemon } from './support/daemon';
import {
  CLIENT_NS,
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  deleteNftTable,
  inNs,
  removeDaemonLeftovers,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  trySh,
  wgShowDump,
} from './support/topology';

const IFNAME = 'wgd6';
const IFB = `ifb-${IFNAME}`;
const LISTEN = '127.0.0.1:18096';
const CLIENT_IF = 'wgd6c';
const LIMIT = 200_000;
/** Issue 18: a limit holds within 20% on IPv6. */
const TOLERANCE = 0.2;
const ATTEMPTS = 3;
const TABLE = `wg_peerd_${IFNAME}`;
const DAEMON_ARGS = [
  '--interface',
  IFNAME,
  '--listen',
  LISTEN,
  '--endpoint-host',
  SERVER_UNDERLAY_IP,
  '--address',
  '10.96.0.1/24',
  '--address6',
  'fd96::1/64',
];
const CAP = 3_000_000;

interface NftEntry {
  [kind: string]: Record<string, unknown>;
}

/** What `nft -j list table inet <TABLE>` holds, without its metainfo. */
function nftTable(): NftEntry[] {
  return (
    JSON.parse(sh(`nft -j list table inet ${TABLE}`)) as { nftables: NftEntry[] }
  ).nftables.filter((entry) => !entry['metainfo']);
}

function quotas(): Array<Record<string, unknown>> {
  return nftTable().flatMap((e) => (e['quota'] ? [e['quota']] : []));
}

/** The elements of one map of the table, as nft lists them: [key, quota name]. */
function mapElements(name: string): Array<[unknown, unknown]> {
  const map = nftTable().find((e) => e['map']?.['name'] === name)?.['map'];
  const elements = (map?.['elem'] ?? []) as Array<[unknown, unknown]>;
  return elements;
}

function removeLeftovers(): void {
  removeDaemonLeftovers(IFNAME);
  deleteNftTable('inet', TABLE);
}

interface Created {
  peer: { ip: string; ipv6?: string; privateKey: string; publicKey: string };
  server: { publicKey: string; endpoint: string };
  config: string;
}

/** `tc -j filter show` of one priority of our HTB qdisc 1: on `dev`. */
function filters(dev: string, prio: number): Array<Record<string, unknown>> {
  return JSON.parse(sh(`tc -j filter show dev ${dev} parent 1: prio ${prio}`) || '[]') as Array<
    Record<string, unknown>
  >;
}

/** The classids the key nodes of one priority classify into (tables and links have none). */
function flowids(dev: string, prio: number): string[] {
  return filters(dev, prio)
    .map((f) => (f['options'] as Record<string, unknown> | undefined)?.['flowid'])
    .filter((id): id is string => typeof id === 'string');
}

/** Handles of the classes on `dev`, from `tc class show` lines ("class htb 1:2 parent ..."). */
function classes(dev: string): string[] {
  return sh(`tc class show dev ${dev}`)
    .split('\n')
    .map((line) => /^class \S+ (\S+) /.exec(line)?.[1])
    .filter((handle): handle is string => handle !== undefined);
}

describe('dual-stack peers (real kernel, issue 18)', function () {
  let daemon: DaemonProcess | undefined;
  let created: Created;
  let client: Client;

  before(function () {
    assertInTestVm();
    setupClientNamespace();
    removeLeftovers();
  });

  after(async function () {
    await daemon?.stop();
    removeLeftovers();
    teardownClientNamespace();
  });

  it('creates the interface with its --address6 address beside the IPv4 one', async () => {
    daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });
    expect(sh(`ip -4 -o addr show dev ${IFNAME}`)).to.contain('10.96.0.1/24');
    expect(sh(`ip -6 -o addr show dev ${IFNAME} scope global`)).to.contain('fd96::1/64');
  });

  it('creates a peer with an IPv6 /128 beside its IPv4 /32, as wg then holds it', async () => {
    const response = await api(daemon!, 'POST', '/api/peer');
    expect(response.status).to.equal(201);
    created = response.body as unknown as Created;
    expect(created.peer.ip).to.equal('10.96.0.2');
    expect(created.peer.ipv6).to.equal('fd96::2');
    const peer = wgShowDump(IFNAME).peers.find((p) => p.publicKey === created.peer.publicKey);
    expect(peer?.allowedIps).to.have.members(['10.96.0.2/32', 'fd96::2/128']);
    expect(created.config).to.contain('Address = 10.96.0.2/32, fd96::2/128');
    expect(created.config).to.contain('AllowedIPs = 0.0.0.0/0, ::/0');
  });

  it('brings a client up from the config alone (wg-quick up), and IPv6 and IPv4 cross the tunnel', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'wgd6-'));
    client = connectClient(CLIENT_NS, saveClientConfig(dir, CLIENT_IF, created.config));
    sh(inNs(CLIENT_NS, 'busybox ping -c 1 -w 20 -q fd96::1'));
    sh(inNs(CLIENT_NS, 'busybox ping -c 1 -w 10 -q 10.96.0.1'));
    sh('busybox ping -c 1 -w 10 -q fd96::2');
  });

  it('lists ipv6_address beside ip_address', async () => {
    const response = await api(daemon!, 'GET', '/api/peers');
    const peers = (response.body as { peers: Array<Record<string, unknown>> }).peers;
    expect(peers.map((p) => [p['ip_address'], p['ipv6_address']])).to.deep.equal([
      ['10.96.0.2', 'fd96::2'],
    ]);
  });

  it('sets one speed limit that tc holds for IPv6 in the class of the peer’s IPv4 address', async () => {
    const response = await api(
      daemon!,
      'PATCH',
      `/api/peer/${encodeURIComponent(created.peer.publicKey)}/speed-limit`,
      { bytesPerSecond: LIMIT },
    );
    expect(response.status).to.equal(200);
    for (const dev of [IFNAME, IFB]) {
      expect(classes(dev), dev).to.include('1:2');
      expect(flowids(dev, 10), `${dev} prio 10 (IPv4)`).to.deep.equal(['1:2']);
      expect(flowids(dev, 11), `${dev} prio 11 (IPv6)`).to.deep.equal(['1:2']);
      const ipv6 = filters(dev, 11);
      expect(
        ipv6.every((f) => f['protocol'] === 'ipv6'),
        `${dev} protocol`,
      ).to.equal(true);
    }
  });

  for (const direction of ['download', 'upload'] as Direction[]) {
    it(`holds an IPv6 ${direction} at ${LIMIT} B/s to within ${TOLERANCE * 100}%`, async function () {
      this.timeout(180_000);
      const ends = { client, clientIp: 'fd96::2', serverIp: 'fd96::1', port: 5201 };
      const rates: number[] = [];
      for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
        const rate = await measureRate(ends, direction);
        rates.push(Math.round(rate));
        const deviation = Math.abs(rate - LIMIT) / LIMIT;
        console.log(
          `      IPv6 ${direction}: ${Math.round(rate)} B/s, ${(deviation * 100).toFixed(1)}% from ${LIMIT}`,
        );
        if (deviation <= TOLERANCE) return;
      }
      expect.fail(`IPv6 ${direction}: ${rates.join(', ')} B/s, none within 20% of ${LIMIT}`);
    });
  }

  it('sets one data cap: one quota object that both the IPv4 and the IPv6 map lead to', async () => {
    const key = encodeURIComponent(created.peer.publicKey);
    expect((await api(daemon!, 'DELETE', `/api/peer/${key}/speed-limit`)).status).to.equal(200);
    const response = await api(daemon!, 'PATCH', `/api/peer/${key}/data-cap`, {
      quotaBytes: CAP,
    });
    expect(response.status).to.equal(200);
    expect(quotas().map((q) => [q['name'], q['bytes']])).to.deep.equal([['q_10_96_0_2', CAP]]);
    expect(mapElements('caps')).to.deep.equal([['10.96.0.2', 'q_10_96_0_2']]);
    expect(mapElements('caps6')).to.deep.equal([['fd96::2', 'q_10_96_0_2']]);
  });

  it('counts IPv4 and IPv6 bytes in that one object, and cuts both families where their sum reaches the cap', async function () {
    this.timeout(240_000);
    const v4 = { client, clientIp: '10.96.0.2', serverIp: '10.96.0.1', port: 5301 };
    const v6 = { client, clientIp: 'fd96::2', serverIp: 'fd96::1', port: 5302 };
    const usedBy = () => Number(quotas()[0]!['used']);
    const start = usedBy();
    const first = await transfer(v4, 'download', 800_000);
    const afterV4 = usedBy();
    const second = await transfer(v6, 'upload', 800_000);
    const afterV6 = usedBy();
    console.log(
      `      used ${start} → ${afterV4} (IPv4 ${first} B) → ${afterV6} (IPv6 ${second} B)`,
    );
    expect([first, second]).to.deep.equal([800_000, 800_000]);
    // Each transfer counts at least its payload (plus headers and the other way's ACKs).
    expect(afterV4 - start).to.be.at.least(800_000);
    expect(afterV6 - afterV4).to.be.at.least(800_000);
    const left = CAP - afterV6;
    // A mixed transfer: IPv6 and IPv4 together, more than is left.
    const [a, b] = await Promise.all([
      transfer(v6, 'download', 1_000_000),
      transfer({ ...v4, port: 5303 }, 'download', 1_000_000),
    ]);
    console.log(`      ${left} B left; then IPv6 ${a} B and IPv4 ${b} B got through`);
    expect(a + b).to.be.at.most(left);
    // Headers and ACKs are counted too: payload reaches most, not all, of what was left.
    expect(a + b).to.be.at.least(left * 0.75);
    expect(usedBy()).to.equal(CAP);
    const listed = await api(daemon!, 'GET', '/api/peers');
    const peer = (listed.body as { peers: Array<Record<string, unknown>> }).peers[0]!;
    expect(peer['data_cap']).to.deep.include({ quota_bytes: CAP, used_bytes: CAP });
    expect(trySh(inNs(CLIENT_NS, 'busybox ping -c 2 -W 2 -q fd96::1'))).to.equal(false);
    expect(trySh(inNs(CLIENT_NS, 'busybox ping -c 2 -W 2 -q 10.96.0.1'))).to.equal(false);
  });

  it('deletes the peer with its limit and cap: no IPv4 or IPv6 filter, class, quota or element stays', async () => {
    const key = encodeURIComponent(created.peer.publicKey);
    const limited = await api(daemon!, 'PATCH', `/api/peer/${key}/speed-limit`, {
      bytesPerSecond: LIMIT,
    });
    expect(limited.status).to.equal(200);
    expect(flowids(IFNAME, 11)).to.deep.equal(['1:2']);
    const response = await api(
      daemon!,
      'DELETE',
      `/api/peer/${encodeURIComponent(created.peer.publicKey)}`,
    );
    expect(response.status).to.equal(200);
    expect(wgShowDump(IFNAME).peers).to.deep.equal([]);
    for (const dev of [IFNAME, IFB]) {
      expect(flowids(dev, 10), dev).to.deep.equal([]);
      expect(flowids(dev, 11), dev).to.deep.equal([]);
      expect(classes(dev), dev).to.not.include('1:2');
    }
    expect(quotas()).to.deep.equal([]);
    expect(mapElements('caps')).to.deep.equal([]);
    expect(mapElements('caps6')).to.deep.equal([]);
  });

  it('removes the IPv6 filter of a limited peer deleted behind its back before a restart, with its class', async function () {
    this.timeout(240_000);
    const other = (await api(daemon!, 'POST', '/api/peer')).body as unknown as Created;
    const key = encodeURIComponent(other.peer.publicKey);
    const limited = await api(daemon!, 'PATCH', `/api/peer/${key}/speed-limit`, {
      bytesPerSecond: LIMIT,
    });
    expect(limited.status).to.equal(200);
    expect(flowids(IFNAME, 11)).to.deep.equal(['1:2']);
    sh(`wg set ${IFNAME} peer ${other.peer.publicKey} remove`);
    await daemon!.stop();
    daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });
    // The list notices a limit no peer has; the next write repairs it before anything else.
    expect((await api(daemon, 'GET', '/api/peers')).status).to.equal(200);
    expect((await api(daemon, 'POST', '/api/peer')).status).to.equal(201);
    for (const dev of [IFNAME, IFB]) {
      expect(flowids(dev, 11), dev).to.deep.equal([]);
      expect(classes(dev), dev).to.not.include('1:2');
    }
  });
});

describe('dual-stack peers: an interface that gains an IPv6 address (real kernel, issue 18)', function () {
  const IF7 = 'wgd7';
  const TABLE7 = `wg_peerd_${IF7}`;
  const LISTEN7 = '127.0.0.1:18097';
  const ARGS = ['--interface', IF7, '--listen', LISTEN7, '--endpoint-host', SERVER_UNDERLAY_IP];
  let daemon: DaemonProcess | undefined;

  const quotaIn = (family: 'ip' | 'inet'): Record<string, unknown> | undefined => {
    if (!trySh(`nft list table ${family} ${TABLE7} >/dev/null`)) return undefined;
    const listed = JSON.parse(sh(`nft -j list table ${family} ${TABLE7}`)) as {
      nftables: NftEntry[];
    };
    return listed.nftables.find((e) => e['quota'])?.['quota'];
  };

  before(function () {
    assertInTestVm();
    setupClientNamespace();
    removeDaemonLeftovers(IF7);
    deleteNftTable('inet', TABLE7);
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IF7);
    deleteNftTable('inet', TABLE7);
    teardownClientNamespace();
  });

  it('moves its caps, with what they counted, to the inet table when the daemon starts again', async function () {
    this.timeout(300_000);
    daemon = await startDaemon({ args: ARGS, listen: LISTEN7 });
    const created = (await api(daemon, 'POST', '/api/peer')).body as unknown as Created;
    expect(created.peer.ipv6).to.equal(undefined);
    const dir = mkdtempSync(path.join(tmpdir(), 'wgd7-'));
    const client7 = connectClient(CLIENT_NS, saveClientConfig(dir, 'wgd7c', created.config));
    const key = encodeURIComponent(created.peer.publicKey);
    const capped = await api(daemon, 'PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: CAP });
    expect(capped.status).to.equal(200);
    const ends = { client: client7, clientIp: '10.8.0.2', serverIp: '10.8.0.1', port: 5401 };
    expect(await transfer(ends, 'download', 300_000)).to.equal(300_000);
    const before = Number(quotaIn('ip')?.['used']);
    expect(before).to.be.at.least(300_000);
    await daemon.stop();

    sh(`ip -6 addr add fd97::1/64 dev ${IF7} nodad`);
    daemon = await startDaemon({ args: ARGS, listen: LISTEN7 });
    expect(quotaIn('ip')).to.equal(undefined); // the ip table is gone
    const moved = quotaIn('inet');
    expect(moved).to.deep.include({ name: 'q_10_8_0_2', bytes: CAP });
    expect(Number(moved!['used'])).to.equal(before);
    expect(daemon.output()).to.contain('moved it to table inet');
    const listed = await api(daemon, 'GET', '/api/peers');
    const peer = (listed.body as { peers: Array<Record<string, unknown>> }).peers[0]!;
    expect(peer['data_cap']).to.deep.include({ quota_bytes: CAP, used_bytes: before });
  });
});
