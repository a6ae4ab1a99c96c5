/**
 * The IPv6 half of a dual-stack peer's speed limit (issue 18), on literal inputs: selectors as
 * src/kernel/shaper/addressing6.ts lays them out, with the IPv6 header's offsets from iproute2
 * (tc/f_u32.c parse_ip6: src at 8, dst at 24), the protocol from /usr/include/linux/if_ether.h
 * (ETH_P_IPV6 0x86DD) and tcm_info as iproute2 writes it (TC_H_MAKE(prio << 16,
 * htons(protocol))); the IPv6 key nodes reach the very class of the peer's IPv4 address.
 */
import { expect } from 'chai';
import type { Side } from '../../../src/kernel/shaper/addressing';
import {
  FILTER_INFO6,
  addressOfNode6,
  isPeerHost6,
  octets6,
  peerFilterHandle6,
  rootLinkSelector6,
  shapedPrefix6,
} from '../../../src/kernel/shaper/addressing6';
import { ipv6Layout, planTree } from '../../../src/kernel/shaper/plan';
import { type Shaped6State, planLimits6 } from '../../../src/kernel/shaper/plan6';
import { bigIntToIpv6, ipv6ToBigInt } from '../../../src/kernel/ipv6';
import { tcmsg } from '../../../src/kernel/rtnetlink';
import { u32Filter } from '../../../src/kernel/tc/u32';
import { decodeAttributes } from '../../../src/netlink';

const WG6: Side = { direction: 'download', ifname: 'wg0', ifindex: 5, keyOffset: 24 };
const IFB6: Side = { direction: 'upload', ifname: 'ifb-wg0', ifindex: 6, keyOffset: 8 };
const PREFIX = shapedPrefix6('fd42::1', 64);

/** "400:2:1" → handle. */
const h = (text: string): number => {
  const [table, bucket, node] = text.split(':').map((part) => parseInt(part || '0', 16));
  return ((table! << 20) | (bucket! << 12) | node!) >>> 0;
};
const ops = (messages: Array<{ operation: string }>): string[] => messages.map((m) => m.operation);

/** The tcmsg and u32 options of a planned RTM_NEWTFILTER. */
function decoded(message: { payload: Buffer }) {
  const header = tcmsg.decode(message.payload);
  const attributes = decodeAttributes(u32Filter, message.payload.subarray(tcmsg.size), 'test');
  return { header, options: attributes.options! };
}

describe('kernel/shaper IPv6 addressing (issue 18)', () => {
  it('writes tcm_info as iproute2 does for "prio 11 protocol ipv6"', () => {
    expect(FILTER_INFO6).to.equal(((11 << 16) | 0xdd86) >>> 0);
  });

  it('shapes the first 2^16 addresses of a wider prefix, and a narrower prefix whole', () => {
    expect(PREFIX).to.deep.equal({ network: ipv6ToBigInt('fd42::'), prefixLength: 112 });
    expect(shapedPrefix6('fd42::1', 120)).to.deep.equal({
      network: ipv6ToBigInt('fd42::'),
      prefixLength: 120,
    });
    expect(octets6(PREFIX)).to.have.length(256);
    expect(octets6(shapedPrefix6('fd42::1', 120))).to.deep.equal([0]);
    expect(octets6(shapedPrefix6('fd42::1:0:300:1', 118))).to.deep.equal([0, 1, 2, 3]);
  });

  it("shapes the prefix's first 2^16 addresses, where allocation starts, even when the server's own address lies above them", () => {
    expect(shapedPrefix6('fd42::1:0:1', 64)).to.deep.equal({
      network: ipv6ToBigInt('fd42::'),
      prefixLength: 112,
    });
  });

  it('keys the root link on every word of the prefix, hashing byte 14 of the last word', () => {
    expect(rootLinkSelector6(24, PREFIX)).to.deep.equal({
      flags: 0,
      hoff: 36,
      hmask: 0x0000ff00,
      keys: [
        { off: 24, val: 0xfd420000, mask: 0xffffffff, offmask: 0 },
        { off: 28, val: 0, mask: 0xffffffff, offmask: 0 },
        { off: 32, val: 0, mask: 0xffffffff, offmask: 0 },
        { off: 36, val: 0, mask: 0xffff0000, offmask: 0 },
      ],
    });
  });

  it('names a key node by the last 16 bits of the address, and back', () => {
    const value = ipv6ToBigInt('fd42::12a');
    expect(peerFilterHandle6(value)).to.equal(h('401:2a:1'));
    expect(bigIntToIpv6(addressOfNode6(PREFIX, h('401:2a:1')))).to.equal('fd42::12a');
    expect(isPeerHost6(PREFIX, value)).to.equal(true);
    expect(isPeerHost6(PREFIX, ipv6ToBigInt('fd42::'))).to.equal(false); // anycast
    expect(isPeerHost6(PREFIX, ipv6ToBigInt('fd42::1:0:2'))).to.equal(false); // beyond the /112
  });
});

describe('kernel/shaper plan: the IPv6 u32 tree of one side (issue 18)', () => {
  it('on a fresh qdisc creates table 300:, the 256 host tables 400:-4ff: and their links, all at priority 11 protocol ipv6', () => {
    const plan = planTree(WG6, ipv6Layout(WG6, PREFIX), []);
    const names = ops(plan.creates);
    expect(names).to.have.length(1 + 256 + 256);
    expect(names.slice(0, 3)).to.deep.equal([
      'RTM_NEWTFILTER u32 300:0:0 parent 1:0 dev wg0',
      'RTM_NEWTFILTER u32 400:0:0 parent 1:0 dev wg0',
      'RTM_NEWTFILTER u32 401:0:0 parent 1:0 dev wg0',
    ]);
    expect(names[257]).to.equal('RTM_NEWTFILTER u32 300:0:1 parent 1:0 dev wg0');
    expect(names[512]).to.equal('RTM_NEWTFILTER u32 300:ff:1 parent 1:0 dev wg0');
    expect(plan.creates.every((m) => tcmsg.decode(m.payload).info === FILTER_INFO6)).to.equal(true);
    expect(plan.root).to.equal(undefined);
  });

  it('links 300:X to 4XX: on the /120 of byte 14 = X, hashing byte 15', () => {
    const plan = planTree(WG6, ipv6Layout(WG6, shapedPrefix6('fd42::1', 120)), []);
    expect(ops(plan.creates)).to.deep.equal([
      'RTM_NEWTFILTER u32 300:0:0 parent 1:0 dev wg0',
      'RTM_NEWTFILTER u32 400:0:0 parent 1:0 dev wg0',
      'RTM_NEWTFILTER u32 300:0:1 parent 1:0 dev wg0',
    ]);
    const { options } = decoded(plan.creates[2]!);
    expect(options.link).to.equal(h('400:0:0'));
    expect(options.hash).to.equal(h('300:0:0'));
    expect(options.selector).to.deep.equal({
      flags: 0,
      hoff: 36,
      hmask: 0xff,
      keys: [{ off: 36, val: 0, mask: 0xffffff00, offmask: 0 }],
    });
  });
});

const A = { address: '10.8.0.2', address6: 'fd42::2', publicKey: 'A' };
const B = { address: '10.8.0.3', address6: 'fd42::3', publicKey: 'B' };

function state(
  classes: Array<[number, number]>,
  download: Array<[string, number | undefined]> = [],
  upload: Array<[string, number | undefined]> = [],
): Shaped6State {
  const nodes = (list: Array<[string, number | undefined]>) =>
    new Map(list.map(([handle, classid]) => [h(handle), classid]));
  return {
    classes: { download: new Map(classes), upload: new Map(classes) },
    nodes: { download: nodes(download), upload: nodes(upload) },
  };
}

function limits6(
  read: Shaped6State,
  live: Array<typeof A | { address: string; publicKey: string }>,
) {
  const plan = planLimits6({ download: WG6, upload: IFB6 }, PREFIX, read, live);
  return {
    deletes: plan.deletes.map(({ side, handle }) => `${side.ifname} ${handle.toString(16)}`),
    messages: ops(plan.messages),
    repairs: plan.repairs,
  };
}

describe('kernel/shaper plan: the IPv6 key nodes of dual-stack peers (issue 18)', () => {
  it('gives a limited peer an IPv6 key node on both devices, into the class of its IPv4 address', () => {
    const read = state([[2, 12500]]);
    const plan = planLimits6({ download: WG6, upload: IFB6 }, PREFIX, read, [A]);
    expect(ops(plan.messages)).to.deep.equal([
      'RTM_NEWTFILTER u32 400:2:1 prio 11 classid 1:2 dev wg0',
      'RTM_NEWTFILTER u32 400:2:1 prio 11 classid 1:2 dev ifb-wg0',
    ]);
    const down = decoded(plan.messages[0]!);
    expect(down.header).to.include({ ifindex: 5, handle: h('400:2:1'), info: FILTER_INFO6 });
    expect(down.options.classid).to.equal(0x00010002);
    expect(down.options.hash).to.equal(h('400:2:0'));
    expect(down.options.selector).to.deep.equal({
      flags: 1, // TC_U32_TERMINAL
      hoff: 0,
      hmask: 0,
      keys: [{ off: 36, val: 2, mask: 0xffffffff, offmask: 0 }], // dst, last word
    });
    const up = decoded(plan.messages[1]!);
    expect(up.options.selector!.keys[0]!.off).to.equal(20); // src, last word
  });

  it('plans nothing when every limited peer’s IPv6 node reaches its class on both devices', () => {
    const both: Array<[string, number]> = [
      ['400:2:1', 0x00010002],
      ['400:3:1', 0x00010003],
    ];
    expect(
      limits6(
        state(
          [
            [2, 1000],
            [3, 1000],
          ],
          both,
          both,
        ),
        [A, B],
      ),
    ).to.deep.equal({
      deletes: [],
      messages: [],
      repairs: [],
    });
  });

  it('removes a node of an address no limited peer has, and one of a peer without a limit', () => {
    const nodes: Array<[string, number]> = [
      ['400:3:1', 0x00010003],
      ['400:9:1', 0x00010009],
    ];
    const plan = limits6(state([], nodes, []), [B]);
    expect(plan.deletes).to.deep.equal(['wg0 40003001', 'wg0 40009001']);
    expect(plan.messages).to.deep.equal([]);
    expect(plan.repairs.map((r) => r.address)).to.deep.equal(['fd42::3', 'fd42::9']);
  });

  it('replaces a node that points at another class (the peer now has another IPv4 address)', () => {
    const plan = limits6(state([[2, 500]], [['400:2:1', 0x00010007]], [['400:2:1', 0x00010002]]), [
      A,
    ]);
    expect(plan.deletes).to.deep.equal(['wg0 40002001']);
    expect(plan.messages).to.deep.equal(['RTM_NEWTFILTER u32 400:2:1 prio 11 classid 1:2 dev wg0']);
  });

  it('shapes IPv4-only peers and IPv6 addresses outside the shaped prefix on IPv4 alone', () => {
    const far = { address: '10.8.0.4', address6: 'fd42::1:0:4', publicKey: 'F' };
    const v4only = { address: '10.8.0.5', publicKey: 'V' };
    expect(
      limits6(
        state([
          [4, 1000],
          [5, 1000],
        ]),
        [far, v4only],
      ),
    ).to.deep.equal({
      deletes: [],
      messages: [],
      repairs: [],
    });
  });
});
