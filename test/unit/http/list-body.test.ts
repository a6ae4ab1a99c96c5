import { expect } from 'chai';
import fc from 'fast-check';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import { createApp } from '../../../src/http/app';
import { entriesOf, listPeers, referenceBody, toPeerJson } from '../../support/peer-list';
import {
  ListBodies,
  PreviousBodies,
  buildListBody,
  fragmentHolding,
  negotiateEncoding,
  type ListFilter,
} from '../../../src/http/list-body';
import type {
  CapPlan,
  Kernel,
  KernelDataCap,
  LimitState,
  WireGuardDevice,
  WireGuardPeer,
} from '../../../src/kernel/types';
import {
  ALIVE,
  DEAD,
  PeerService,
  type PeerServiceApi,
  type PeerSnapshot,
} from '../../../src/peers';
import { captureLog } from '../support/log-capture';

const TAKEN_AT = Date.parse('2026-03-01T12:00:00.000Z');
const FILTERS: ListFilter[] = [null, ALIVE, DEAD];

interface Generated {
  device: WireGuardDevice;
  limits: Map<string, LimitState>;
  caps: Map<string, KernelDataCap>;
}

/**
 * A device of `count` peers covering every shape a peer can take in the list: never handshaked,
 * handshaked just now, at the 150 s threshold, long ago; IPv4 and IPv6 endpoints or none; a
 * tunnel /32 with further v4 and v6 prefixes, or no /32 at all; with and without limit and cap.
 */
function generated(count: number): Generated {
  const peers: WireGuardPeer[] = [];
  const limits = new Map<string, LimitState>();
  const caps = new Map<string, KernelDataCap>();
  for (let i = 0; i < count; i++) {
    const ip = `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
    const ages = [null, 0, 150_000, 150_001, 59_999, 3_600_000 * 30];
    const age = ages[i % ages.length]!;
    const allowedIps: WireGuardPeer['allowedIps'] =
      i % 11 === 5
        ? [{ family: 6, address: `fd00::${i.toString(16)}`, cidr: 128 }]
        : [{ family: 4, address: ip, cidr: 32 }];
    if (i % 7 === 3) allowedIps.push({ family: 4, address: '192.168.0.0', cidr: 24 });
    if (i % 5 === 1) allowedIps.push({ family: 6, address: '2001:db8::', cidr: 64 });
    peers.push({
      publicKey: Buffer.alloc(32, i % 251)
        .fill(i >> 8, 0, 1)
        .toString('base64'),
      endpoint:
        i % 3 === 0 ? null : i % 3 === 1 ? `203.0.113.${i % 256}:51820` : '[2001:db8::1]:4500',
      lastHandshake: age === null ? null : new Date(TAKEN_AT - age),
      rxBytes: i * 1_000_003,
      txBytes: i % 4 === 0 ? 0 : 2 ** 40 + i,
      persistentKeepalive: i % 2 === 0 ? 0 : 25,
      allowedIps,
    });
    // Whole limits, and limits that hold one way only (a device lost behind the daemon's back).
    const rate = 125_000 + i;
    if (i % 4 === 1) limits.set(ip, { download: rate, upload: i % 12 === 9 ? null : rate });
    if (i % 12 === 3) limits.set(ip, { download: null, upload: rate });
    // Enforced caps, and some the kernel no longer enforces.
    if (i % 6 === 2) {
      caps.set(ip, { quotaBytes: 2_000_000 + i, usedBytes: i, enforced: i % 18 !== 14 });
    }
  }
  const device = {
    name: 'wg0',
    ifindex: 7,
    publicKey: Buffer.alloc(32, 9).toString('base64'),
    listenPort: 51820,
    fwmark: 0,
    peers,
  };
  return { device, limits, caps };
}

/** A PeerService over a kernel that answers with `data`, with a window long enough to list twice. */
function serviceOver(data: Generated, takenAt = TAKEN_AT): PeerService {
  const kernel = {
    wireguard: { getDevice: async () => data.device },
    shaper: { listLimits: async () => new Map(data.limits) },
    quota: { listCaps: async () => new Map(data.caps) },
    suspension: { listSuspended: async () => new Map() },
    names: { listNames: async () => [] },
    expiry: { listExpiries: async () => [] },
    link: {},
    // Lists only: no change ever runs, so a pass-through queue serves.
    changes: { run: <T>(task: () => Promise<T>): Promise<T> => task() },
  } as unknown as Pick<
    Kernel,
    'changes' | 'wireguard' | 'link' | 'shaper' | 'quota' | 'suspension' | 'names' | 'expiry'
  >;
  return new PeerService({
    kernel,
    interfaceName: 'wg0',
    logger: captureLog().logger,
    now: () => takenAt,
    listMaxAgeMs: 60_000,
  });
}

/** Today's serializer, the reference: PeerEntry objects through toPeerJson and JSON.stringify. */
async function reference(service: PeerService, filter: ListFilter): Promise<string> {
  const entries = await listPeers(service, filter);
  return JSON.stringify({
    success: true,
    peers: entries.map(toPeerJson),
    total_count: entries.length,
    filter,
  });
}

describe('http/list-body: the bytes equal the reference serializer', () => {
  it('on a generated 5,000-peer snapshot, for every filter and slice size', async () => {
    const service = serviceOver(generated(5000));
    const snapshot = await service.snapshot();
    for (const filter of FILTERS) {
      const expected = await reference(service, filter);
      for (const slice of [1, 3, 2000]) {
        const body = await buildListBody(snapshot, filter, slice);
        expect(body.toString('utf8') === expected, `filter ${filter}, slice ${slice}`).to.equal(
          true,
        );
      }
    }
    // The generator covers what it claims: every status and both filters non-empty.
    const parsed = JSON.parse(await reference(service, null)) as {
      peers: Array<{ status: string; data_cap: unknown; speed_limit_bytes_per_second: unknown }>;
    };
    const statuses = new Set(parsed.peers.map((p) => p.status));
    expect([...statuses].sort()).to.deep.equal(['ALIVE', 'DEAD', 'No handshake yet']);
    expect(parsed.peers.some((p) => p.data_cap !== null)).to.equal(true);
    expect(parsed.peers.some((p) => p.speed_limit_bytes_per_second !== null)).to.equal(true);
  });

  it('on an empty device', async () => {
    const service = serviceOver(generated(0));
    const snapshot = await service.snapshot();
    for (const filter of FILTERS) {
      expect((await buildListBody(snapshot, filter)).toString()).to.equal(
        await reference(service, filter),
      );
    }
  });

  it('on arbitrary endpoints and counters (property)', async () => {
    const peer = fc.record({
      endpoint: fc.option(fc.string({ unit: 'binary' }), { nil: null }),
      rxBytes: fc.nat(),
      txBytes: fc.maxSafeNat(),
      keepalive: fc.nat({ max: 65535 }),
      ageMs: fc.option(fc.nat({ max: 10 ** 10 }), { nil: null }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(peer, { maxLength: 20 }), async (drawn) => {
        const data = generated(drawn.length);
        drawn.forEach((d, i) => {
          Object.assign(data.device.peers[i]!, {
            endpoint: d.endpoint,
            rxBytes: d.rxBytes,
            txBytes: d.txBytes,
            persistentKeepalive: d.keepalive,
            lastHandshake: d.ageMs === null ? null : new Date(TAKEN_AT - d.ageMs),
          });
        });
        const service = serviceOver(data);
        const snapshot = await service.snapshot();
        for (const filter of FILTERS) {
          const body = await buildListBody(snapshot, filter, 4);
          expect(body.toString('utf8')).to.equal(await reference(service, filter));
        }
      }),
      { numRuns: 50 },
    );
  });
});

describe('http/list-body: fragments of unchanged peers are reused across snapshots', () => {
  it('equals the reference after time, limits and caps moved on, over the same peer objects', async () => {
    // The same peer objects in every snapshot, as DumpMemo hands them out for idle peers.
    const data = generated(600);
    const before = serviceOver(data);
    await buildListBody(await before.snapshot(), null, 7); // fragments for every peer
    const later: Generated = {
      device: data.device,
      limits: new Map(data.limits),
      caps: new Map(data.caps),
    };
    const ips = data.device.peers.map((p) => p.allowedIps[0]!.address);
    later.limits.set(ips[8]!, { download: 1, upload: 2 }); // a new limit
    later.limits.delete(ips[1]!); // a limit gone
    later.limits.set(ips[13]!, { download: 125_013, upload: null }); // one way lost
    later.caps.set(ips[2]!, { quotaBytes: 2_000_002, usedBytes: 999, enforced: true }); // used
    later.caps.set(ips[20]!, { quotaBytes: 5, usedBytes: 5, enforced: false }); // no longer
    later.caps.delete(ips[26]!);
    // 61 s on: every handshake's minute and the statuses at the 150 s threshold move.
    for (const takenAt of [TAKEN_AT + 61_000, TAKEN_AT + 61_500, TAKEN_AT + 3_600_000]) {
      const after = serviceOver(later, takenAt);
      const snapshot = await after.snapshot();
      for (const filter of FILTERS) {
        const body = await buildListBody(snapshot, filter, 7);
        expect(body.toString('utf8') === (await reference(after, filter)), `${filter}`).to.equal(
          true,
        );
      }
    }
    // And back at the first moment, with the first limits and caps.
    const again = await before.snapshot();
    expect((await buildListBody({ ...again }, null)).toString()).to.equal(
      await reference(before, null),
    );
  });
});

// Issue 17: a peer's fragment is reused while its view is current (stillCurrent, src/peers/view.ts).
// Each case changes exactly one thing a fragment depends on, over the very same peer object (as
// DumpMemo hands out an idle peer), so each fails if its comparison is dropped from stillCurrent.
describe('http/list-body: each reuse condition of a fragment is held', () => {
  const IP = '10.8.0.2';
  function peerAged(ageMs: number | null): WireGuardPeer {
    return {
      publicKey: Buffer.alloc(32, 77).toString('base64'),
      endpoint: null,
      lastHandshake: ageMs === null ? null : new Date(TAKEN_AT - ageMs),
      rxBytes: 1,
      txBytes: 2,
      persistentKeepalive: 0,
      allowedIps: [{ family: 4, address: IP, cidr: 32 }],
    };
  }
  function snapshotOf(
    peer: WireGuardPeer,
    at: number,
    limit: LimitState | null,
    cap: KernelDataCap | null,
  ): PeerSnapshot {
    return {
      takenAt: at,
      readMs: 0,
      device: { ...generated(0).device, peers: [peer] },
      limits: new Map(limit === null ? [] : [[IP, limit]]),
      caps: new Map(cap === null ? [] : [[IP, cap]]),
    };
  }
  /** Builds a body for `first` (the fragment), then for `second`: both the oracle's bytes. */
  async function bothAsReference(first: PeerSnapshot, second: PeerSnapshot): Promise<string[]> {
    const fields: string[] = [];
    for (const snapshot of [first, second]) {
      for (const filter of [null, ALIVE, DEAD] as ListFilter[]) {
        const body = await buildListBody(snapshot, filter);
        expect(body.toString(), `${filter}`).to.equal(
          referenceBody(entriesOf(snapshot, filter), filter).toString(),
        );
      }
      const [entry] = entriesOf(snapshot, null);
      fields.push(JSON.stringify(toPeerJson(entry!)));
    }
    expect(fields[0], 'the case changes what the list shows').to.not.equal(fields[1]);
    return fields;
  }
  const LIMIT = { download: 125_000, upload: 125_000 };
  const CAP = { quotaBytes: 1_000_000, usedBytes: 5_000, enforced: true };

  it('rewrites the minutes when they move and the status does not (59 s → 61 s)', async () => {
    const peer = peerAged(59_000);
    await bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, null),
      snapshotOf(peer, TAKEN_AT + 2_000, null, null),
    );
  });

  it('rewrites the status when it flips within one minute (149 s → 151 s)', async () => {
    const peer = peerAged(149_000);
    const [before, after] = await bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, null),
      snapshotOf(peer, TAKEN_AT + 2_000, null, null),
    );
    expect(before).to.contain('"minutes_since_handshake":2,"status":"ALIVE"');
    expect(after).to.contain('"minutes_since_handshake":2,"status":"DEAD"');
  });

  it('rewrites the download rate', async () => {
    const peer = peerAged(0);
    await bothAsReference(
      snapshotOf(peer, TAKEN_AT, LIMIT, null),
      snapshotOf(peer, TAKEN_AT, { ...LIMIT, download: 250_000 }, null),
    );
  });

  it('rewrites where a limit holds when the upload side is lost', async () => {
    const peer = peerAged(0);
    await bothAsReference(
      snapshotOf(peer, TAKEN_AT, LIMIT, null),
      snapshotOf(peer, TAKEN_AT, { ...LIMIT, upload: null }, null),
    );
  });

  it('rewrites the cap', async () => {
    const peer = peerAged(0);
    await bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, CAP),
      snapshotOf(peer, TAKEN_AT, null, { ...CAP, quotaBytes: 2_000_000 }),
    );
  });

  it('rewrites read_at when the caps were read again, the bytes unchanged (issue 29)', async () => {
    const peer = peerAged(0);
    const [before, after] = await bothAsReference(snapshotOf(peer, TAKEN_AT, null, CAP), {
      ...snapshotOf(peer, TAKEN_AT + 1_000, null, { ...CAP }),
      capsReadAt: TAKEN_AT + 900,
    });
    expect(before).to.contain(`"read_at":"${new Date(TAKEN_AT).toISOString()}"`);
    expect(after).to.contain(`"read_at":"${new Date(TAKEN_AT + 900).toISOString()}"`);
  });

  it('rewrites the bytes used', async () => {
    const peer = peerAged(0);
    await bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, CAP),
      snapshotOf(peer, TAKEN_AT, null, { ...CAP, usedBytes: 5_001 }),
    );
  });

  it('rewrites a cap the kernel stopped enforcing', async () => {
    const peer = peerAged(0);
    await bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, CAP),
      snapshotOf(peer, TAKEN_AT, null, { ...CAP, enforced: false }),
    );
  });

  it('rewrites the time a used-up cap ran out once it is known, and again when it is cleared', async () => {
    const peer = peerAged(0);
    const used = { ...CAP, usedBytes: CAP.quotaBytes };
    const at = TAKEN_AT - 500;
    const known = (exhausted: Map<string, number>): PeerSnapshot => ({
      ...snapshotOf(peer, TAKEN_AT, null, used),
      exhausted,
    });
    const [before, after] = await bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, used),
      known(new Map([[IP, at]])),
    );
    expect(before).to.contain('"exhausted_at":null');
    expect(after).to.contain(`"exhausted_at":"${new Date(at).toISOString()}"`);
    await bothAsReference(known(new Map([[IP, at]])), known(new Map([[IP, at + 1]])));
  });

  // A monthly plan anchored on 2026-01-31 10:00 (+02:00), whose count began at the last reset.
  const PLAN: CapPlan = {
    period: 'month',
    periodStart: { at: Date.parse('2026-01-31T08:00:00Z'), offsetMinutes: 120 },
    periodFrom: Date.parse('2026-10-31T08:00:00Z'),
    previousUsedBytes: 9_000,
  };
  /** The same idle peer with a capped plan, then with `change` made to the plan. */
  const rewritesPlan = (change: Partial<CapPlan>): Promise<string[]> => {
    const peer = peerAged(0);
    return bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, { ...CAP, plan: PLAN }),
      snapshotOf(peer, TAKEN_AT, null, { ...CAP, plan: { ...PLAN, ...change } }),
    );
  };

  it('rewrites the billing period', async () => {
    await rewritesPlan({ period: 'week' });
  });

  it('rewrites the period start', async () => {
    await rewritesPlan({
      periodStart: { ...PLAN.periodStart, at: PLAN.periodStart.at + 3_600_000 },
    });
  });

  it("rewrites the period start's offset (the same instant on another wall clock)", async () => {
    await rewritesPlan({ periodStart: { ...PLAN.periodStart, offsetMinutes: 0 } });
  });

  it('rewrites the next reset once a period reset was made (a new start of the count)', async () => {
    await rewritesPlan({ periodFrom: Date.parse('2026-11-30T08:00:00Z') });
  });

  it("rewrites the previous period's usage", async () => {
    await rewritesPlan({ previousUsedBytes: 9_001 });
  });

  it('rewrites the throttle rate after the cap', async () => {
    const peer = peerAged(0);
    await bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, { ...CAP, throttleBytesPerSecond: 100_000 }),
      snapshotOf(peer, TAKEN_AT, null, { ...CAP, throttleBytesPerSecond: 200_000 }),
    );
  });

  it('rewrites a cap that begins to throttle', async () => {
    const peer = peerAged(0);
    const used = { ...CAP, usedBytes: CAP.quotaBytes, throttleBytesPerSecond: 100_000 };
    await bothAsReference(
      snapshotOf(peer, TAKEN_AT, null, { ...used, throttled: false }),
      snapshotOf(peer, TAKEN_AT, null, { ...used, throttled: true }),
    );
  });

  it('rewrites a peer that was suspended', async () => {
    const peer = peerAged(0);
    await bothAsReference(snapshotOf(peer, TAKEN_AT, null, null), {
      ...snapshotOf(peer, TAKEN_AT, null, null),
      suspended: new Map([[IP, peer.publicKey]]),
    });
  });

  it('reuses the fragment when nothing it shows changed (the same body again)', async () => {
    const peer = peerAged(30_000);
    const previous = new PreviousBodies();
    const first = await buildListBody(snapshotOf(peer, TAKEN_AT, LIMIT, CAP), null, 1, previous);
    // Another read a second later, new limit and cap objects of equal values, the caps as the
    // first read read them (a device-only read, issue 29: src/peers/usage-cadence.ts).
    const again = {
      ...snapshotOf(peer, TAKEN_AT + 1_000, { ...LIMIT }, { ...CAP }),
      capsReadAt: TAKEN_AT,
    };
    expect(await buildListBody(again, null, 1, previous)).to.equal(first);
  });
  it("keeps each peer's JSON in the last body it went into, not as text beside it, and builds the next body from there byte for byte (issue 29)", async () => {
    const reference = (snapshot: PeerSnapshot, filter: ListFilter): string =>
      referenceBody(entriesOf(snapshot, filter), filter).toString('utf8');
    const data = generated(300);
    const previous = new PreviousBodies();
    const first = await serviceOver(data).snapshot();
    expect(fragmentHolding(data.device.peers[0]!)).to.equal(null);
    const firstBody = await buildListBody(first, null, 7, previous);
    for (const peer of data.device.peers) expect(fragmentHolding(peer)).to.equal('body');
    // One cap changes: that peer's JSON is written again, every other one copied from the
    // first body; the bytes are the reference serializer's.
    const ip = data.device.peers[2]!.allowedIps[0]!.address;
    const changed = {
      ...data,
      caps: new Map([...data.caps, [ip, { quotaBytes: 9, usedBytes: 9, enforced: true }]]),
    };
    const second = await serviceOver(changed).snapshot();
    const secondBody = await buildListBody(second, null, 7, previous);
    expect(secondBody).to.not.equal(firstBody);
    expect(secondBody.toString('utf8')).to.equal(reference(second, null));
    for (const peer of data.device.peers) expect(fragmentHolding(peer)).to.equal('body');
    // A filtered body moves the fragments it holds too, and stays the reference's.
    for (const filter of FILTERS.slice(1)) {
      const filtered = await buildListBody(second, filter, 7, previous);
      expect(filtered.toString('utf8')).to.equal(reference(second, filter));
    }
    expect((await buildListBody(second, null, 7, new PreviousBodies())).toString('utf8')).to.equal(
      reference(second, null),
    );
  });

  it('lets the last body go before a body with other bytes is built, and keeps the new one (issue 29: never two whole bodies held)', async () => {
    const peer = peerAged(30_000);
    const order: string[] = [];
    class Watched extends PreviousBodies {
      override forget(filter: Parameters<PreviousBodies['forget']>[0]): void {
        order.push('forget');
        super.forget(filter);
      }
      override keep(...args: Parameters<PreviousBodies['keep']>): void {
        order.push('keep');
        super.keep(...args);
      }
    }
    const previous = new Watched();
    await buildListBody(snapshotOf(peer, TAKEN_AT, LIMIT, CAP), null, 1, previous);
    const changed = snapshotOf(peer, TAKEN_AT, LIMIT, { ...CAP, usedBytes: CAP.usedBytes + 1 });
    const second = await buildListBody(changed, null, 1, previous);
    // Each build of new bytes: the last body let go first, then the new one kept.
    expect(order).to.deep.equal(['forget', 'keep', 'forget', 'keep']);
    // The new body is the one kept: the same read again answers it, building nothing.
    expect(await buildListBody(changed, null, 1, previous)).to.equal(second);
    expect(order).to.have.length(4);
  });
});

describe('http/list-body: a body whose fragments did not change is answered again', () => {
  it('gives the same Buffer for a read of an idle device, and new reference bytes after any change', async () => {
    const data = generated(300);
    const previous = new PreviousBodies();
    const first = await serviceOver(data).snapshot();
    const bodies = await Promise.all(
      FILTERS.map((filter) => buildListBody(first, filter, 7, previous)),
    );
    // A later read of the same peers at the same moment: the very same bytes, per filter.
    const again = await serviceOver(data).snapshot();
    expect(again).to.not.equal(first);
    for (const [i, filter] of FILTERS.entries()) {
      expect(await buildListBody(again, filter, 7, previous)).to.equal(bodies[i]);
    }
    // Each kind of change gives a new body, equal to the reference serializer's bytes.
    const ips = data.device.peers.map((p) => p.allowedIps[0]!.address);
    const peer0 = data.device.peers[0]!;
    const changes: Array<[string, Generated, number]> = [
      ['a minute on', data, TAKEN_AT + 60_000],
      [
        'a limit',
        { ...data, limits: new Map([...data.limits, [ips[8]!, { download: 1, upload: 2 }]]) },
        TAKEN_AT,
      ],
      [
        'a cap',
        {
          ...data,
          caps: new Map([...data.caps, [ips[2]!, { quotaBytes: 9, usedBytes: 9, enforced: true }]]),
        },
        TAKEN_AT,
      ],
      [
        'a peer',
        {
          ...data,
          device: {
            ...data.device,
            peers: [{ ...peer0, rxBytes: peer0.rxBytes + 1 }, ...data.device.peers.slice(1)],
          },
        },
        TAKEN_AT,
      ],
      [
        'a peer fewer',
        { ...data, device: { ...data.device, peers: data.device.peers.slice(1) } },
        TAKEN_AT,
      ],
    ];
    for (const [what, changed, takenAt] of changes) {
      const service = serviceOver(changed, takenAt);
      const snapshot = await service.snapshot();
      const body = await buildListBody(snapshot, null, 7, previous);
      expect(body, what).to.not.equal(bodies[0]);
      expect(body.toString('utf8') === (await reference(service, null)), what).to.equal(true);
    }
  });

  it('compresses a body answered again once, through ListBodies', async () => {
    const data = generated(200);
    const bodies = new ListBodies();
    const first = await serviceOver(data).snapshot();
    const second = await serviceOver(data).snapshot();
    const gz = await bodies.body(first, null, 'gzip');
    expect(await bodies.body(second, null, 'gzip')).to.equal(gz);
    expect(bodies.builds).to.equal(2); // each read's fragments gathered; the bytes taken again
    expect(bodies.compressions).to.equal(1);
    expect(zlib.gunzipSync(gz).toString('utf8')).to.equal(await reference(serviceOver(data), null));
  });
});

describe('http/list-body: one build per snapshot and filter', () => {
  it('memoizes per snapshot, filter and encoding', async () => {
    const snapshot = await serviceOver(generated(50)).snapshot();
    const bodies = new ListBodies();
    const a = await bodies.body(snapshot, null, 'identity');
    expect(await bodies.body(snapshot, null, 'identity')).to.equal(a);
    await bodies.body(snapshot, DEAD, 'identity');
    await bodies.body(snapshot, null, 'gzip');
    await bodies.body(snapshot, null, 'gzip');
    await bodies.body(snapshot, null, 'br');
    expect(bodies.builds).to.equal(2);
    expect(bodies.compressions).to.equal(2);
    const other = await serviceOver(generated(50)).snapshot();
    await bodies.body(other, null, 'identity');
    expect(bodies.builds).to.equal(3);
  });

  it('hands out a built body at once (ready), the bytes body() gave, and nothing before', async () => {
    const service = serviceOver(generated(50));
    const snapshot = await service.snapshot();
    const bodies = new ListBodies();
    expect(bodies.ready(snapshot, null, 'identity')).to.equal(null);
    const building = bodies.body(snapshot, null, 'identity');
    expect(bodies.ready(snapshot, null, 'identity')).to.equal(null); // still building
    const body = await building;
    expect(bodies.ready(snapshot, null, 'identity')).to.equal(body);
    expect(bodies.ready(snapshot, ALIVE, 'identity')).to.equal(null); // another filter
    expect(bodies.ready(snapshot, null, 'gzip')).to.equal(null); // another encoding
    expect(bodies.ready({ ...snapshot }, null, 'identity')).to.equal(null); // another read
  });

  it('lets a request that arrives during a build join it', async () => {
    const snapshot = await serviceOver(generated(1000)).snapshot();
    const bodies = new ListBodies(10); // 100 slices: the build spans many event-loop turns
    const first = bodies.body(snapshot, null, 'identity');
    await new Promise((resolve) => setImmediate(resolve)); // the build is now under way
    const joined = bodies.body(snapshot, null, 'gzip');
    const again = bodies.body(snapshot, null, 'identity');
    expect(again).to.equal(first);
    const [identity, gzipped] = await Promise.all([first, joined]);
    expect(bodies.builds).to.equal(1);
    expect(zlib.gunzipSync(gzipped).equals(identity)).to.equal(true);
  });
});

describe('http/list-body: Accept-Encoding', () => {
  const cases: Array<[string | undefined, string]> = [
    [undefined, 'identity'],
    ['', 'identity'],
    ['identity', 'identity'],
    ['gzip', 'gzip'],
    ['x-gzip', 'gzip'],
    ['gzip, deflate, br', 'br'],
    ['br;q=0, gzip', 'gzip'],
    ['gzip;q=0, br;q=0', 'identity'],
    ['gzip;q=0.9, br;q=0.5', 'gzip'],
    ['GZIP; Q=1', 'gzip'],
    ['*', 'br'],
    ['*;q=0', 'identity'],
    ['deflate', 'identity'],
    ['*, br;q=0', 'gzip'],
  ];
  for (const [header, expected] of cases) {
    it(`answers ${JSON.stringify(header)} with ${expected}`, () => {
      expect(negotiateEncoding(header)).to.equal(expected);
    });
  }
});

describe('GET /api/peers: one body per read, compressed once, with its age', () => {
  let server: http.Server;
  let base: string;
  let bodies: ListBodies;
  let snapshot: PeerSnapshot;
  let service: PeerService;

  before(async () => {
    // A snapshot taken 2.5 s ago, as the freshness window may serve one.
    service = serviceOver(generated(300), Date.now() - 2500);
    snapshot = await service.snapshot();
    const api = { snapshot: async () => snapshot } as unknown as PeerServiceApi;
    bodies = new ListBodies();
    server = http.createServer(
      createApp({ service: api, logger: captureLog().logger, listBodies: bodies }),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  /** Raw bytes and headers, no decompression (node:http leaves the body as sent). */
  function get(
    path: string,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
    return new Promise((resolve, reject) => {
      http
        .get(`${base}${path}`, { headers, agent: false }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              body: Buffer.concat(chunks),
            }),
          );
        })
        .on('error', reject);
    });
  }

  it('sends the reference bytes with Content-Length, Vary, Age and X-Data-Age-Ms', async () => {
    const res = await get('/api/peers?status=DEAD');
    expect(res.status).to.equal(200);
    // The service's own listing is of the same read (the window), at the same takenAt.
    expect(res.body.toString()).to.equal(await reference(service, DEAD));
    expect(res.headers['content-type']).to.equal('application/json; charset=utf-8');
    expect(Number(res.headers['content-length'])).to.equal(res.body.length);
    expect(res.headers.vary).to.equal('Accept-Encoding');
    expect(res.headers['content-encoding']).to.equal(undefined);
    const ageMs = Number(res.headers['x-data-age-ms']);
    expect(ageMs).to.be.at.least(2500);
    expect(Number(res.headers.age)).to.equal(Math.floor(ageMs / 1000));
  });

  it('round-trips gzip and br to the identity bytes, compressing once per encoding', async () => {
    const identity = await get('/api/peers');
    const before = bodies.compressions;
    const [gz1, gz2, br] = await Promise.all([
      get('/api/peers', { 'accept-encoding': 'gzip' }),
      get('/api/peers', { 'accept-encoding': 'gzip' }),
      get('/api/peers', { 'accept-encoding': 'br' }),
    ]);
    expect(gz1.headers['content-encoding']).to.equal('gzip');
    expect(br.headers['content-encoding']).to.equal('br');
    expect(Number(gz1.headers['content-length'])).to.equal(gz1.body.length);
    expect(zlib.gunzipSync(gz1.body).equals(identity.body)).to.equal(true);
    expect(gz2.body.equals(gz1.body)).to.equal(true);
    expect(zlib.brotliDecompressSync(br.body).equals(identity.body)).to.equal(true);
    expect(bodies.compressions - before).to.equal(2);
  });

  it('builds each filter once for any number of requests on the read', async () => {
    const before = bodies.builds;
    await Promise.all([
      get('/api/peers?status=ALIVE'),
      get('/api/peers?status=ALIVE'),
      get('/api/peers?status=ALIVE', { 'accept-encoding': 'gzip' }),
    ]);
    expect(bodies.builds - before).to.equal(1);
  });
});
