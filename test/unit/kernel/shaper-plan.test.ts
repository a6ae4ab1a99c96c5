/**
 * The speed-limit reconciliation plans on literal inputs (as wgctrl-go's configure_linux_test
 * checks its request building): what a u32 dump or the class dumps of both devices held, and the
 * live peers, against the messages planned, in order, and the repairs reported. What the kernel
 * makes of those messages is checked by the recorded transcripts (shaper.replay.test.ts).
 * Operations are named as the shaper labels them; selectors as the layout of src/kernel/shaper/index.ts
 * prescribes for 10.8.0.0/24 (third octet 0), keyed on the destination (offset 16) on wg0.
 */
import { expect } from 'chai';
import { SetupConflictError } from '../../../src/kernel/errors';
import type { Side } from '../../../src/kernel/shaper/addressing';
import { type ShapedState, planHashTables, planLimits } from '../../../src/kernel/shaper/plan';
import type { U32Entry, U32Selector } from '../../../src/kernel/tc/u32';

const WG: Side = { direction: 'download', ifname: 'wg0', ifindex: 5, keyOffset: 16 };
const IFB: Side = { direction: 'upload', ifname: 'ifb-wg0', ifindex: 6, keyOffset: 12 };
const SUBNET = { network: 0x0a080000, prefixLength: 24 }; // 10.8.0.0/24
const TICKS = 15.625;

/** "800:0:1" → handle. */
const h = (text: string): number => {
  const [table, bucket, node] = text.split(':').map((part) => parseInt(part || '0', 16));
  return ((table! << 20) | (bucket! << 12) | node!) >>> 0;
};

const node = (handle: string, link: string | undefined, selector: U32Selector): U32Entry => ({
  handle: h(handle),
  divisor: undefined,
  link: link === undefined ? undefined : h(link),
  classid: undefined,
  selector,
  mirred: [],
});
const table = (id: string, divisor: number): U32Entry => ({
  handle: h(`${id}:0:0`),
  divisor,
  link: undefined,
  classid: undefined,
  selector: undefined,
  mirred: [],
});

/** dst in 10.8.0.0/24, hashed on the third octet (mask 0xff00 at offset 16). */
const ROOT_LINK: U32Selector = {
  flags: 0,
  hoff: 16,
  hmask: 0x0000ff00,
  keys: [{ mask: 0xffffff00, val: 0x0a080000, off: 16, offmask: 0 }],
};
/** dst in 10.8.0.0/24, hashed on the last octet. */
const OCTET_LINK: U32Selector = { ...ROOT_LINK, hmask: 0x000000ff };

const ops = (messages: Array<{ operation: string }>): string[] => messages.map((m) => m.operation);

describe('kernel/shaper plan: the u32 hash tables of one side', () => {
  it('on a fresh qdisc creates table 100:, the host table 200: and the link between them', () => {
    const plan = planHashTables(WG, SUBNET, []);
    expect(ops(plan.creates)).to.deep.equal([
      'RTM_NEWTFILTER u32 100:0:0 parent 1:0 dev wg0',
      'RTM_NEWTFILTER u32 200:0:0 parent 1:0 dev wg0',
      'RTM_NEWTFILTER u32 100:0:1 parent 1:0 dev wg0',
    ]);
    expect(plan).to.deep.include({ deletes: [], strayRoots: [], root: undefined });
  });

  it('keeps an intact tree and finds the root link and the peers’ key nodes in it', () => {
    const plan = planHashTables(WG, SUBNET, [
      table('100', 256),
      table('200', 256),
      node('100:0:1', '200:0:0', OCTET_LINK),
      node('800:0:800', '100:0:0', ROOT_LINK),
      node('200:2:1', undefined, OCTET_LINK),
      node('200:9:1', undefined, OCTET_LINK),
    ]);
    expect(plan.creates).to.deep.equal([]);
    expect(plan).to.deep.include({ deletes: [], strayRoots: [], root: h('800:0:800') });
    expect([...plan.peerNodes]).to.deep.equal([h('200:2:1'), h('200:9:1')]);
  });

  it('deletes an octet link with another selector before making it again', () => {
    const wrong = { ...OCTET_LINK, keys: [{ ...OCTET_LINK.keys[0]!, val: 0x0a090000 }] };
    const plan = planHashTables(WG, SUBNET, [
      table('100', 256),
      table('200', 256),
      node('100:0:1', '200:0:0', wrong),
    ]);
    expect(plan.deletes).to.deep.equal([h('100:0:1')]);
    expect(ops(plan.creates)).to.deep.equal(['RTM_NEWTFILTER u32 100:0:1 parent 1:0 dev wg0']);
  });

  it('keeps the first right root link and deletes duplicates and links on another subnet', () => {
    const elsewhere = { ...ROOT_LINK, keys: [{ ...ROOT_LINK.keys[0]!, val: 0x0a090000 }] };
    const plan = planHashTables(WG, SUBNET, [
      node('800:0:800', '100:0:0', elsewhere),
      node('800:0:801', '100:0:0', ROOT_LINK),
      node('800:0:802', '100:0:0', ROOT_LINK),
      node('800:0:803', '300:0:0', ROOT_LINK), // links elsewhere: not ours to judge
    ]);
    expect(plan.root).to.equal(h('800:0:801'));
    expect(plan.strayRoots).to.deep.equal([h('800:0:800'), h('800:0:802')]);
  });

  it('refuses a table of ours with another number of buckets, naming the fix', () => {
    expect(() => planHashTables(IFB, SUBNET, [table('200', 16)]))
      .to.throw(SetupConflictError)
      .with.property('message')
      .that.contains('u32 table 200: at priority 10 on ifb-wg0 has 16 buckets instead of 256')
      .and.contains('tc filter del dev ifb-wg0 parent 1: prio 10');
  });
});

const A = { address: '10.8.0.2', publicKey: 'A' };
const B = { address: '10.8.0.3', publicKey: 'B' };

function state(
  download: Array<[number, number]>,
  upload: Array<[number, number]>,
  peerNodes: ShapedState['peerNodes'] = null,
): ShapedState {
  return { classes: { download: new Map(download), upload: new Map(upload) }, peerNodes };
}

function limits(read: ShapedState, live: Array<typeof A>) {
  const plan = planLimits({ download: WG, upload: IFB }, SUBNET, read, live, TICKS);
  return { ...plan, messages: ops(plan.messages) };
}

describe('kernel/shaper plan: the peers’ limits on both devices', () => {
  it('plans nothing when each live peer’s limit holds on both devices', () => {
    expect(limits(state([[2, 12500]], [[2, 12500]]), [A, B])).to.deep.equal({
      removals: [],
      messages: [],
      repairs: [],
    });
  });

  it('restores a direction lost on one device from the other, class and key node', () => {
    expect(limits(state([[2, 12500]], []), [A])).to.deep.equal({
      removals: [],
      messages: [
        'RTM_NEWTCLASS htb 1:2 rate 12500 dev ifb-wg0',
        'RTM_NEWTFILTER u32 200:2:1 dev ifb-wg0',
      ],
      repairs: [
        {
          address: '10.8.0.2',
          found: 'download 12500 B/s on wg0, upload none on ifb-wg0',
          done: 'restored upload on ifb-wg0 at 12500 B/s',
        },
      ],
    });
  });

  it('takes the download rate when the devices disagree', () => {
    const plan = limits(state([[3, 1000]], [[3, 2000]]), [B]);
    expect(plan.messages).to.deep.equal([
      'RTM_NEWTCLASS htb 1:3 rate 1000 dev ifb-wg0',
      'RTM_NEWTFILTER u32 200:3:1 dev ifb-wg0',
    ]);
  });

  it('re-creates a key node deleted by hand where the class stayed', () => {
    const nodes = { download: new Set<number>(), upload: new Set([h('200:2:1')]) };
    const plan = limits(state([[2, 500]], [[2, 500]], nodes), [A]);
    expect(plan.messages).to.deep.equal([
      'RTM_NEWTCLASS htb 1:2 rate 500 dev wg0',
      'RTM_NEWTFILTER u32 200:2:1 dev wg0',
    ]);
  });

  it('removes, in address order, what is held for addresses no live peer has', () => {
    const plan = limits(state([[9, 100]], [[4, 100]]), [A]);
    expect(plan.removals).to.deep.equal([0x0a080004, 0x0a080009]);
    expect(plan.messages).to.deep.equal([]);
    expect(plan.repairs).to.deep.equal([
      {
        address: '10.8.0.4',
        found: 'download none on wg0, upload 100 B/s on ifb-wg0 for an address no peer has',
        done: 'removed',
      },
      {
        address: '10.8.0.9',
        found: 'download 100 B/s on wg0, upload none on ifb-wg0 for an address no peer has',
        done: 'removed',
      },
    ]);
  });

  it('removes key nodes left without a class, even for a live peer', () => {
    const nodes = { download: new Set([h('200:2:1')]), upload: new Set<number>() };
    expect(limits(state([], [], nodes), [A])).to.deep.equal({
      removals: [0x0a080002],
      messages: [],
      repairs: [
        {
          address: '10.8.0.2',
          found: 'key nodes without classes (download none on wg0, upload none on ifb-wg0)',
          done: 'removed them',
        },
      ],
    });
  });

  it('never gives a limit to an address outside the subnet, live or not', () => {
    const outside = { address: '10.8.1.2', publicKey: 'C' };
    const plan = limits(state([[0x102, 100]], []), [outside]);
    expect(plan.removals).to.deep.equal([0x0a080102]);
    expect(plan.messages).to.deep.equal([]);
  });
});
