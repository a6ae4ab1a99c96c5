/**
 * Throttling after the cap on a real kernel: a WireGuard server in the VM's root namespace, a
 * client in `wgcli`, bulk TCP through the tunnel in each direction (support/bulk-rate.ts, the
 * speed-limit tests' transfers), and `nft -j` as the independent oracle of what the kernel
 * holds. The switch happens in the kernel: nothing of the daemon runs while traffic flows here,
 * only the kernel layer's Quota sets the cap, lists it and resets it.
 */
import { expect } from 'chai';
import { Quota } from '../../src/kernel/quota';
import { THROTTLE_BURST_BYTES } from '../../src/kernel/quota/throttle';
import type { CapPlan } from '../../src/kernel/types';
import { type BulkEnds, expectRateAtLeast, expectRateNear, measureBulk } from './support/bulk-rate';
import {
  CLIENT_NS,
  assertInTestVm,
  deleteLink,
  deleteNftTable,
  inNs,
  ping,
  setupClientNamespace,
  setupTunnel,
  sh,
  teardownClientNamespace,
} from './support/topology';

const SERVER_IF = 'wgth0';
const CLIENT_IF = 'wgth1';
const SERVER_IP = '10.85.0.1';
const PEER_IP = '10.85.0.2';
const LISTEN_PORT = 51851;
const TCP_PORT = 5311;
const TABLE = `wg_peerd_${SERVER_IF}`;
/** The throttle rate, each direction. */
const THROTTLE = 100_000;
/** "Within 20% at the cap" (issue 19). */
const TOLERANCE = 0.2;
/** Small enough to be used up in a few seconds at full speed, large enough to notice. */
const CAP = 4_000_000;
/** Used up by one short transfer even at the throttle rate (its first second's burst alone). */
const PERIOD_CAP = 150_000;
const PEER = { address: PEER_IP, publicKey: 'throttle+test+peer+key+0000000000000000000=' };

/**
 * Throttled transfers: the first seconds are not measured, so that neither TCP's slow start
 * nor the bucket's one-second fill (full when the cap runs out; see quota/throttle.ts) count.
 */
const THROTTLED: BulkEnds = {
  serverIp: SERVER_IP,
  peerIp: PEER_IP,
  port: TCP_PORT,
  warmupMs: 4000,
  measureMs: 6000,
  streams: 4,
};
/** A short transfer at full speed, well inside what the cap lets through. */
const SHORT: BulkEnds = { ...THROTTLED, warmupMs: 300, measureMs: 1000 };

interface NftEntry {
  [kind: string]: Record<string, unknown>;
}

function nftJson(command: string): NftEntry[] {
  return (JSON.parse(sh(`nft -j ${command}`)) as { nftables: NftEntry[] }).nftables.filter(
    (entry) => !entry.metainfo,
  );
}

/** The peer's quota as nft reads it. */
function nftQuota(): { bytes: number; used: number } {
  const quota = nftJson(`list quota ip ${TABLE} q_10_85_0_2`).find((e) => e.quota)?.quota;
  return { bytes: Number(quota?.bytes), used: Number(quota?.used) };
}

/** The peer's two limit objects as nft reads them. */
function nftLimits(): Array<Record<string, unknown>> {
  return ['tu_10_85_0_2', 'td_10_85_0_2'].map(
    (name) => nftJson(`list limit ip ${TABLE} ${name}`).find((e) => e.limit)?.limit ?? {},
  );
}

describe('throttling after the cap (real kernel, through a WireGuard tunnel)', function () {
  this.timeout(600_000);
  let quota: Quota;
  let fullSpeed = 0;

  before(function () {
    assertInTestVm();
    setupClientNamespace();
    setupTunnel({
      serverIf: SERVER_IF,
      clientIf: CLIENT_IF,
      serverIp: SERVER_IP,
      peerIp: PEER_IP,
      listenPort: LISTEN_PORT,
    });
    quota = new Quota();
  });

  after(function () {
    quota?.close();
    deleteNftTable('ip', TABLE);
    deleteLink(SERVER_IF);
    teardownClientNamespace();
  });

  it('holds the throttle in the kernel: limit objects `over` the rate, and the map elements', async function () {
    await quota.ensure(SERVER_IF, [PEER]);
    await quota.setCap(SERVER_IF, PEER, CAP, undefined, { throttleBytesPerSecond: THROTTLE });
    for (const limit of nftLimits()) {
      expect(limit).to.include({ rate: THROTTLE, per: 'second', rate_unit: 'bytes', inv: true });
      // nft prints the burst in its largest whole unit: 65,536 bytes are 64 kbytes.
      expect(limit).to.include({ burst: THROTTLE_BURST_BYTES / 1024, burst_unit: 'kbytes' });
    }
    const ruleset = sh(`nft list table ip ${TABLE}`);
    console.log(ruleset.replace(/^/gm, '      | '));
    expect(ruleset).to.match(
      /map throttle_caps \{[^}]*elements = \{ 10\.85\.0\.2 : "q_10_85_0_2" \}/s,
    );
    expect(ruleset).to.match(
      /map throttle_up \{[^}]*elements = \{ 10\.85\.0\.2 : "tu_10_85_0_2" \}/s,
    );
    expect(ruleset).to.match(
      /map throttle_down \{[^}]*elements = \{ 10\.85\.0\.2 : "td_10_85_0_2" \}/s,
    );
    // Not in caps: that map's rule would drop it over the cap.
    expect(ruleset).to.match(/map caps \{[^}]*\}/s);
    expect(/map caps \{[^}]*elements/s.test(ruleset)).to.equal(false);
    expect(await quota.listCaps(SERVER_IF)).to.deep.equal(
      new Map([
        [
          PEER_IP,
          {
            quotaBytes: CAP,
            usedBytes: 0,
            enforced: true,
            throttleBytesPerSecond: THROTTLE,
            throttled: false,
          },
        ],
      ]),
    );
  });

  it('changes the rate by replacing both limit objects: the kernel does not update one in place', async function () {
    // The kernel's side of it, with nft alone: an `add` of an existing limit (NEWOBJ without
    // EXCL) is acknowledged and changes nothing, as nft_limit has no update hook.
    const probe = 'wgth_probe';
    deleteNftTable('ip', probe);
    sh(`nft add table ip ${probe}`);
    sh(`nft add limit ip ${probe} l '{ rate over 1000 bytes/second }'`);
    sh(`nft add limit ip ${probe} l '{ rate over 2000 bytes/second }'`);
    const kept = nftJson(`list limit ip ${probe} l`).find((e) => e.limit)?.limit;
    console.log(`      nft add of an existing limit at 2000 B/s: it stays at ${kept?.['rate']}`);
    expect(kept).to.include({ rate: 1000 });
    deleteNftTable('ip', probe);
    // Ours: a new rate holds on both objects at once.
    await quota.setCap(SERVER_IF, PEER, CAP, undefined, { throttleBytesPerSecond: 2 * THROTTLE });
    for (const limit of nftLimits()) expect(limit).to.include({ rate: 2 * THROTTLE });
    await quota.setCap(SERVER_IF, PEER, CAP, undefined, { throttleBytesPerSecond: THROTTLE });
    for (const limit of nftLimits()) expect(limit).to.include({ rate: THROTTLE });
    expect(nftQuota()).to.deep.equal({ bytes: CAP, used: 0 });
  });

  it('runs at full speed under the cap', async function () {
    expect((await quota.listCaps(SERVER_IF)).get(PEER_IP)?.throttled).to.equal(false);
    fullSpeed = await expectRateAtLeast(
      () => measureBulk('download', SHORT),
      3 * THROTTLE,
      'download under the cap',
    );
    // Not checked after: at full speed the transfer may use the cap up as it ends (1.5 MB/s on
    // 6.1 used 4 MB within the 1.3 s and the data in flight).
  });

  it('slows a download to the throttle rate within 20% once the cap is used up', async function () {
    await expectRateNear(
      () => measureBulk('download', THROTTLED),
      THROTTLE,
      TOLERANCE,
      'download over the cap',
    );
    const { bytes, used } = nftQuota();
    expect(used).to.equal(bytes); // nft: used up
    expect((await quota.listCaps(SERVER_IF)).get(PEER_IP)).to.include({
      throttled: true,
      usedBytes: CAP,
    });
  });

  it('slows an upload to the throttle rate within 20% (the same cap counts both ways)', async function () {
    await expectRateNear(
      () => measureBulk('upload', THROTTLED),
      THROTTLE,
      TOLERANCE,
      'upload over the cap',
    );
  });

  it('stays at the throttle rate, both ways, and after a restart of the kernel layer', async function () {
    quota.close();
    quota = new Quota(); // nothing kept: the record is the quota object's userdata
    expect((await quota.listCaps(SERVER_IF)).get(PEER_IP)).to.include({
      throttleBytesPerSecond: THROTTLE,
      throttled: true,
    });
    for (const direction of ['download', 'upload'] as const) {
      await expectRateNear(
        () => measureBulk(direction, THROTTLED),
        THROTTLE,
        TOLERANCE,
        `${direction} still over the cap`,
      );
    }
  });

  it('a reset restores full speed at once', async function () {
    const closing = await quota.resetCap(SERVER_IF, PEER);
    expect(closing).to.deep.equal({ quotaBytes: CAP, usedBytes: CAP });
    expect((await quota.listCaps(SERVER_IF)).get(PEER_IP)?.throttled).to.equal(false);
    const rate = await expectRateAtLeast(
      () => measureBulk('download', SHORT),
      3 * THROTTLE,
      'download after the reset',
    );
    console.log(
      `      ${(rate / THROTTLE).toFixed(1)}x the throttle (${Math.round(fullSpeed)} B/s before)`,
    );
  });

  it('a billing-period reset ends the throttling too, keeping the rate and the limits', async function () {
    const day = 86_400_000;
    const plan: CapPlan = {
      period: 'day',
      periodStart: { at: Date.now() - 3 * day, offsetMinutes: 0 },
      periodFrom: Date.now() - 2 * day,
      previousUsedBytes: null,
    };
    await quota.setCap(SERVER_IF, PEER, PERIOD_CAP, plan); // afterCap left out: still throttles
    await measureBulk('download', SHORT); // uses the small cap up
    expect((await quota.listCaps(SERVER_IF)).get(PEER_IP)).to.include({
      throttleBytesPerSecond: THROTTLE,
      throttled: true,
    });
    const made = await quota.resetPeriod(SERVER_IF, PEER, plan.periodFrom + day);
    expect(made?.closing).to.include({ quotaBytes: PERIOD_CAP, usedBytes: PERIOD_CAP });
    const after = (await quota.listCaps(SERVER_IF)).get(PEER_IP);
    expect(after).to.include({ throttleBytesPerSecond: THROTTLE, throttled: false });
    expect(after?.plan?.previousUsedBytes).to.equal(PERIOD_CAP);
    const { bytes, used } = nftQuota();
    console.log(`      nft after the period reset: ${used} of ${bytes} bytes used`);
    expect(used).to.be.below(bytes); // not over: the throttle rule no longer matches
    for (const limit of nftLimits()) expect(limit).to.include({ rate: THROTTLE, inv: true });
    const ruleset = sh(`nft list table ip ${TABLE}`);
    expect(ruleset).to.match(
      /map throttle_caps \{[^}]*elements = \{ 10\.85\.0\.2 : "q_10_85_0_2" \}/s,
    );
    await quota.setCap(SERVER_IF, PEER, CAP, null); // the period ends, the cap as before
  });

  it('back to block: the limits and throttle elements go, the caps map leads to the quota again', async function () {
    await quota.setCap(SERVER_IF, PEER, CAP, undefined, { throttleBytesPerSecond: null });
    const ruleset = sh(`nft list table ip ${TABLE}`);
    expect(ruleset).to.not.match(/limit t[ud]_10_85_0_2/);
    expect(ruleset).to.match(/map caps \{[^}]*elements = \{ 10\.85\.0\.2 : "q_10_85_0_2" \}/s);
    expect((await quota.listCaps(SERVER_IF)).get(PEER_IP)).to.deep.include({
      quotaBytes: CAP,
      enforced: true,
    });
  });
});

describe('throttling after the cap on a dual-stack interface (real kernel, IPv6 through the tunnel)', function () {
  this.timeout(600_000);
  const IF6 = 'wgth6';
  const CLIENT6 = 'wgth7';
  const SERVER_V4 = '10.85.6.1';
  const PEER_V4 = '10.85.6.2';
  const SERVER_V6 = 'fd85::1';
  const PEER_V6 = 'fd85::2';
  const TABLE6 = `wg_peerd_${IF6}`;
  const peer = { address: PEER_V4, address6: PEER_V6, publicKey: PEER.publicKey };
  const ends: BulkEnds = { ...THROTTLED, serverIp: SERVER_V6, peerIp: PEER_V6, port: TCP_PORT + 1 };
  let quota: Quota;

  before(async function () {
    assertInTestVm();
    setupClientNamespace();
    const { server, client } = setupTunnel({
      serverIf: IF6,
      clientIf: CLIENT6,
      serverIp: SERVER_V4,
      peerIp: PEER_V4,
      listenPort: LISTEN_PORT + 1,
    });
    sh(`ip -6 addr add ${SERVER_V6}/64 dev ${IF6} nodad`);
    sh(inNs(CLIENT_NS, `ip -6 addr add ${PEER_V6}/64 dev ${CLIENT6} nodad`));
    sh(`wg set ${IF6} peer ${client.key.publicKey} allowed-ips ${PEER_V4}/32,${PEER_V6}/128`);
    sh(
      inNs(
        CLIENT_NS,
        `wg set ${CLIENT6} peer ${server.key.publicKey} allowed-ips ${SERVER_V4}/32,${SERVER_V6}/128`,
      ),
    );
    ping(CLIENT_NS, SERVER_V6);
    quota = new Quota();
    await quota.setDualStack(IF6, true);
    await quota.ensure(IF6, [peer]);
  });

  after(function () {
    quota?.close();
    deleteNftTable('inet', TABLE6);
    deleteLink(IF6);
    teardownClientNamespace();
  });

  it('leads the IPv6 /128 to the same quota and limits as the IPv4 address, not to caps6', async function () {
    await quota.setCap(IF6, peer, CAP, undefined, { throttleBytesPerSecond: THROTTLE });
    const ruleset = sh(`nft list table inet ${TABLE6}`);
    console.log(ruleset.replace(/^/gm, '      | '));
    const elements = (map: string): string =>
      new RegExp(`map ${map} \\{[^}]*?(elements = \\{[^}]*\\})?\\s*\\}`, 's').exec(ruleset)?.[1] ??
      '';
    expect(elements('throttle_caps6')).to.contain(`${PEER_V6} : "q_10_85_6_2"`);
    expect(elements('throttle_up6')).to.contain(`${PEER_V6} : "tu_10_85_6_2"`);
    expect(elements('throttle_down6')).to.contain(`${PEER_V6} : "td_10_85_6_2"`);
    expect(elements('caps6')).to.equal('');
    expect(elements('caps')).to.equal('');
  });

  for (const direction of ['download', 'upload'] as const) {
    it(`slows an IPv6 ${direction} to the throttle rate within 20% once the cap is used up`, async function () {
      await expectRateNear(
        () => measureBulk(direction, ends),
        THROTTLE,
        TOLERANCE,
        `IPv6 ${direction} over the cap`,
      );
      expect((await quota.listCaps(IF6)).get(PEER_V4)).to.include({ throttled: true });
    });
  }

  it('a reset restores full speed on IPv6', async function () {
    await quota.resetCap(IF6, peer);
    await expectRateAtLeast(
      () => measureBulk('download', { ...ends, warmupMs: 300, measureMs: 1000 }),
      3 * THROTTLE,
      'IPv6 download after the reset',
    );
  });
});
