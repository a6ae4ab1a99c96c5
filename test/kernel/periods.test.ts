/**
 * Billing periods end to end (issue 19, "Done when" 1b and 1c): the daemon (`npm start`'s
 * dist/src/main.js), a real WireGuard client in the wgcli namespace made from the create
 * response, pings through the tunnel as the traffic, and `nft` as the oracle of the quota's
 * count. (b) A period whose start lies a day minus a few seconds in the past: its reset falls
 * during the test, zeroes the count in the kernel (a used-up cap lets pings through again) and
 * keeps the closing usage nft showed as previous_period_used_bytes. (c) A reset that falls due
 * while the daemon is stopped is made at its next start, logged as late, and the kernel kept
 * the plan (in the quota's userdata) across the stop.
 */
import { expect } from 'chai';
import {
  type CreatedPeer,
  type DaemonProcess,
  api,
  configureClient,
  scrape,
  startDaemon,
} from './support/daemon';
import {
  CLIENT_NS,
  SERVER_UNDERLAY_IP,
  assertInTestVm,
  deleteLink,
  removeDaemonLeftovers,
  setupClientNamespace,
  sh,
  teardownClientNamespace,
  trySh,
} from './support/topology';

const IFNAME = 'wgpe0';
const CLIENT_IF = 'wgpec';
const SERVER_IP = '10.85.0.1';
const LISTEN = '127.0.0.1:18175';
const ARGS = [
  '--interface',
  IFNAME,
  '--address',
  `${SERVER_IP}/24`,
  '--listen-port',
  '51875',
  '--listen',
  LISTEN,
  '--endpoint-host',
  SERVER_UNDERLAY_IP,
  '--list-max-age',
  '0',
];
const DAY = 86_400_000;

interface ListedCap {
  quota_bytes: number;
  used_bytes: number;
  enforced: boolean;
  period: string | null;
  period_start: string | null;
  next_reset: string | null;
  previous_period_used_bytes: number | null;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Whether one ping through the tunnel gets an answer within `seconds`. */
function pings(seconds = 2): boolean {
  return trySh(`ip netns exec ${CLIENT_NS} busybox ping -c 1 -w ${seconds} -q ${SERVER_IP}`);
}

/** `at` as ISO 8601 on the wall clock of UTC+02:00 (the daemon must keep the offset given). */
function isoPlus2(at: number): string {
  return `${new Date(at + 2 * 3_600_000).toISOString().slice(0, 19)}+02:00`;
}

describe('billing periods of a data cap (real kernel, pings through a WireGuard tunnel)', function () {
  this.timeout(240_000);
  let daemon: DaemonProcess | undefined;
  let created: CreatedPeer;

  const start = async (): Promise<void> => {
    daemon = await startDaemon({ args: ARGS, listen: LISTEN, prefix: ['env'] });
  };
  const stop = async (): Promise<void> => {
    expect(await daemon!.stop()).to.equal(0);
    daemon = undefined;
  };
  const capPath = (): string => `/api/peer/${encodeURIComponent(created.peer.publicKey)}/data-cap`;
  const listedCap = async (): Promise<ListedCap> => {
    const peers = (await api(daemon!, 'GET', '/api/peers')).body.peers as Array<{
      public_key: string;
      data_cap: ListedCap | null;
    }>;
    const cap = peers.find((p) => p.public_key === created.peer.publicKey)?.data_cap;
    if (!cap) throw new Error('the peer has no listed cap');
    return cap;
  };
  /** The quota as nft reads it: bytes, used, and the comment nft finds in the userdata. */
  const nftQuota = (): { bytes: number; used: number; comment?: string } => {
    const name = `q_${created.peer.ip.replace(/\./g, '_')}`;
    const { nftables } = JSON.parse(sh(`nft -j list quota ip wg_peerd_${IFNAME} ${name}`)) as {
      nftables: Array<{ quota?: { bytes: number; used: number; comment?: string } }>;
    };
    return nftables.find((e) => e.quota)!.quota!;
  };
  /** Pings until the kernel's quota is used up (nft shows used = bytes) and pings fail. */
  const useUp = async (): Promise<void> => {
    for (let i = 0; i < 60 && nftQuota().used < nftQuota().bytes; i++) {
      trySh(`ip netns exec ${CLIENT_NS} busybox ping -c 10 -i 0.05 -s 1200 -w 3 -q ${SERVER_IP}`);
    }
    expect(nftQuota().used).to.equal(nftQuota().bytes);
    expect(pings(), 'a used-up cap lets no ping through').to.equal(false);
  };

  before(async function () {
    assertInTestVm();
    removeDaemonLeftovers(IFNAME);
    setupClientNamespace();
    await start();
    const reply = await api(daemon!, 'POST', '/api/peer');
    expect(reply.status).to.equal(201);
    created = reply.body as unknown as CreatedPeer;
    configureClient(created, CLIENT_IF, `${SERVER_IP}/32`);
    expect(pings(10), 'the tunnel works before any cap').to.equal(true);
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed') {
      console.log(daemon?.output().split('\n').slice(-30).join('\n'));
    }
  });

  after(async function () {
    await daemon?.stop();
    teardownClientNamespace();
    deleteLink(CLIENT_IF, CLIENT_NS);
    removeDaemonLeftovers(IFNAME);
  });

  it('answers 400 with details for a period without a cap, an unknown period and a start without an offset, changing nothing in the kernel', async () => {
    const before = sh(`nft list ruleset`);
    const noCap = await api(daemon!, 'PATCH', capPath(), { period: 'month' });
    expect(noCap.status).to.equal(400);
    expect(noCap.body.details).to.deep.equal([
      { field: '/period', message: 'the peer has no data cap: quotaBytes is required' },
    ]);
    const unknown = await api(daemon!, 'PATCH', capPath(), { quotaBytes: 5000, period: 'year' });
    expect(unknown.status).to.equal(400);
    expect(JSON.stringify(unknown.body.details)).to.contain('/period');
    const local = await api(daemon!, 'PATCH', capPath(), {
      quotaBytes: 5000,
      period: 'day',
      periodStart: '2026-03-01T00:00:00',
    });
    expect(local.status).to.equal(400);
    expect(JSON.stringify(local.body.details)).to.contain('/periodStart');
    expect(sh(`nft list ruleset`)).to.equal(before);
  });

  it('(b) resets a used-up cap at its period boundary: full traffic, zero usage, the closing usage kept', async () => {
    const quotaBytes = 30_000;
    expect((await api(daemon!, 'PATCH', capPath(), { quotaBytes })).status).to.equal(200);
    await useUp();
    // A day period whose start was a day ago less 30 s: its first reset falls in 30 s, a margin for
    // the checks below. With 12 s, the reset came first twice (6.12 once; 6.1 once with both
    // kernels' suites side by side: the plan's PATCH answered 11.6 s before the reset, and two nft
    // runs and a 2 s ping still took longer), and the list then showed the reset, not the plan.
    // The list is now read first, and the test says so if the checks outlast the margin.
    const due = Math.ceil((Date.now() + 30_000) / 1000) * 1000;
    const periodStart = isoPlus2(due - DAY);
    const set = await api(daemon!, 'PATCH', capPath(), { period: 'day', periodStart });
    expect(set.status, JSON.stringify(set.body)).to.equal(200);
    const planned = await listedCap();
    const listedAt = Date.now();
    // The plan changed the quota object, not what it counted: still used up, still cut off.
    expect(nftQuota()).to.include({ bytes: quotaBytes, used: quotaBytes });
    expect(nftQuota().comment, 'nft still reads the owner comment').to.equal(
      `wg-peerd peer ${created.peer.publicKey}`,
    );
    expect(pings()).to.equal(false);
    expect(listedAt, 'the list before the reset was read before the reset was due').to.be.below(
      due,
    );
    expect(planned).to.deep.include({
      quota_bytes: quotaBytes,
      used_bytes: quotaBytes,
      period: 'day',
      period_start: periodStart.replace('+02:00', '.000+02:00'),
      next_reset: new Date(due).toISOString(),
      previous_period_used_bytes: null,
    });
    expect(Date.now(), 'the checks before the reset ended before it was due').to.be.below(due);

    // The reset: the count falls back in the kernel, and pings pass again.
    const deadline = due + 20_000;
    while (nftQuota().used === quotaBytes && Date.now() < deadline) await sleep(200);
    const resetSeenAt = Date.now();
    expect(nftQuota().used, 'the kernel count was reset').to.be.below(quotaBytes);
    expect(resetSeenAt).to.be.at.least(due);
    expect(pings(10), 'a reset cap lets pings through again').to.equal(true);
    const after = await listedCap();
    expect(after).to.deep.include({
      quota_bytes: quotaBytes,
      period: 'day',
      next_reset: new Date(due + DAY).toISOString(),
      previous_period_used_bytes: quotaBytes,
    });
    expect(after.used_bytes).to.be.below(5_000);
    const metrics = (await scrape(daemon!)).text;
    expect(metrics).to.match(/^wg_peerd_data_cap_period_resets_total 1$/m);
    expect(metrics).to.match(
      new RegExp(
        `^wg_peerd_peer_data_cap_previous_period_used_bytes\\{[^}]*ip="${created.peer.ip}"\\} ${quotaBytes}$`,
        'm',
      ),
    );
    expect(daemon!.output()).to.contain('billing-period reset made');
  });

  it('(c) makes at its start a reset that fell due while the daemon was stopped, and logs it as late', async () => {
    // Some usage in the period, then a reset due in 8 s, and the daemon stopped at once.
    trySh(`ip netns exec ${CLIENT_NS} busybox ping -c 3 -i 0.1 -s 500 -w 3 -q ${SERVER_IP}`);
    const due = Math.ceil((Date.now() + 8_000) / 1000) * 1000;
    const reply = await api(daemon!, 'PATCH', capPath(), {
      period: 'day',
      periodStart: new Date(due - DAY).toISOString(),
    });
    expect(reply.status, JSON.stringify(reply.body)).to.equal(200);
    await stop();
    const usedWhileDown = nftQuota().used;
    expect(usedWhileDown).to.be.above(0);
    // Past the boundary by more than the daemon's "late" bound (10 s); nothing resets meanwhile.
    while (Date.now() < due + 12_000) await sleep(250);
    expect(nftQuota().used, 'nothing reset the count while the daemon was stopped').to.equal(
      usedWhileDown,
    );
    await start();
    const deadline = Date.now() + 20_000;
    let cap = await listedCap();
    while (cap.previous_period_used_bytes !== usedWhileDown && Date.now() < deadline) {
      await sleep(250);
      cap = await listedCap();
    }
    expect(cap).to.deep.include({
      period: 'day',
      next_reset: new Date(due + DAY).toISOString(),
      previous_period_used_bytes: usedWhileDown,
    });
    expect(cap.used_bytes).to.be.below(usedWhileDown);
    expect(nftQuota().used).to.be.below(usedWhileDown);
    const late = daemon!
      .output()
      .split('\n')
      .find((line) => line.includes('data_cap_period_reset') && line.includes('made late'));
    expect(late, 'the late reset is logged').to.not.equal(undefined);
    expect(JSON.parse(late!.slice(late!.indexOf('{')))).to.include({
      due: new Date(due).toISOString(),
      level: 40,
    });
  });

  it('ends the period with "period": null and keeps the usage', async () => {
    const before = nftQuota().used;
    const reply = await api(daemon!, 'PATCH', capPath(), { period: null });
    expect(reply.status).to.equal(200);
    const cap = await listedCap();
    expect(cap).to.deep.include({ period: null, period_start: null, next_reset: null });
    expect(nftQuota().used).to.be.at.least(before);
  });
});
