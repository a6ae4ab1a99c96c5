/**
 * The list's slow parts on cadences of their own (issue 29, src/peers/usage-cadence.ts): the
 * caps read again after a change, a kernel notice or their cadence, the configuration after a
 * change, an nf_tables notice or its safety cadence, read_at the caps read's instant, and the
 * passes over the caps only on a read of them. A fake kernel whose caps read takes 500 ms of a
 * clock the test moves, so the caps' cadence is 10 × 500 ms = 5 s against a 1 s window.
 */
import { expect } from 'chai';
import { PeerService, type PeerSnapshot } from '../../../src/peers';
import { COST_FACTOR, CONFIG_SAFETY_MS, UsageCadence } from '../../../src/peers/usage-cadence';
import { listPeers } from '../../support/peer-list';
import { FakeKernel } from '../support/fake-kernel';
import { captureLog } from '../support/log-capture';

const START = Date.parse('2026-03-01T12:00:00.000Z');
const WINDOW_MS = 1000;
/** What the fake caps read costs on the test's clock. */
const CAPS_READ_MS = 500;
const IP = '10.8.0.2';

function key(n: number): string {
  return Buffer.alloc(32, n).toString('base64');
}

/** A service over one capped peer; one clock (ms) drives both its wall and monotonic time. */
function capped(windowMs = WINDOW_MS) {
  const kernel = FakeKernel.withInterface();
  kernel.putPeer(key(1), ['10.8.0.2/32']);
  let clock = 0;
  const listCaps = kernel.quota.listCaps.bind(kernel.quota);
  kernel.quota.listCaps = async (ifname) => {
    clock += CAPS_READ_MS;
    return listCaps(ifname);
  };
  const exhaustionReads: number[] = [];
  const svc = new PeerService({
    kernel,
    interfaceName: 'wg0',
    logger: captureLog().logger,
    now: () => START + clock,
    monotonicNow: () => clock,
    listMaxAgeMs: windowMs,
    exhaustion: {
      read: (read) => {
        exhaustionReads.push(read.takenAt);
        return new Map();
      },
    },
  });
  const advance = (ms: number): void => {
    clock += ms;
  };
  return {
    kernel,
    svc,
    advance,
    at: () => clock,
    capsReads: () => kernel.count('quota.listCaps'),
    exhaustionReads,
  };
}

/** The service with its cap set (a write), then the first list read after it. */
async function cappedAndRead(windowMs = WINDOW_MS) {
  const s = capped(windowMs);
  await s.svc.setDataCap(key(1), 1_000_000);
  const first = await s.svc.snapshot();
  return { ...s, first };
}

const usedIn = (snapshot: PeerSnapshot): number | undefined => snapshot.caps.get(IP)?.usedBytes;

describe('peers/usage-cadence: the caps and the configuration read on cadences of their own (issue 29)', () => {
  it(`reads the caps again only once they are about ${COST_FACTOR} times their read's cost old, while reading the device on every read`, async () => {
    const { kernel, svc, advance, capsReads, first } = await cappedAndRead();
    const capsBefore = capsReads();
    const devicesBefore = kernel.count('getDevice');
    kernel.setUsed(IP, 4_000); // traffic, no write
    advance(WINDOW_MS);
    const second = await svc.snapshot();
    expect(second).to.not.equal(first);
    expect(kernel.count('getDevice')).to.equal(devicesBefore + 1);
    expect(capsReads(), 'caps read within their cadence').to.equal(capsBefore);
    expect(usedIn(second)).to.equal(0);
    advance(COST_FACTOR * CAPS_READ_MS - WINDOW_MS);
    const third = await svc.snapshot();
    expect(capsReads()).to.equal(capsBefore + 1);
    expect(usedIn(third)).to.equal(4_000);
  });

  it('lists read_at as the instant of the caps read its used_bytes come from, not the device read', async () => {
    const { svc, advance, first } = await cappedAndRead();
    const [entry] = await listPeers(svc, null);
    expect(entry!.capReadAt).to.equal(new Date(first.takenAt).toISOString());
    advance(2 * WINDOW_MS);
    const [later] = await listPeers(svc, null);
    const second = await svc.snapshot();
    expect(second.takenAt).to.be.above(first.takenAt);
    expect(later!.capReadAt, 'caps not read again').to.equal(new Date(first.takenAt).toISOString());
    expect(second.capsReadAt).to.equal(first.takenAt);
  });

  it('reads the caps again after each write of the daemon: a list after a write shows the write (limit, cap, suspension)', async () => {
    const { svc, capsReads, first } = await cappedAndRead();
    const before = capsReads();
    await svc.setDataCap(key(1), 2_000_000);
    const afterCap = await svc.snapshot();
    expect(afterCap.caps.get(IP)?.quotaBytes).to.equal(2_000_000);
    expect(afterCap.capsReadAt).to.be.above(first.takenAt);
    await svc.setSpeedLimit(key(1), 125_000);
    expect((await svc.snapshot()).limits.get(IP)).to.deep.include({ download: 125_000 });
    await svc.setSuspension(key(1), true);
    expect((await svc.snapshot()).suspended?.get(IP)).to.equal(key(1));
    await svc.removeDataCap(key(1));
    expect((await svc.snapshot()).caps.has(IP)).to.equal(false);
    expect(capsReads()).to.be.at.least(before + 4);
  });

  it("reads the caps and the suspended set again after an nf_tables notification of another program's change", async () => {
    const { kernel, svc, advance, capsReads } = await cappedAndRead();
    const caps = capsReads();
    const suspendedReads = kernel.count('suspension.listSuspended');
    kernel.setUsed(IP, 7_000);
    const suspended = kernel.suspended.get('wg0') ?? new Map<string, string>();
    suspended.set(IP, key(1)); // `nft add element` by another program
    kernel.suspended.set('wg0', suspended);
    svc.kernelNoticed('nftables');
    advance(WINDOW_MS);
    const next = await svc.snapshot();
    expect(capsReads()).to.equal(caps + 1);
    expect(kernel.count('suspension.listSuspended')).to.equal(suspendedReads + 1);
    expect(usedIn(next)).to.equal(7_000);
    expect(next.suspended?.get(IP)).to.equal(key(1));
  });

  it('reads the caps, and only the caps, again after a quota exhaustion notice', async () => {
    const { kernel, svc, advance, capsReads } = await cappedAndRead();
    const caps = capsReads();
    const limitReads = kernel.count('shaper.listLimits');
    kernel.setUsed(IP, 1_000_000);
    svc.kernelNoticed('caps');
    advance(WINDOW_MS);
    const next = await svc.snapshot();
    expect(capsReads()).to.equal(caps + 1);
    expect(kernel.count('shaper.listLimits')).to.equal(limitReads);
    expect(usedIn(next)).to.equal(1_000_000);
  });

  it('does not run the passes over the caps (the exhaustion times among them) on a device-only read', async () => {
    const { svc, advance, exhaustionReads, first } = await cappedAndRead();
    expect(exhaustionReads).to.deep.equal([first.takenAt]);
    advance(WINDOW_MS);
    await svc.snapshot();
    advance(WINDOW_MS);
    await svc.snapshot();
    expect(exhaustionReads, 'no caps read, no pass').to.deep.equal([first.takenAt]);
    advance(COST_FACTOR * CAPS_READ_MS);
    const read = await svc.snapshot();
    expect(exhaustionReads).to.deep.equal([first.takenAt, read.takenAt]);
  });

  it(`reads the speed limits again on the safety cadence (${CONFIG_SAFETY_MS / 1000} s), so drift behind the daemon's back is noticed`, async () => {
    const { kernel, svc, advance } = await cappedAndRead();
    await svc.setSpeedLimit(key(1), 125_000);
    await svc.snapshot();
    const limitReads = kernel.count('shaper.listLimits');
    kernel.limits.get('wg0')?.clear(); // tc qdisc del behind the daemon's back
    // Read again once the safety cadence less a window old: none is listed older than it.
    advance(CONFIG_SAFETY_MS - WINDOW_MS - 1);
    expect((await svc.snapshot()).limits.has(IP), 'within the safety cadence').to.equal(true);
    expect(kernel.count('shaper.listLimits')).to.equal(limitReads);
    advance(1);
    advance(WINDOW_MS);
    expect((await svc.snapshot()).limits.has(IP)).to.equal(false);
    expect(kernel.count('shaper.listLimits')).to.equal(limitReads + 1);
  });

  it('reads everything on every read with --list-max-age 0', async () => {
    const { kernel, svc, capsReads } = await cappedAndRead(0);
    const caps = capsReads();
    kernel.setUsed(IP, 3_000);
    expect(usedIn(await svc.snapshot())).to.equal(3_000);
    await svc.snapshot();
    expect(capsReads()).to.equal(caps + 2);
  });
});

describe('peers/usage-cadence: UsageCadence', () => {
  it('leaves the caps due when a change is noticed while their read runs', () => {
    let now = 0;
    const cadence = new UsageCadence(WINDOW_MS, () => now);
    const plan = cadence.plan();
    expect(plan.caps).to.equal(true);
    cadence.changed('caps'); // during the read
    now = 10;
    cadence.done(plan, { capsMs: 10, configMs: 10 });
    expect(cadence.plan()).to.deep.include({ caps: true, config: false });
  });

  it(`holds the caps until max(the window, ${COST_FACTOR} × their cost) less a window old, never less than ${COST_FACTOR - 1} × their cost`, () => {
    let now = 0;
    const cadence = new UsageCadence(WINDOW_MS, () => now);
    // Cheap caps (10 × 20 ms under the window): the next read a window later reads them.
    cadence.done(cadence.plan(), { capsMs: 20, configMs: 0 });
    expect(cadence.capsHeldMs()).to.equal((COST_FACTOR - 1) * 20);
    now = 179;
    expect(cadence.plan().caps).to.equal(false);
    now = 180;
    expect(cadence.plan().caps).to.equal(true);
    // Dear caps: 10 × 300 ms = 3 s less the window is 2 s, but 9 × 300 ms is 2.7 s.
    now = 1000;
    cadence.done(cadence.plan(), { capsMs: 300, configMs: 0 });
    expect(cadence.capsHeldMs()).to.equal(2700);
    now = 3699;
    expect(cadence.plan().caps).to.equal(false);
    now = 3700;
    expect(cadence.plan().caps).to.equal(true);
    // Dearer: 10 × 2 s less the window, 19 s (9 × 2 s is 18 s).
    cadence.done(cadence.plan(), { capsMs: 2000, configMs: 0 });
    expect(cadence.capsHeldMs()).to.equal(19_000);
  });

  it("marks both parts due on the daemon's own change and on an nf_tables notification, only the caps on an exhaustion", () => {
    const cadence = new UsageCadence(WINDOW_MS, () => 0);
    const settle = (): void => cadence.done(cadence.plan(), { capsMs: 0, configMs: 0 });
    settle();
    cadence.changed('caps');
    expect(cadence.plan()).to.deep.include({ caps: true, config: false });
    settle();
    cadence.changed('nftables');
    expect(cadence.plan()).to.deep.include({ caps: true, config: true });
    settle();
    cadence.changed('all');
    expect(cadence.plan()).to.deep.include({ caps: true, config: true });
  });
});
