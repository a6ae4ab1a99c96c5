import { expect } from 'chai';
import type { KernelDataCap, LimitState } from '../../../src/kernel/types';
import { planRestore, sharedAddresses, type KernelView } from '../../../src/peers/restore-plan';
import type { SavedPeer, SavedState } from '../../../src/state';

const A = 'hS5kTn5b3Ve1pQHnaeNmZ2k4M5eyJ1xCqFe2hDeHjlA=';
const B = 'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=';
const C = 'GJ5s4U2Krw1bCYn0lHQgnbS+1BVwhc7QO2D1Jf5HGVw=';
const D = 'Vd8nFWS7ayE9uwOVOVP8ZnAdsM8pqUAnh6S3BfgN2DI=';

function saved(peers: SavedPeer[], extra: Partial<Omit<SavedState, 'peers'>> = {}): SavedState {
  return {
    boot: { bootId: 'boot-1', ifindex: 5, interfaceName: 'wg0' },
    iface: null,
    peers: new Map(peers.map((p) => [p.publicKey, p])),
    intents: new Map(),
    ...extra,
  };
}

function peer(publicKey: string, ip: string, more: Partial<SavedPeer> = {}): SavedPeer {
  return { publicKey, allowedIps: [`${ip}/32`], limit: null, cap: null, ...more };
}

function kernel(more: Partial<KernelView> = {}): KernelView {
  return {
    bootId: 'boot-1',
    ifindex: 5,
    created: false,
    peers: [],
    limits: new Map<string, LimitState>(),
    caps: new Map<string, KernelDataCap>(),
    ...more,
  };
}

function kernelPeer(publicKey: string, ip: string) {
  return { publicKey, allowedIps: [{ family: 4 as const, address: ip, cidr: 32 }] };
}

describe('peers/restore-plan: what a start with a state directory does (issue 16)', () => {
  describe('after a reboot (another boot_id)', () => {
    it('puts every saved peer back with its limit and its cap at the bytes already counted', () => {
      const plan = planRestore(
        saved([
          peer(A, '10.8.0.2', { limit: 250_000, cap: { quotaBytes: 10e9, usedBytes: 9.9e9 } }),
          peer(B, '10.8.0.3'),
        ]),
        kernel({ bootId: 'boot-2' }),
      );
      expect(plan.mode).to.equal('reboot');
      expect(plan.addPeers.map((p) => p.publicKey)).to.deep.equal([A, B]);
      expect(plan.limits).to.deep.equal([
        { publicKey: A, address: '10.8.0.2', bytesPerSecond: 250_000 },
      ]);
      expect(plan.caps).to.deep.equal([
        { publicKey: A, address: '10.8.0.2', cap: { quotaBytes: 10e9, usedBytes: 9.9e9 } },
      ]);
      expect(plan.removePeers).to.deep.equal([]);
      expect(plan.warnings).to.deep.equal([]);
      expect([...plan.next.keys()]).to.deep.equal([A, B]);
    });

    it('also when the daemon just created the interface, or it came back empty under another ifindex', () => {
      const state = saved([peer(A, '10.8.0.2')]);
      expect(planRestore(state, kernel({ created: true, ifindex: 9 })).mode).to.equal('reboot');
      expect(planRestore(state, kernel({ ifindex: 9 })).mode).to.equal('reboot');
      expect(planRestore(state, kernel({ ifindex: 9 })).addPeers).to.have.length(1);
    });

    it('keeps a peer the kernel has again as the kernel has it, adding only the limit and cap it lacks', () => {
      const plan = planRestore(
        saved([peer(A, '10.8.0.2', { limit: 5000, cap: { quotaBytes: 100, usedBytes: 40 } })]),
        kernel({
          bootId: 'boot-2',
          peers: [kernelPeer(A, '10.8.0.2')],
          caps: new Map([['10.8.0.2', { quotaBytes: 100, usedBytes: 7, enforced: true }]]),
        }),
      );
      expect(plan.addPeers).to.deep.equal([]);
      expect(plan.limits).to.deep.equal([
        { publicKey: A, address: '10.8.0.2', bytesPerSecond: 5000 },
      ]);
      expect(plan.caps).to.deep.equal([]);
      expect(plan.next.get(A)?.cap).to.deep.equal({ quotaBytes: 100, usedBytes: 7 });
    });

    it('adopts a peer the kernel has and the journal does not, with a warning', () => {
      const plan = planRestore(
        saved([]),
        kernel({ bootId: 'boot-2', peers: [kernelPeer(C, '10.8.0.9')] }),
      );
      expect(plan.next.has(C)).to.equal(true);
      expect(plan.warnings.map((w) => w.event)).to.deep.equal(['peer_adopted']);
    });
  });

  describe('after an ordinary restart (same boot, same interface): the kernel is the truth for peers, the journal repairs what it lost', () => {
    it('keeps a peer deleted behind the daemon’s back deleted, with a warning', () => {
      const plan = planRestore(
        saved([peer(A, '10.8.0.2'), peer(B, '10.8.0.3')]),
        kernel({ peers: [kernelPeer(A, '10.8.0.2')] }),
      );
      expect(plan.mode).to.equal('restart');
      expect(plan.addPeers).to.deep.equal([]);
      expect([...plan.next.keys()]).to.deep.equal([A]);
      expect(plan.warnings).to.have.length(1);
      expect(plan.warnings[0]).to.include({ event: 'peer_deleted_behind_back', publicKey: B });
    });

    it('adopts a peer added behind its back, with its limit and cap as the kernel holds them', () => {
      const plan = planRestore(
        saved([]),
        kernel({
          peers: [kernelPeer(C, '10.8.0.9')],
          limits: new Map([['10.8.0.9', { download: 1000, upload: 1000 }]]),
          caps: new Map([['10.8.0.9', { quotaBytes: 50, usedBytes: 5, enforced: true }]]),
        }),
      ).next.get(C);
      expect(plan).to.deep.equal({
        publicKey: C,
        allowedIps: ['10.8.0.9/32'],
        limit: 1000,
        cap: { quotaBytes: 50, usedBytes: 5 },
      });
    });

    it('keeps a limit or cap the kernel holds with another value than the journal, with a warning each', () => {
      const plan = planRestore(
        saved([peer(A, '10.8.0.2', { limit: 5000, cap: { quotaBytes: 100, usedBytes: 1 } })]),
        kernel({
          peers: [kernelPeer(A, '10.8.0.2')],
          limits: new Map([['10.8.0.2', { download: 7000, upload: 7000 }]]),
          caps: new Map([['10.8.0.2', { quotaBytes: 300, usedBytes: 60, enforced: true }]]),
        }),
      );
      expect(plan.next.get(A)).to.deep.include({
        limit: 7000,
        cap: { quotaBytes: 300, usedBytes: 60 },
      });
      expect(plan.limits).to.deep.equal([]);
      expect(plan.caps).to.deep.equal([]);
      expect(plan.warnings.map((w) => w.event)).to.deep.equal([
        'limit_changed_behind_back',
        'cap_changed_behind_back',
      ]);
    });

    // Issue 28: `systemctl reload nftables` (its ruleset starts with `flush ruleset`) or a tc
    // flush while the daemon was down: the running daemon would have put them back; so does a
    // restart, instead of dropping them from the journal.
    it('puts back a limit, a cap (its usage and plan) and a suspension the kernel lost, each a repair', () => {
      const plan7 = {
        period: 'week' as const,
        periodStart: { at: 1_700_000_000_000, offsetMinutes: 0 },
        periodFrom: 1_700_000_000_000,
        previousUsedBytes: 12,
      };
      const cap = { quotaBytes: 100, usedBytes: 40, plan: plan7 };
      const plan = planRestore(
        saved([
          peer(A, '10.8.0.2', { limit: 5000, cap, suspended: true }),
          peer(B, '10.8.0.3', { limit: 9000 }),
        ]),
        kernel({
          peers: [kernelPeer(A, '10.8.0.2'), kernelPeer(B, '10.8.0.3')],
          limits: new Map([['10.8.0.3', { download: 9000, upload: 9000 }]]),
        }),
      );
      expect(plan.mode).to.equal('restart');
      expect(plan.addPeers).to.deep.equal([]);
      expect(plan.limits).to.deep.equal([
        { publicKey: A, address: '10.8.0.2', bytesPerSecond: 5000 },
      ]);
      expect(plan.caps).to.deep.equal([{ publicKey: A, address: '10.8.0.2', cap }]);
      expect(plan.suspensions).to.deep.equal([{ publicKey: A, address: '10.8.0.2' }]);
      expect(plan.next.get(A)).to.deep.equal({
        publicKey: A,
        allowedIps: ['10.8.0.2/32'],
        limit: 5000,
        cap,
        suspended: true,
      });
      expect(plan.warnings.map((w) => [w.event, w.publicKey, w.facility, w.address])).to.deep.equal(
        [
          ['kernel_repaired', A, 'shaper', '10.8.0.2'],
          ['kernel_repaired', A, 'quota', '10.8.0.2'],
          ['kernel_repaired', A, 'suspension', '10.8.0.2'],
        ],
      );
    });

    it('keeps a suspension the kernel has and the journal does not, as the kernel has it', () => {
      const plan = planRestore(
        saved([peer(A, '10.8.0.2')]),
        kernel({ peers: [kernelPeer(A, '10.8.0.2')], suspended: new Map([['10.8.0.2', A]]) }),
      );
      expect(plan.next.get(A)?.suspended).to.equal(true);
      expect(plan.suspensions).to.deep.equal([]);
      expect(plan.warnings).to.deep.equal([]);
    });
  });

  describe('an interface made again under another ifindex (issue 28)', () => {
    it('is restored like a reboot even when an operator config put peers back on it', () => {
      const plan = planRestore(
        saved([peer(A, '10.8.0.2', { limit: 5000 }), peer(B, '10.8.0.3')]),
        kernel({ ifindex: 9, peers: [kernelPeer(C, '10.8.0.9')] }),
      );
      expect(plan.mode).to.equal('reboot');
      expect(plan.addPeers.map((p) => p.publicKey)).to.deep.equal([A, B]);
      expect(plan.limits).to.deep.equal([
        { publicKey: A, address: '10.8.0.2', bytesPerSecond: 5000 },
      ]);
      expect([...plan.next.keys()]).to.deep.equal([C, A, B]);
      expect(plan.warnings.map((w) => [w.event, w.publicKey])).to.deep.equal([['peer_adopted', C]]);
    });
  });

  describe('never two peers on one address (issue 28)', () => {
    it("puts back the journal's later of two saved peers on one IPv4 /32, naming both", () => {
      // A was removed behind the daemon's back and its address given to B, a later create.
      const plan = planRestore(
        saved([peer(A, '10.8.0.2', { cap: { quotaBytes: 1, usedBytes: 1 } }), peer(B, '10.8.0.2')]),
        kernel({ bootId: 'boot-2' }),
      );
      expect(plan.addPeers.map((p) => p.publicKey)).to.deep.equal([B]);
      expect(plan.caps).to.deep.equal([]);
      expect([...plan.next.keys()]).to.deep.equal([B]);
      expect(plan.warnings).to.have.length(1);
      expect(plan.warnings[0]).to.include({
        event: 'peer_address_taken',
        publicKey: A,
        keptPublicKey: B,
        address: '10.8.0.2',
      });
      expect(plan.warnings[0]!.message).to.contain(A).and.contain(B).and.contain('10.8.0.2');
    });

    it('also on one IPv6 /128, and a peer the kernel has keeps its address', () => {
      const plan = planRestore(
        saved([
          { publicKey: A, allowedIps: ['10.8.0.2/32', 'fd42::2/128'], limit: null, cap: null },
          { publicKey: B, allowedIps: ['10.8.0.3/32', 'fd42::2/128'], limit: null, cap: null },
          peer(C, '10.8.0.9'),
        ]),
        kernel({ bootId: 'boot-2', peers: [kernelPeer(D, '10.8.0.9')] }),
      );
      expect(plan.addPeers.map((p) => p.publicKey)).to.deep.equal([B]);
      expect(
        plan.warnings
          .filter((w) => w.event === 'peer_address_taken')
          .map((w) => [w.publicKey, w.keptPublicKey, w.address]),
      ).to.deep.equal([
        [A, B, 'fd42::2'],
        [C, D, '10.8.0.9'],
      ]);
    });
  });

  describe('a create that never answered (its intent saved, its commit not)', () => {
    it('is removed from the kernel after a restart: its private key is lost', () => {
      const state = saved([peer(A, '10.8.0.2')], { intents: new Map([[B, ['10.8.0.3/32']]]) });
      const plan = planRestore(
        state,
        kernel({ peers: [kernelPeer(A, '10.8.0.2'), kernelPeer(B, '10.8.0.3')] }),
      );
      expect(plan.removePeers).to.deep.equal([B]);
      expect(plan.next.has(B)).to.equal(false);
      expect(plan.warnings.map((w) => w.event)).to.deep.equal(['create_never_answered']);
    });

    it('is not restored after a reboot', () => {
      const state = saved([], { intents: new Map([[B, ['10.8.0.3/32']]]) });
      const plan = planRestore(state, kernel({ bootId: 'boot-2' }));
      expect(plan.addPeers).to.deep.equal([]);
      expect(plan.removePeers).to.deep.equal([]);
      expect(plan.next.size).to.equal(0);
      expect(plan.warnings[0].message).to.contain('not restored');
    });
  });

  describe('a delete saved whose kernel side a crash cut off (a tombstone, issue 28)', () => {
    it('is finished at a restart: the peer the kernel still has is removed, and the facilities holding its limit, cap or suspension are reconciled', () => {
      const state = saved([peer(A, '10.8.0.2')], { tombstones: new Set([B]) });
      const plan = planRestore(
        state,
        kernel({
          peers: [kernelPeer(A, '10.8.0.2'), kernelPeer(B, '10.8.0.3')],
          caps: new Map([['10.8.0.3', { quotaBytes: 10, usedBytes: 1, enforced: true }]]),
          suspended: new Map([['10.8.0.3', B]]),
        }),
      );
      expect(plan.removePeers).to.deep.equal([B]);
      expect(plan.next.has(B)).to.equal(false);
      expect([...plan.cleanup].sort()).to.deep.equal(['quota', 'suspension']);
      expect(plan.warnings.map((w) => w.event)).to.deep.equal(['delete_finished']);
    });

    it('changes nothing at a restart when the kernel has the peer no more', () => {
      const state = saved([peer(A, '10.8.0.2')], { tombstones: new Set([B]) });
      const plan = planRestore(state, kernel({ peers: [kernelPeer(A, '10.8.0.2')] }));
      expect(plan.removePeers).to.deep.equal([]);
      expect(plan.cleanup.size).to.equal(0);
      expect(plan.warnings).to.deep.equal([]);
    });

    it('is no reason to remove a peer after a reboot: the kernel lost the old one, so what has that key now was put there by something else', () => {
      const state = saved([], { tombstones: new Set([B]) });
      const plan = planRestore(
        state,
        kernel({ bootId: 'boot-2', peers: [kernelPeer(B, '10.8.0.3')] }),
      );
      expect(plan.removePeers).to.deep.equal([]);
      expect(plan.next.has(B)).to.equal(true);
    });
  });

  describe('suspensions (issue 19)', () => {
    it('puts a suspended peer back suspended after a reboot, and no other', () => {
      const plan = planRestore(
        saved([peer(A, '10.8.0.2', { suspended: true }), peer(B, '10.8.0.3')]),
        kernel({ bootId: 'boot-2' }),
      );
      expect(plan.suspensions).to.deep.equal([{ publicKey: A, address: '10.8.0.2' }]);
      expect(plan.next.get(A)?.suspended).to.equal(true);
      expect(plan.next.get(B)?.suspended).to.equal(undefined);
    });

    it('suspends again a peer the kernel has again after a reboot without its suspension', () => {
      const plan = planRestore(
        saved([peer(A, '10.8.0.2', { suspended: true })]),
        kernel({ bootId: 'boot-2', peers: [kernelPeer(A, '10.8.0.2')] }),
      );
      expect(plan.addPeers).to.deep.equal([]);
      expect(plan.suspensions).to.deep.equal([{ publicKey: A, address: '10.8.0.2' }]);
    });

    it('takes suspensions as the kernel has them after a restart, owner included', () => {
      const plan = planRestore(
        saved([peer(A, '10.8.0.2'), peer(B, '10.8.0.3', { suspended: true })]),
        kernel({
          peers: [kernelPeer(A, '10.8.0.2'), kernelPeer(B, '10.8.0.3')],
          // A's address is suspended in the kernel but for another key: not A's suspension.
          suspended: new Map([
            ['10.8.0.2', C],
            ['10.8.0.3', B],
          ]),
        }),
      );
      expect(plan.mode).to.equal('restart');
      expect(plan.suspensions).to.deep.equal([]);
      expect(plan.next.get(A)?.suspended).to.equal(undefined);
      expect(plan.next.get(B)?.suspended).to.equal(true);
    });
  });

  it('adopts the peers of an adopted interface without a warning each, counting them and what they hold', () => {
    const plan = planRestore(
      saved([peer(A, '10.8.0.2')]),
      kernel({
        adopted: true,
        peers: [kernelPeer(A, '10.8.0.2'), kernelPeer(B, '10.8.0.3'), kernelPeer(C, '10.8.0.4')],
        limits: new Map([['10.8.0.3', { download: 1000, upload: 1000 }]]),
        caps: new Map([['10.8.0.4', { quotaBytes: 50, usedBytes: 5, enforced: true }]]),
        suspended: new Map([['10.8.0.4', C]]),
      }),
    );
    expect(plan.mode).to.equal('restart');
    expect([...plan.next.keys()]).to.deep.equal([A, B, C]);
    expect(plan.warnings).to.deep.equal([]);
    expect(plan.adopted).to.deep.equal({ peers: 2, limits: 1, caps: 1, suspensions: 1 });
  });

  it('adopts the kernel silently on a first start (an empty journal: an upgrade)', () => {
    const plan = planRestore(
      { boot: null, iface: null, peers: new Map(), intents: new Map() },
      kernel({ peers: [kernelPeer(A, '10.8.0.2')] }),
    );
    expect(plan.mode).to.equal('first');
    expect(plan.next.has(A)).to.equal(true);
    expect(plan.warnings).to.deep.equal([]);
  });
});

describe('peers/restore-plan: dual-stack peers (issue 18)', () => {
  it('puts a saved dual-stack peer back with both allowed IPs, its limit and cap naming its IPv6 address', () => {
    const cap = { quotaBytes: 5e9, usedBytes: 1e9 };
    const plan = planRestore(
      saved([
        {
          publicKey: A,
          allowedIps: ['10.8.0.2/32', 'fd42::2/128'],
          limit: 125_000,
          cap,
        },
        peer(B, '10.8.0.3', { limit: 1000 }),
      ]),
      kernel({ bootId: 'boot-2' }),
    );
    expect(plan.addPeers[0]!.allowedIps).to.deep.equal(['10.8.0.2/32', 'fd42::2/128']);
    expect(plan.limits).to.deep.equal([
      { publicKey: A, address: '10.8.0.2', address6: 'fd42::2', bytesPerSecond: 125_000 },
      { publicKey: B, address: '10.8.0.3', bytesPerSecond: 1000 },
    ]);
    expect(plan.caps).to.deep.equal([
      { publicKey: A, address: '10.8.0.2', address6: 'fd42::2', cap },
    ]);
  });

  it('puts a suspended dual-stack peer back suspended on both addresses, an IPv4-only one on its one', () => {
    const plan = planRestore(
      saved([
        {
          publicKey: A,
          allowedIps: ['10.8.0.2/32', 'fd42::2/128'],
          limit: null,
          cap: null,
          suspended: true,
        },
        peer(B, '10.8.0.3', { suspended: true }),
      ]),
      kernel({ bootId: 'boot-2' }),
    );
    expect(plan.suspensions).to.deep.equal([
      { publicKey: A, address: '10.8.0.2', address6: 'fd42::2' },
      { publicKey: B, address: '10.8.0.3' },
    ]);
  });

  it('adds the IPv6 address to what it restores for a peer the kernel has again', () => {
    const plan = planRestore(
      saved([{ publicKey: A, allowedIps: ['10.8.0.2/32', 'fd42::2/128'], limit: 2000, cap: null }]),
      kernel({
        bootId: 'boot-2',
        peers: [
          {
            publicKey: A,
            allowedIps: [
              { family: 4, address: '10.8.0.2', cidr: 32 },
              { family: 6, address: 'fd42::2', cidr: 128 },
            ],
          },
        ],
      }),
    );
    expect(plan.addPeers).to.deep.equal([]);
    expect(plan.limits).to.deep.equal([
      { publicKey: A, address: '10.8.0.2', address6: 'fd42::2', bytesPerSecond: 2000 },
    ]);
  });
});

// The step that keeps addresses apart, table-driven as wgctrl-go's configure tests are: literal
// peers in, literal kept keys and warnings out.
describe('peers/restore-plan: sharedAddresses, one owner per host address (issue 28)', () => {
  const p = (publicKey: string, ...allowedIps: string[]): SavedPeer => ({
    publicKey,
    allowedIps,
    limit: null,
    cap: null,
  });
  const cases: {
    name: string;
    held: SavedPeer[];
    candidates: SavedPeer[];
    kept: string[];
    dropped: [string, string, string][];
  }[] = [
    {
      name: 'distinct addresses: all kept',
      held: [p(C, '10.8.0.9/32')],
      candidates: [p(A, '10.8.0.2/32'), p(B, '10.8.0.3/32', 'fd42::3/128')],
      kept: [A, B],
      dropped: [],
    },
    {
      name: 'two on one /32: the later kept',
      held: [],
      candidates: [p(A, '10.8.0.2/32'), p(B, '10.8.0.2/32')],
      kept: [B],
      dropped: [[A, B, '10.8.0.2']],
    },
    {
      name: 'a chain over IPv4 and IPv6: each later one wins its address',
      held: [],
      candidates: [
        p(A, '10.8.0.2/32'),
        p(B, '10.8.0.2/32', 'fd42::2/128'),
        p(C, '10.8.0.4/32', 'fd42::2/128'),
      ],
      kept: [C],
      dropped: [
        [A, B, '10.8.0.2'],
        [B, C, 'fd42::2'],
      ],
    },
    {
      name: 'a peer the kernel has keeps its address over any saved one',
      held: [p(D, '10.8.0.2/32')],
      candidates: [p(A, '10.8.0.2/32')],
      kept: [],
      dropped: [[A, D, '10.8.0.2']],
    },
    {
      name: 'routed prefixes are not host addresses: shared ones are no conflict',
      held: [],
      candidates: [p(A, '10.8.0.2/32', '192.168.0.0/24'), p(B, '10.8.0.3/32', '192.168.0.0/24')],
      kept: [A, B],
      dropped: [],
    },
    {
      name: 'a peer naming its address twice does not drop itself',
      held: [],
      candidates: [p(A, '10.8.0.2/32', '10.8.0.2/32')],
      kept: [A],
      dropped: [],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const { kept, dropped } = sharedAddresses(c.held, c.candidates);
      expect(kept.map((peer) => peer.publicKey)).to.deep.equal(c.kept);
      expect(dropped.map((w) => [w.publicKey, w.keptPublicKey, w.address])).to.deep.equal(
        c.dropped,
      );
    });
  }
});
