import { expect } from 'chai';
import fc from 'fast-check';
import {
  PreviousBodies,
  Projection,
  buildListBody,
  peerPiecesWritten,
  type ListFilter,
} from '../../../src/http/list-body';
import { checkListQuery } from '../../../src/http/schemas';
import type { KernelDataCap, LimitState, WireGuardPeer } from '../../../src/kernel/types';
import { ALIVE, DEAD, type PeerSnapshot } from '../../../src/peers';
import { entriesOf, referenceBody, referencePartialBody } from '../../support/peer-list';

// Issue 29: on a capped host nothing moves between most reads (no handshake, counters still,
// the caps held by their cadence), so a read that shows what the last body was built from is
// answered with that very body without visiting a peer, and a read of the caps whose figures
// did not move keeps every peer's JSON, writing only the caps' new instant (`read_at`) into
// the body. Every body here is held to the test oracle's bytes (test/support/peer-list.ts),
// which derives each read from scratch.

const T = Date.parse('2026-03-01T12:00:00.000Z');
const FILTERS: ListFilter[] = [null, ALIVE, DEAD];
const POLL = 'public_key,status,data_cap.used_bytes';
const WITH_READ_AT = 'public_key,data_cap.used_bytes,data_cap.read_at';

/** Handshake ages at T: none, just now, a minute's last millisecond, at and past 150 s, old. */
const AGES = [null, 0, 59_999, 60_000, 150_000, 150_001, 3_600_000];

function ipOf(i: number): string {
  return `10.9.${i >> 8}.${i & 255}`;
}

/** `count` peers, peer i aged AGES[i % AGES.length] at T; the same objects for every read. */
function peers(count: number): WireGuardPeer[] {
  return Array.from({ length: count }, (_, i) => {
    const age = AGES[i % AGES.length]!;
    return {
      publicKey: Buffer.alloc(32, i + 1).toString('base64'),
      endpoint: i % 2 === 0 ? null : `203.0.113.${i}:51820`,
      lastHandshake: age === null ? null : new Date(T - age),
      rxBytes: i * 1_000,
      txBytes: i,
      persistentKeepalive: 0,
      allowedIps: [{ family: 4, address: ipOf(i), cidr: 32 }],
    };
  });
}

/** The other facilities of a read: every peer capped but one in four, every third limited. */
interface Facilities {
  limits: Map<string, LimitState>;
  caps: Map<string, KernelDataCap>;
  suspended: Map<string, string | null>;
  exhausted: Map<string, number>;
  names: Map<string, string>;
  expiries: Map<string, number>;
  expired: Set<string>;
}

function facilities(list: readonly WireGuardPeer[], used = 0): Facilities {
  const f: Facilities = {
    limits: new Map(),
    caps: new Map(),
    suspended: new Map(),
    exhausted: new Map(),
    names: new Map(),
    expiries: new Map(),
    expired: new Set(),
  };
  list.forEach((peer, i) => {
    const ip = ipOf(i);
    if (i % 3 === 0) f.limits.set(ip, { download: 125_000 + i, upload: 125_000 + i });
    if (i % 4 !== 3) f.caps.set(ip, { quotaBytes: 1_000_000, usedBytes: i + used, enforced: true });
    if (i === 1) f.suspended.set(ip, peer.publicKey);
    if (i === 2) f.exhausted.set(ip, T - 5_000);
    if (i === 4) f.names.set(peer.publicKey, 'ada');
    if (i === 5) f.expiries.set(peer.publicKey, T + 86_400_000);
    if (i === 6) {
      f.expiries.set(peer.publicKey, T - 1);
      f.expired.add(peer.publicKey);
    }
  });
  return f;
}

function snapshotOf(
  list: readonly WireGuardPeer[],
  f: Facilities,
  takenAt: number,
  capsReadAt: number,
): PeerSnapshot {
  return {
    takenAt,
    readMs: 1,
    // A new device object and peers array per read, the same peer objects (DumpMemo's).
    device: {
      name: 'wg0',
      ifindex: 3,
      publicKey: null,
      listenPort: 51820,
      fwmark: 0,
      peers: list.slice(),
    },
    limits: f.limits,
    caps: f.caps,
    capsReadAt,
    suspended: f.suspended,
    exhausted: f.exhausted,
    names: f.names,
    expiries: f.expiries,
    expired: f.expired,
  };
}

function reference(snapshot: PeerSnapshot, filter: ListFilter): string {
  return referenceBody(entriesOf(snapshot, filter), filter).toString('utf8');
}

function partialReference(snapshot: PeerSnapshot, filter: ListFilter, fields: string): string {
  return referencePartialBody(entriesOf(snapshot, filter), filter, fields.split(',')).toString(
    'utf8',
  );
}

function projectionOf(fields: string): Projection {
  return new Projection(checkListQuery({ fields }).fields!);
}

describe('http/list-body: a read that shows what the last body was built from is answered with it (issue 29)', () => {
  it('answers a later read of the same peers, maps and caps instant with the very same Buffer, writing no peer', async () => {
    const list = peers(40);
    const f = facilities(list);
    const previous = new PreviousBodies();
    const first = await buildListBody(snapshotOf(list, f, T, T), null, 7, previous);
    const written = peerPiecesWritten();
    // Up to a millisecond before the first moving minute (59,999 ms → 60,000 ms at T + 1).
    const again = snapshotOf(list, f, T, T);
    expect(await buildListBody(again, null, 7, previous)).to.equal(first);
    expect(peerPiecesWritten()).to.equal(written);
    expect(first.toString('utf8')).to.equal(reference(again, null));
  });

  it('builds anew, as the oracle, from the first millisecond a minute moves', async () => {
    const list = peers(40); // peer 2 is 59,999 ms old at T
    const f = facilities(list);
    const previous = new PreviousBodies();
    const first = await buildListBody(snapshotOf(list, f, T, T), null, 7, previous);
    const later = snapshotOf(list, f, T + 1, T);
    const body = await buildListBody(later, null, 7, previous);
    expect(body).to.not.equal(first);
    expect(body.toString('utf8')).to.equal(reference(later, null));
    expect(body.toString('utf8')).to.not.equal(first.toString('utf8'));
  });

  it('builds anew, as the oracle, from the first millisecond a status moves past 150 s', async () => {
    // Peers aged 150,000 ms and no other handshake: ALIVE at T, DEAD at T + 1.
    const list = peers(40).filter((p) => p.lastHandshake?.getTime() === T - 150_000);
    const f = facilities(list);
    for (const filter of FILTERS) {
      const previous = new PreviousBodies();
      await buildListBody(snapshotOf(list, f, T, T), filter, 7, previous);
      const later = snapshotOf(list, f, T + 1, T);
      const body = await buildListBody(later, filter, 7, previous);
      expect(body.toString('utf8'), `${filter}`).to.equal(reference(later, filter));
    }
    expect(reference(snapshotOf(list, f, T + 1, T), null)).to.contain('"status":"DEAD"');
  });

  it('builds anew, as the oracle, when the clock stepped back (a minute moves back too)', async () => {
    const list = peers(40); // peer 3 is 60,000 ms old at T: minute 1, minute 0 at T - 1
    const f = facilities(list);
    const previous = new PreviousBodies();
    await buildListBody(snapshotOf(list, f, T, T), null, 7, previous);
    const earlier = snapshotOf(list, f, T - 1, T);
    expect((await buildListBody(earlier, null, 7, previous)).toString('utf8')).to.equal(
      reference(earlier, null),
    );
  });

  it('builds anew, as the oracle, when any map changed, and answers again when only a set of the same keys is new', async () => {
    const list = peers(40);
    const base = facilities(list);
    const previous = new PreviousBodies();
    const first = await buildListBody(snapshotOf(list, base, T, T), null, 7, previous);
    const key = (i: number): string => list[i]!.publicKey;
    const changes: Array<[string, Facilities]> = [
      [
        'a limit',
        { ...base, limits: new Map([...base.limits, [ipOf(0), { download: 1, upload: 1 }]]) },
      ],
      [
        'a cap',
        {
          ...base,
          caps: new Map([...base.caps, [ipOf(0), { quotaBytes: 9, usedBytes: 9, enforced: true }]]),
        },
      ],
      ['a suspension', { ...base, suspended: new Map([[ipOf(7), key(7)]]) }],
      ['an exhaustion', { ...base, exhausted: new Map([[ipOf(8), T - 1]]) }],
      ['a name', { ...base, names: new Map([[key(9), 'grace']]) }],
      ['an expiry', { ...base, expiries: new Map([...base.expiries, [key(10), T + 5]]) }],
      ['an expired peer', { ...base, expired: new Set([key(5), key(6)]) }],
    ];
    for (const [what, changed] of changes) {
      const snapshot = snapshotOf(list, changed, T, T);
      const body = await buildListBody(snapshot, null, 7, previous);
      expect(body, what).to.not.equal(first);
      expect(body.toString('utf8') === reference(snapshot, null), what).to.equal(true);
      // Back to the first read's maps: the first bytes again.
      const back = snapshotOf(list, base, T, T);
      expect((await buildListBody(back, null, 7, previous)).toString('utf8'), what).to.equal(
        first.toString('utf8'),
      );
    }
    // A peer whose dump entry changed is a new object (DumpMemo); a peer gone shortens the list.
    const peerChanges: Array<[string, WireGuardPeer[]]> = [
      ['a peer', [{ ...list[0]!, rxBytes: list[0]!.rxBytes + 1 }, ...list.slice(1)]],
      ['a peer fewer', list.slice(0, -1)],
      ['the peers in another order', [list[1]!, list[0]!, ...list.slice(2)]],
    ];
    for (const [what, changed] of peerChanges) {
      const snapshot = snapshotOf(changed, base, T, T);
      const body = await buildListBody(snapshot, null, 7, previous);
      expect(body.toString('utf8') === reference(snapshot, null), what).to.equal(true);
      expect(body.toString('utf8') === first.toString('utf8'), what).to.equal(false);
      await buildListBody(snapshotOf(list, base, T, T), null, 7, previous);
    }
    // Each read makes a new set of expired keys (issue 31): the same keys show the same body.
    const same = await buildListBody(snapshotOf(list, base, T, T), null, 7, previous);
    const sameKeys = { ...base, expired: new Set(base.expired) };
    expect(await buildListBody(snapshotOf(list, sameKeys, T, T), null, 7, previous)).to.equal(same);
  });

  it('writes no peer anew after a read of the caps whose figures did not move: only the new read_at, as the oracle', async () => {
    const list = peers(40);
    const f = facilities(list);
    const previous = new PreviousBodies();
    const poll = projectionOf(POLL);
    const withReadAt = projectionOf(WITH_READ_AT);
    const first = snapshotOf(list, f, T, T - 500);
    const full = await buildListBody(first, null, 7, previous);
    const partial = await buildListBody(first, null, 7, poll.previous, poll);
    await buildListBody(first, null, 7, withReadAt.previous, withReadAt);
    const written = peerPiecesWritten();
    // The caps read again: new cap objects of the same figures, a new instant.
    const reread = { ...f, caps: new Map([...f.caps].map(([ip, cap]) => [ip, { ...cap }])) };
    const second = snapshotOf(list, reread, T, T);
    const fullAgain = await buildListBody(second, null, 7, previous);
    expect(fullAgain).to.not.equal(full);
    expect(fullAgain.toString('utf8')).to.equal(reference(second, null));
    expect(fullAgain.toString('utf8')).to.contain(`"read_at":"${new Date(T).toISOString()}"`);
    // A field set without read_at shows nothing that moved: the very same Buffer.
    expect(await buildListBody(second, null, 7, poll.previous, poll)).to.equal(partial);
    const stamped = await buildListBody(second, null, 7, withReadAt.previous, withReadAt);
    expect(stamped.toString('utf8')).to.equal(partialReference(second, null, WITH_READ_AT));
    expect(peerPiecesWritten()).to.equal(written);
    // The same caps map with another instant (a snapshot without `capsReadAt` lists its own
    // time): the instant is written, as the oracle.
    for (const snapshot of [
      snapshotOf(list, reread, T, T + 7),
      { ...snapshotOf(list, reread, T, T - 9), capsReadAt: undefined },
    ]) {
      const body = await buildListBody(snapshot, null, 7, previous);
      expect(body.toString('utf8')).to.equal(reference(snapshot, null));
      expect(body.toString('utf8')).to.contain(
        `"read_at":"${new Date(snapshot.capsReadAt ?? snapshot.takenAt).toISOString()}"`,
      );
    }
    // A figure that moved is written anew, that peer's alone.
    const moved = new Map(reread.caps);
    moved.set(ipOf(0), { ...moved.get(ipOf(0))!, usedBytes: 123 });
    const third = snapshotOf(list, { ...reread, caps: moved }, T, T + 1);
    expect((await buildListBody(third, null, 7, previous)).toString('utf8')).to.equal(
      reference(third, null),
    );
    expect(peerPiecesWritten()).to.equal(written + 1);
  });

  it('gives the oracle bytes over any sequence of reads: time on or back, maps new or not, caps read again or not (property)', async () => {
    const list = peers(21);
    const step = fc.record({
      dt: fc.integer({ min: -90_000, max: 200_000 }),
      capsAgain: fc.boolean(),
      used: fc.integer({ min: 0, max: 2 }),
      limitsAgain: fc.boolean(),
      filter: fc.constantFrom<ListFilter>(null, ALIVE, DEAD),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 8 }), async (steps) => {
        const previous = new PreviousBodies();
        const poll = projectionOf(POLL);
        const withReadAt = projectionOf(WITH_READ_AT);
        let f = facilities(list);
        let at = T;
        let capsReadAt = T;
        for (const { dt, capsAgain, used, limitsAgain, filter } of steps) {
          at += dt;
          if (capsAgain) {
            capsReadAt = at;
            f = { ...f, caps: facilities(list, used).caps, exhausted: new Map(f.exhausted) };
          }
          if (limitsAgain) f = { ...f, limits: facilities(list).limits };
          const snapshot = snapshotOf(list, f, at, capsReadAt);
          const body = await buildListBody(snapshot, filter, 5, previous);
          expect(body.toString('utf8')).to.equal(reference(snapshot, filter));
          const partial = await buildListBody(snapshot, filter, 5, poll.previous, poll);
          expect(partial.toString('utf8')).to.equal(partialReference(snapshot, filter, POLL));
          const stamped = await buildListBody(snapshot, filter, 5, withReadAt.previous, withReadAt);
          expect(stamped.toString('utf8')).to.equal(
            partialReference(snapshot, filter, WITH_READ_AT),
          );
        }
      }),
      { numRuns: 150 },
    );
  });
});
