import { expect } from 'chai';
import { type DaemonProcess, type JsonResponse, api, startDaemon } from './support/daemon';
import { assertInTestVm, createWgInterface, removeDaemonLeftovers, sh } from './support/topology';

// Issue 10's findings, reproduced against a real kernel with a running daemon and changes made
// behind its back with ip/tc/nft (which are also the oracles of what the kernel holds).
const IFNAME = 'wgb0';
const LISTEN = '127.0.0.1:18090';
// --list-max-age 0: these tests change the kernel behind the daemon's back and list at once;
// within the default freshness window (1 s) a list may still show the read from before.
const DAEMON_ARGS = [
  '--list-max-age',
  '0',
  '--interface',
  IFNAME,
  '--listen',
  LISTEN,
  '--endpoint-host',
  '192.0.2.1',
];

describe('the interface deleted under a running daemon (real kernel)', function () {
  let daemon: DaemonProcess | undefined;

  before(async function () {
    assertInTestVm();
    removeDaemonLeftovers(IFNAME);
    daemon = await startDaemon({ args: DAEMON_ARGS, listen: LISTEN });
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IFNAME);
  });

  it('answers every route 503 INTERFACE_MISSING once `ip link del` removed it', async () => {
    const created = await api(daemon!, 'POST', '/api/peer');
    expect(created.status).to.be.oneOf([200, 201]);
    const key = encodeURIComponent(
      (created.body as unknown as { peer: { publicKey: string } }).peer.publicKey,
    );
    expect(
      (await api(daemon!, 'PATCH', `/api/peer/${key}/speed-limit`, { bytesPerSecond: 11_111 }))
        .status,
    ).to.equal(200);
    expect(
      (await api(daemon!, 'PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: 1_000_000 })).status,
    ).to.equal(200);

    sh(`ip link del ${IFNAME}`);

    const routes: Array<[string, string, Record<string, unknown>?]> = [
      ['GET', '/api/peers'],
      ['GET', '/api/peers?status=ALIVE'],
      ['POST', '/api/peer'],
      ['PATCH', `/api/peer/${key}/speed-limit`, { bytesPerSecond: 5_000 }],
      ['DELETE', `/api/peer/${key}/speed-limit`],
      ['PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: 5_000 }],
      ['DELETE', `/api/peer/${key}/data-cap`],
      ['DELETE', `/api/peer/${key}`],
    ];
    const answers: string[] = [];
    // Twice: the first list may be answered from a read in flight before the delete.
    for (let round = 0; round < 2; round++) {
      for (const [method, route, body] of routes) {
        const response: JsonResponse = await api(daemon!, method, route, body);
        answers.push(`${method} ${route} ${response.status} ${String(response.body.code)}`);
      }
    }
    expect(answers.filter((a) => !/ 503 INTERFACE_MISSING$/.test(a))).to.deep.equal([]);
  });
});

interface Listed {
  public_key: string;
  ip_address: string;
  speed_limit_bytes_per_second: number | null;
  speed_limit_holds: string | null;
  data_cap: { quota_bytes: number; used_bytes: number; enforced: boolean } | null;
}

const IF2 = 'wgb1';
const IFB2 = `ifb-${IF2}`;
const LISTEN2 = '127.0.0.1:18091';
const TABLE2 = `wg_peerd_${IF2}`;

/** tc class ids 1:<minor> (hex) that hold a peer's limit on a device, sorted. */
function peerClasses(dev: string): string[] {
  return sh(`tc class show dev ${dev} 2>/dev/null || true`)
    .split('\n')
    .map((line) => /class htb (1:[0-9a-f]+) parent 1:ffff/.exec(line)?.[1])
    .filter((id): id is string => id !== undefined)
    .sort();
}

/** flowid 1:<minor> of the peers' u32 key nodes on a device, sorted. */
function peerFilters(dev: string): string[] {
  return sh(`tc filter show dev ${dev} parent 1: 2>/dev/null || true`)
    .split('\n')
    .map((line) => /flowid (1:[0-9a-f]+)/.exec(line)?.[1])
    .filter((id): id is string => id !== undefined)
    .sort();
}

/** Quota objects and map elements of the daemon's table, as nft lists them. */
function nftCaps(): { quotas: string[]; elements: string } {
  const text = sh(`nft list table ip ${TABLE2} 2>/dev/null || true`);
  const quotas = [...text.matchAll(/quota (q_[0-9_]+) \{/g)].map((m) => m[1]).sort();
  const elements = /elements = \{([^}]*)\}/.exec(text)?.[1]?.replace(/\s+/g, ' ').trim() ?? '';
  return { quotas, elements };
}

describe('changes behind the daemon back are listed truthfully, repaired on the next write, logged (real kernel)', function () {
  let daemon: DaemonProcess | undefined;
  const args = [
    '--list-max-age',
    '0',
    '--interface',
    IF2,
    '--listen',
    LISTEN2,
    '--endpoint-host',
    '192.0.2.1',
  ];
  const keys: string[] = [];
  const list = async (): Promise<Listed[]> =>
    (await api(daemon!, 'GET', '/api/peers')).body.peers as unknown as Listed[];
  const byIp = async (ip: string): Promise<Listed | undefined> =>
    (await list()).find((p) => p.ip_address === ip);
  const create = async (): Promise<string> => {
    const response = await api(daemon!, 'POST', '/api/peer');
    expect(response.status).to.be.oneOf([200, 201]);
    const key = (response.body as unknown as { peer: { publicKey: string } }).peer.publicKey;
    keys.push(key);
    return encodeURIComponent(key);
  };
  const warnLines = (event: string): number =>
    daemon!
      .output()
      .split('\n')
      .filter((line) => line.includes(`"event":"${event}"`) && line.includes('"level":40')).length;

  before(async function () {
    assertInTestVm();
    removeDaemonLeftovers(IF2);
    daemon = await startDaemon({ args, listen: LISTEN2 });
  });

  afterEach(function () {
    // What the daemon said is the first thing to read when one of these fails.
    if (this.currentTest?.state === 'failed') {
      console.log(daemon?.output().split('\n').slice(-40).join('\n'));
    }
  });

  after(async function () {
    await daemon?.stop();
    removeDaemonLeftovers(IF2);
  });

  it('after the interface is recreated, no old limit or cap reaches a new peer and nothing is left for addresses without a peer', async () => {
    const old = [await create(), await create(), await create()]; // 10.8.0.2 .. .4
    for (const key of old) {
      const r = await api(daemon!, 'PATCH', `/api/peer/${key}/speed-limit`, {
        bytesPerSecond: 11_111,
      });
      expect(r.status).to.equal(200);
    }
    const capped = await api(daemon!, 'PATCH', `/api/peer/${old[2]}/data-cap`, {
      quotaBytes: 1_000_000,
    });
    expect(capped.status).to.equal(200);
    expect(peerClasses(IFB2)).to.deep.equal(['1:2', '1:3', '1:4']);

    // Same name, same subnet, a new device: WireGuard's peers and the tc state of wgb1 go with
    // the old one; the IFB and the nft table stay.
    createWgInterface({ name: IF2, address: '10.8.0.1/24', listenPort: 51821 });
    const fresh = [await create(), await create()]; // 10.8.0.2 and .3 again
    const limited = await api(daemon!, 'PATCH', `/api/peer/${fresh[0]}/speed-limit`, {
      bytesPerSecond: 50_000,
    });
    expect(limited.status).to.equal(200);

    // Only the new peer that was limited has a class and a key node, on both devices.
    expect(peerClasses(IF2)).to.deep.equal(['1:2']);
    expect(peerClasses(IFB2)).to.deep.equal(['1:2']);
    expect(peerFilters(IF2)).to.deep.equal(['1:2']);
    expect(peerFilters(IFB2)).to.deep.equal(['1:2']);
    expect(sh(`tc class show dev ${IF2} classid 1:2`)).to.match(/rate 400Kbit/); // 50,000 B/s
    // The old cap of 10.8.0.4 is gone with its peer; the new peers have none.
    expect(nftCaps().quotas).to.deep.equal([]);
    expect(nftCaps().elements).to.equal('');
    const peers = await list();
    expect(
      peers.map((p) => [p.ip_address, p.speed_limit_bytes_per_second, p.data_cap]).sort(),
    ).to.deep.equal([
      ['10.8.0.2', 50_000, null],
      ['10.8.0.3', null, null],
    ]);
    expect(warnLines('kernel_repaired')).to.be.above(0);
  });

  it('IFB deleted: listed as download-only before the next write, repaired on it (both again), logged', async () => {
    sh(`ip link del ${IFB2}`);
    expect(await byIp('10.8.0.2')).to.include({
      speed_limit_bytes_per_second: 50_000,
      speed_limit_holds: 'download',
    });
    const lost = warnLines('kernel_state_lost');
    expect(lost).to.be.above(0);
    const repaired = warnLines('kernel_repaired');
    const key = encodeURIComponent(keys[4]!); // 10.8.0.3: a write that is not about limits
    expect(
      (await api(daemon!, 'PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: 2_000_000 })).status,
    ).to.equal(200);
    expect(await byIp('10.8.0.2')).to.include({
      speed_limit_bytes_per_second: 50_000,
      speed_limit_holds: 'both',
    });
    expect(peerClasses(IFB2)).to.deep.equal(['1:2']);
    expect(peerFilters(IFB2)).to.deep.equal(['1:2']);
    expect(warnLines('kernel_repaired')).to.be.above(repaired);
  });

  it("wg0's root qdisc deleted: listed as upload-only, repaired on the next write, logged", async () => {
    sh(`tc qdisc del dev ${IF2} root`);
    expect(await byIp('10.8.0.2')).to.include({
      speed_limit_bytes_per_second: 50_000,
      speed_limit_holds: 'upload',
    });
    const repaired = warnLines('kernel_repaired');
    const key = encodeURIComponent(keys[4]!);
    expect((await api(daemon!, 'DELETE', `/api/peer/${key}/data-cap`)).status).to.equal(200);
    expect(await byIp('10.8.0.2')).to.include({ speed_limit_holds: 'both' });
    expect(peerClasses(IF2)).to.deep.equal(['1:2']);
    expect(peerFilters(IF2)).to.deep.equal(['1:2']);
    expect(warnLines('kernel_repaired')).to.be.above(repaired);
  });

  it('nft table deleted: caps listed as not enforced with the last values, restored on the next write, logged', async () => {
    const key = encodeURIComponent(keys[3]!); // 10.8.0.2
    expect(
      (await api(daemon!, 'PATCH', `/api/peer/${key}/data-cap`, { quotaBytes: 3_000_000 })).status,
    ).to.equal(200);
    expect((await byIp('10.8.0.2'))?.data_cap).to.deep.include({
      quota_bytes: 3_000_000,
      enforced: true,
    });
    sh(`nft delete table ip ${TABLE2}`);
    expect((await byIp('10.8.0.2'))?.data_cap).to.deep.include({
      quota_bytes: 3_000_000,
      enforced: false,
    });
    const repaired = warnLines('kernel_repaired');
    const other = encodeURIComponent(keys[4]!);
    expect(
      (await api(daemon!, 'PATCH', `/api/peer/${other}/speed-limit`, { bytesPerSecond: 20_000 }))
        .status,
    ).to.equal(200);
    expect(nftCaps().quotas).to.deep.equal(['q_10_8_0_2']);
    expect(sh(`nft list quota ip ${TABLE2} q_10_8_0_2`)).to.match(/over 3000000 bytes/);
    expect((await byIp('10.8.0.2'))?.data_cap).to.deep.include({
      quota_bytes: 3_000_000,
      enforced: true,
    });
    expect(warnLines('kernel_repaired')).to.be.above(repaired);
  });
});
