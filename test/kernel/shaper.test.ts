/**
 * Speed limits on a real kernel: a WireGuard server in the VM's root namespace, a client in
 * `wgcli`, bulk TCP through the tunnel in each direction (test/kernel/support/shaper-bulk.ts),
 * and `tc` as the independent oracle of what the kernel holds. Then 1,000 limited peers, with the
 * u32 per-node hit counters of `tc -s filter show` (CONFIG_CLS_U32_PERF, on in Debian's kernel)
 * showing how many filters a packet visits.
 */
import { expect } from 'chai';
import { Shaper, ifbNameFor } from '../../src/kernel/shaper';
import { type BulkEnds, expectRateAtLeast, expectRateNear, measureBulk } from './support/bulk-rate';
import {
  assertInTestVm,
  deleteLink,
  setupClientNamespace,
  setupTunnel,
  sh,
  teardownClientNamespace,
} from './support/topology';

const SERVER_IF = 'wgsh0';
const CLIENT_IF = 'wgsh1';
const SERVER_IFB = ifbNameFor(SERVER_IF);
const SERVER_IP = '10.88.0.1';
const PEER_IP = '10.88.0.2';
const LISTEN_PORT = 51881;
const TCP_PORT = 5301;
const LIMIT = 200_000;
/** "Within 15% of the limit" (issue 4). */
const TOLERANCE = 0.15;
/** Not measured: TCP slow start and the queue filling (a TCG guest is slow to get going). */
const WARMUP_MS = 3000;
const MEASURE_MS = 6000;
/** Parallel TCP connections per transfer (see shaper-bulk.ts). */
const STREAMS = 4;

type Direction = 'download' | 'upload';

const ENDS: BulkEnds = {
  serverIp: SERVER_IP,
  peerIp: PEER_IP,
  port: TCP_PORT,
  warmupMs: WARMUP_MS,
  measureMs: MEASURE_MS,
  streams: STREAMS,
};

const expectNear = (direction: Direction, limit: number, what: string): Promise<number> =>
  expectRateNear(() => measureBulk(direction, ENDS), limit, TOLERANCE, what);

const expectAtLeast = (direction: Direction, minimum: number, what: string): Promise<number> =>
  expectRateAtLeast(() => measureBulk(direction, ENDS), minimum, what);

function hex(address: string): string {
  return address
    .split('.')
    .map((octet) => Number(octet).toString(16).padStart(2, '0'))
    .join('');
}

/** Classes and u32 key nodes tc shows for `address` on the interface and on its IFB. */
function tcLeftovers(address: string, classid: string): string[] {
  const left: string[] = [];
  for (const dev of [SERVER_IF, SERVER_IFB]) {
    const classes = sh(`tc class show dev ${dev}`);
    if (new RegExp(`^class htb ${classid} `, 'm').test(classes))
      left.push(`class ${classid} on ${dev}`);
    const filters = sh(`tc filter show dev ${dev} parent 1:`);
    if (filters.includes(`match ${hex(address)}/ffffffff`))
      left.push(`filter for ${address} on ${dev}`);
  }
  return left;
}

describe('speed limits through a real tunnel', function () {
  this.timeout(300_000);
  let shaper: Shaper;
  const limited: Record<Direction, number> = { download: 0, upload: 0 };

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
    shaper = new Shaper();
  });

  after(function () {
    shaper?.close();
    deleteLink(SERVER_IF);
    deleteLink(SERVER_IFB);
    teardownClientNamespace();
  });

  it('does not slow a peer without a limit (HTB direct queue), either way', async () => {
    await shaper.ensure(SERVER_IF, [{ address: PEER_IP, publicKey: '' }]);
    for (const direction of ['download', 'upload'] as const) {
      await expectAtLeast(direction, 3 * LIMIT, `${direction} without a limit`);
    }
    expect(sh(`tc -s qdisc show dev ${SERVER_IF}`)).to.match(/direct_packets_stat [1-9]/);
  });

  it('holds a download at 200,000 B/s to within 15%', async () => {
    await shaper.setLimit(SERVER_IF, { address: PEER_IP, publicKey: '' }, LIMIT);
    limited.download = await expectNear('download', LIMIT, 'download with a limit');
    expect(sh(`tc -s class show dev ${SERVER_IF} classid 1:2`)).to.match(/Sent [1-9]\d{5,} bytes/);
  });

  it('holds an upload at 200,000 B/s to within 15%', async () => {
    limited.upload = await expectNear('upload', LIMIT, 'upload with a limit');
    expect(sh(`tc -s class show dev ${SERVER_IFB} classid 1:2`)).to.match(/Sent [1-9]\d{5,} bytes/);
  });

  it('still lists and enforces the limit after a restart (a new Shaper, nothing kept)', async () => {
    shaper.close();
    shaper = new Shaper();
    expect(await shaper.listLimits(SERVER_IF)).to.deep.equal(
      new Map([[PEER_IP, { download: LIMIT, upload: LIMIT }]]),
    );
    await expectNear('download', LIMIT, 'download after restart');
    await expectNear('upload', LIMIT, 'upload after restart');
  });

  it('enforces the upload limit again after the operator deleted the IFB and ingress qdisc', async () => {
    sh(`tc qdisc del dev ${SERVER_IF} ingress`);
    sh(`ip link del ${SERVER_IFB}`);
    await shaper.ensure(SERVER_IF, [{ address: PEER_IP, publicKey: '' }]);
    await expectNear('upload', LIMIT, 'upload after repair');
  });

  it('after removeLimit leaves no class or filter for the address and runs 3x faster', async () => {
    await shaper.removeLimit(SERVER_IF, PEER_IP);
    expect(tcLeftovers(PEER_IP, '1:2')).to.deep.equal([]);
    expect(await shaper.listLimits(SERVER_IF)).to.deep.equal(new Map());
    for (const direction of ['download', 'upload'] as const) {
      const minimum = 3 * Math.max(limited[direction], LIMIT);
      const rate = await expectAtLeast(direction, minimum, `${direction} after removeLimit`);
      console.log(
        `      ${(rate / limited[direction]).toFixed(1)}x the limited ` +
          `${Math.round(limited[direction])} B/s`,
      );
    }
  });
});

// ---------------------------------------------------------------------------------------------

const MANY_IF = 'wgsh2';
const MANY_IFB = ifbNameFor(MANY_IF);
/** A /22: 1,022 host addresses, four third octets, so four last-octet tables. */
const MANY_SUBNET = '10.89.0.1/22';
const PEERS = 1000;
const PACKETS = 200;

/** The i-th peer address: 10.89.0.2, 10.89.0.3, ... 10.89.3.233. */
function manyAddress(i: number): string {
  const value = 0x0a590000 + 2 + i;
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

interface U32Node {
  fh: string;
  table: string;
  bucket: string;
  hits: number;
  successes: number;
  line: string;
}

/** The key nodes of `tc -s filter show` with their (rule hit, success) counters. */
function u32Nodes(dev: string): U32Node[] {
  return sh(`tc -s filter show dev ${dev} parent 1:`)
    .split('\n')
    .map((line) => {
      const match =
        /fh (\S+) order \d+ key ht (\S+) bkt (\S+) .*\(rule hit (\d+) success (\d+)\)/.exec(line);
      return match
        ? {
            fh: match[1],
            table: match[2],
            bucket: match[3],
            hits: Number(match[4]),
            successes: Number(match[5]),
            line: line.trim(),
          }
        : undefined;
    })
    .filter((node): node is U32Node => node !== undefined);
}

/** Sends `count` UDP datagrams to `address` (out through the WireGuard interface's qdisc). */
function sendUdp(address: string, count: number): void {
  sh(
    `${process.execPath} -e '` +
      `const s = require("dgram").createSocket("udp4"); let n = 0;` +
      `const next = () => (n++ < ${count} ? s.send(Buffer.alloc(64), 9, "${address}", next) : s.close());` +
      `next();'`,
  );
}

interface Traversal {
  /** Key nodes visited per packet: the sum of all rule-hit increments over the packets. */
  perPacket: number;
  /** The nodes whose counters moved, as tc printed them. */
  visited: string[];
}

/** Sends PACKETS datagrams to `address` and reads which u32 nodes they went through. */
function traverse(address: string): Traversal {
  const before = new Map(u32Nodes(MANY_IF).map((node) => [node.fh, node.hits]));
  sendUdp(address, PACKETS);
  const after = u32Nodes(MANY_IF);
  const moved = after.filter((node) => node.hits !== (before.get(node.fh) ?? 0));
  const total = moved.reduce((sum, node) => sum + node.hits - (before.get(node.fh) ?? 0), 0);
  return { perPacket: total / PACKETS, visited: moved.map((node) => node.line) };
}

/** The longest list of key nodes in any one bucket of any table: what a packet may walk. */
function longestBucket(dev: string): number {
  const perBucket = new Map<string, number>();
  for (const node of u32Nodes(dev)) {
    const key = `${node.table}:${node.bucket}`;
    perBucket.set(key, (perBucket.get(key) ?? 0) + 1);
  }
  return Math.max(...perBucket.values());
}

describe('1,000 limited peers: hashed classification', function () {
  this.timeout(600_000);
  let shaper: Shaper;
  const evidence: string[] = [];
  const at: Record<number, { limited: Traversal; unlimited: Traversal; longest: number }> = {};
  // Limited: the last of the 1,000; unlimited: an address of the subnet without a limit.
  const limitedAddress = manyAddress(PEERS - 1);
  const unlimitedAddress = '10.89.3.250';

  before(function () {
    assertInTestVm();
    deleteLink(MANY_IF);
    deleteLink(MANY_IFB);
    sh(`ip link add ${MANY_IF} type wireguard`);
    sh(`ip addr add ${MANY_SUBNET} dev ${MANY_IF}`);
    sh(`ip link set ${MANY_IF} up`);
    shaper = new Shaper();
  });

  after(function () {
    shaper?.close();
    deleteLink(MANY_IF);
    deleteLink(MANY_IFB);
    if (evidence.length > 0) console.log(evidence.join('\n'));
  });

  async function limitPeers(from: number, to: number): Promise<void> {
    for (let i = from; i < to; i++) {
      await shaper.setLimit(MANY_IF, { address: manyAddress(i), publicKey: '' }, 1_000_000 + i);
    }
  }

  it('visits the same few filters per packet with 10 and with 1,000 limited peers', async () => {
    await limitPeers(0, 9);
    await shaper.setLimit(MANY_IF, { address: limitedAddress, publicKey: '' }, 2_000_000);
    at[10] = {
      limited: traverse(limitedAddress),
      unlimited: traverse(unlimitedAddress),
      longest: longestBucket(MANY_IF),
    };
    await limitPeers(9, PEERS - 1);
    at[PEERS] = {
      limited: traverse(limitedAddress),
      unlimited: traverse(unlimitedAddress),
      longest: longestBucket(MANY_IF),
    };
    const nodes = u32Nodes(MANY_IF);
    const peerNodes = nodes.filter((node) => /^2[0-9a-f]{2}$/.test(node.table));
    evidence.push(
      '',
      `      hashed lookup evidence, from tc -s filter show dev ${MANY_IF} parent 1: ` +
        `(${PACKETS} UDP packets per measurement)`,
      `        key nodes: ${nodes.length} (${peerNodes.length} peer nodes in ` +
        `${new Set(peerNodes.map((n) => n.table)).size} last-octet tables)`,
      ...[10, PEERS].map(
        (peers) =>
          `        ${String(peers).padStart(4)} limited peers: filters visited per packet: ` +
          `${at[peers].limited.perPacket} to a limited peer, ${at[peers].unlimited.perPacket} ` +
          `to an unlimited address; longest bucket: ${at[peers].longest} node(s)`,
      ),
      `        nodes a packet to ${limitedAddress} went through (1,000 peers):`,
      ...at[PEERS].limited.visited.map((line) => `          ${line}`),
      `        nodes a packet to ${unlimitedAddress} went through (1,000 peers):`,
      ...at[PEERS].unlimited.visited.map((line) => `          ${line}`),
    );
    expect(peerNodes).to.have.length(PEERS);
    // Root link, the bucket's link in 100:, the peer's own node: three, whatever the count.
    expect(at[10].limited.perPacket).to.equal(3);
    expect(at[PEERS].limited.perPacket).to.equal(at[10].limited.perPacket);
    // Root link and the bucket's link; the address's bucket in its table is empty.
    expect(at[10].unlimited.perPacket).to.equal(2);
    expect(at[PEERS].unlimited.perPacket).to.equal(at[10].unlimited.perPacket);
    expect(at[PEERS].longest).to.equal(1);
    expect(longestBucket(MANY_IFB)).to.equal(1);
    // The packets to the limited peer all matched its node and reached its class.
    const peerLine = at[PEERS].limited.visited.find((line) => line.includes('*flowid 1:'));
    expect(peerLine).to.match(/\*flowid 1:3e9 .*rule hit \d+ success \d+/);
  });

  it('lists all 1,000 limits from the kernel, and tc shows 1,000 classes on each device', async () => {
    const limits = await shaper.listLimits(MANY_IF);
    expect(limits.size).to.equal(PEERS);
    expect(limits.get(manyAddress(0))).to.deep.equal({ download: 1_000_000, upload: 1_000_000 });
    expect(limits.get(limitedAddress)).to.deep.equal({ download: 2_000_000, upload: 2_000_000 });
    for (const dev of [MANY_IF, MANY_IFB]) {
      const classes = sh(`tc class show dev ${dev}`)
        .split('\n')
        .filter((line) => / parent 1:ffff /.test(line));
      expect(classes, dev).to.have.length(PEERS);
    }
  });
});
