/**
 * Per-packet cost of classifying IPv4 and IPv6 packets at 10,000 limited dual-stack peers (issue
 * 18), side by side in one run. Needs root, sch_htb, cls_u32, ifb and pktgen (not WireGuard):
 * the shaped interface is a dummy device, whose transmit only frees the packet, and the kernel's
 * packet generator sends through its egress qdisc (pktgen `xmit_mode queue_xmit`, i.e.
 * dev_queue_xmit: HTB's enqueue runs the u32 classifier, then dequeue and transmit), so what is
 * timed is the kernel's egress path and nothing of a socket or a receiver. Run it in the test VM
 * (`npm run bench:classify`) or as root on a host (`node dist/bench/classify.js`).
 *
 * Prints, per family, nanoseconds per packet (median of the rounds; rounds of the two families
 * alternate): first with no qdisc on the device (the path without any shaping), then with the
 * shaper's HTB tree and BENCH_PEERS limits whose rate no packet reaches, packets addressed to the
 * last peer's address; IPv4 is the baseline, the IPv6 line shows its ratio to it. `tc -s class`
 * (the oracle) shows that the limited packets went through the peer's class.
 *
 * Options: BENCH_PEERS (default 10000), BENCH_ROUNDS (default 7), BENCH_PACKETS per round
 * (default 200000).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { Shaper, ifbNameFor } from '../src/kernel/shaper';
import { median } from './support';

const IFNAME = 'clbench0';
const PEERS = Number(process.env.BENCH_PEERS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const PACKETS = Number(process.env.BENCH_PACKETS ?? 200_000);
/** Far above what the generator sends: the limit classifies, it never delays a packet. */
const RATE = 1_000_000_000;
const PKTGEN = '/proc/net/pktgen';
/** The generator's thread on CPU 0 and the pktgen device on IFNAME (`<ifname>@<id>`). */
const THREAD = `${PKTGEN}/kpktgend_0`;
const DEVICE = `${IFNAME}@1`;

type Family = 'IPv4' | 'IPv6';

function run(command: string, ...args: string[]): string {
  return execFileSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
}

function cleanup(): void {
  for (const link of [IFNAME, ifbNameFor(IFNAME)]) {
    try {
      run('ip', 'link', 'del', link);
    } catch {
      // not there
    }
  }
}

/** Peer i: 10.80.0.2 + i and fd80::2 + i, in the interface's 10.80.0.0/16 and fd80::/64. */
function peer(i: number): { address: string; address6: string; publicKey: string } {
  const value = 0x0a500000 + 2 + i;
  const address = [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
  return { address, address6: `fd80::${(2 + i).toString(16)}`, publicKey: '' };
}

function pktgen(file: string, command: string): void {
  writeFileSync(file, `${command}\n`);
  const result = /Result: (.*)/.exec(readFileSync(file, 'utf8'));
  if (file !== `${PKTGEN}/pgctrl` && result && !result[1]!.startsWith('OK')) {
    throw new Error(`pktgen ${command}: ${result[1]}`);
  }
}

/** Sends PACKETS packets of `family` to `target` through IFNAME's qdisc; ns per packet. */
function send(family: Family, target: { address: string; address6: string }): number {
  pktgen(THREAD, 'rem_device_all');
  pktgen(THREAD, `add_device ${DEVICE}`);
  const device = `${PKTGEN}/${DEVICE}`;
  for (const command of [
    `count ${PACKETS}`,
    'pkt_size 128',
    'delay 0',
    'clone_skb 0',
    'xmit_mode queue_xmit',
    'dst_mac 02:00:00:00:00:01',
    ...(family === 'IPv4'
      ? ['src_min 10.80.0.1', 'src_max 10.80.0.1', `dst ${target.address}`]
      : ['src6 fd80::1', `dst6 ${target.address6}`]),
  ]) {
    pktgen(device, command);
  }
  pktgen(`${PKTGEN}/pgctrl`, 'start'); // returns when the count is sent
  const report = readFileSync(device, 'utf8');
  const result = /Result: OK: (\d+)\(c\d+\+d\d+\) usec, (\d+) \(/.exec(report);
  const errors = /errors: (\d+)/.exec(report);
  if (!result) throw new Error(`pktgen did not finish: ${report}`);
  if (Number(result[2]) !== PACKETS || (errors && Number(errors[1]) !== 0)) {
    throw new Error(`pktgen sent ${result[2]} of ${PACKETS} packets, ${errors?.[1]} errors`);
  }
  return (Number(result[1]) * 1000) / PACKETS;
}

/** Alternating rounds of both families; the median ns per packet of each. */
function measure(target: { address: string; address6: string }): Record<Family, number> {
  const times: Record<Family, number[]> = { IPv4: [], IPv6: [] };
  send('IPv4', target); // warm-up (caches, the generator's first skb)
  send('IPv6', target);
  for (let round = 0; round < ROUNDS; round++) {
    for (const family of round % 2 ? (['IPv6', 'IPv4'] as const) : (['IPv4', 'IPv6'] as const)) {
      times[family].push(send(family, target));
    }
  }
  return { IPv4: median(times.IPv4), IPv6: median(times.IPv6) };
}

function print(label: string, figures: Record<Family, number>): void {
  console.log(`  ${label}`);
  console.log(`    IPv4 (baseline): ${figures.IPv4.toFixed(0)} ns per packet`);
  console.log(
    `    IPv6:            ${figures.IPv6.toFixed(0)} ns per packet ` +
      `(${(figures.IPv6 / figures.IPv4).toFixed(2)}x IPv4)`,
  );
}

/** Packets `tc -s class show` counted in the class of `address` on IFNAME. */
function classPackets(address: string): number {
  const minor = (Number(address.split('.')[2]) << 8) | Number(address.split('.')[3]);
  const out = run('tc', '-s', 'class', 'show', 'dev', IFNAME, 'classid', `1:${minor.toString(16)}`);
  const sent = /Sent \d+ bytes (\d+) pkt/.exec(out);
  if (!sent) throw new Error(`tc shows no class 1:${minor.toString(16)} on ${IFNAME}: ${out}`);
  return Number(sent[1]);
}

async function main(): Promise<void> {
  cleanup();
  run('modprobe', 'pktgen');
  run('ip', 'link', 'add', IFNAME, 'txqueuelen', '1000', 'type', 'dummy');
  run('ip', 'addr', 'add', '10.80.0.1/16', 'dev', IFNAME);
  run('ip', '-6', 'addr', 'add', 'fd80::1/64', 'dev', IFNAME, 'nodad');
  run('ip', 'link', 'set', IFNAME, 'up');
  const target = peer(PEERS - 1);
  console.log(
    `classification benchmark: ${PACKETS} packets of 128 bytes per round, ${ROUNDS} rounds per ` +
      `family, alternating; kernel ${run('uname', '-r').trim()}`,
  );
  const shaper = new Shaper();
  try {
    print('no qdisc on the device (the egress path without shaping):', measure(target));
    const peers = Array.from({ length: PEERS }, (_, i) => peer(i));
    await shaper.setLimits(
      IFNAME,
      peers.map((p) => ({ peer: p, bytesPerSecond: RATE })),
    );
    const before = classPackets(target.address);
    const limited = measure(target);
    const counted = classPackets(target.address) - before;
    print(
      `${PEERS} limited dual-stack peers (HTB + u32 trees of both families), packets to ` +
        `${target.address} / ${target.address6}:`,
      limited,
    );
    const expected = (2 * ROUNDS + 2) * PACKETS;
    console.log(
      `  tc -s class: the peer's class counted ${counted} of the ${expected} packets sent to it`,
    );
    if (counted !== expected) process.exitCode = 1;
  } finally {
    try {
      pktgen(THREAD, 'rem_device_all');
    } catch {
      // pktgen not loaded
    }
    shaper.close();
    cleanup();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  cleanup();
  process.exit(1);
});
