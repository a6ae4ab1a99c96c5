/**
 * Netlink read benchmark (run inside the VM as root by `npm run bench:netlink`): a WireGuard
 * device with 10,000 peers, then the median time of one full device read through our netlink
 * client and of one `wg show <if> dump` process, measured in the same run.
 *
 * Options: BENCH_PEERS (default 10000), BENCH_ROUNDS (default 15).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { randomPublicKey } from '../test/support/keys';
import { Links } from '../src/kernel/link';
import { WireGuard } from '../src/kernel/wireguard';
import { median } from './support';

const IFNAME = 'wgbench0';
const PEERS = Number(process.env.BENCH_PEERS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);

async function main(): Promise<void> {
  const links = new Links();
  const wireguard = new WireGuard();
  try {
    await links.getLink(IFNAME).then(
      (link) => links.deleteLink(link.index),
      () => undefined,
    );
    const index = await links.createWireGuard(IFNAME);
    await wireguard.configureDevice(IFNAME, { privateKey: randomBytes(32), listenPort: 51999 });
    await links.setUp(index);

    const keysStart = performance.now();
    const peers = Array.from({ length: PEERS }, (_, i) => ({
      publicKey: randomPublicKey(),
      allowedIps: [
        {
          family: 4 as const,
          address: `10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`,
          cidr: 32,
        },
      ],
    }));
    const keysMs = performance.now() - keysStart;
    const addStart = performance.now();
    await wireguard.addPeers(IFNAME, peers);
    const addMs = performance.now() - addStart;

    const device = await wireguard.getDevice(IFNAME);
    const dumpLines = execFileSync('wg', ['show', IFNAME, 'dump'], { encoding: 'utf8' })
      .trim()
      .split('\n');
    if (device.peers.length !== PEERS || dumpLines.length - 1 !== PEERS) {
      throw new Error(
        `expected ${PEERS} peers, netlink read ${device.peers.length}, wg ${dumpLines.length - 1}`,
      );
    }

    const ours: number[] = [];
    const theirs: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      let start = performance.now();
      await wireguard.getDevice(IFNAME);
      ours.push(performance.now() - start);
      start = performance.now();
      execFileSync('wg', ['show', IFNAME, 'dump'], { maxBuffer: 64 * 1024 * 1024 });
      theirs.push(performance.now() - start);
    }

    // Concurrent reads queue on one socket; this shows what ten simultaneous polls cost.
    const concurrentStart = performance.now();
    await Promise.all(Array.from({ length: 10 }, () => wireguard.getDevice(IFNAME)));
    const concurrentMs = performance.now() - concurrentStart;

    const fmt = (ms: number): string => `${ms.toFixed(1)} ms`;
    console.log(
      `kernel ${execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim()}, ${PEERS} peers, ${ROUNDS} rounds`,
    );
    console.log(`generate ${PEERS} key pairs (OpenSSL X25519):   ${fmt(keysMs)}`);
    console.log(`add ${PEERS} peers in one addPeers call:        ${fmt(addMs)}`);
    console.log(
      `full device read, netlink client (median):    ${fmt(median(ours))}  (min ${fmt(Math.min(...ours))}, max ${fmt(Math.max(...ours))})`,
    );
    console.log(
      `full device read, wg show dump process (median): ${fmt(median(theirs))}  (min ${fmt(Math.min(...theirs))}, max ${fmt(Math.max(...theirs))})`,
    );
    console.log(`10 concurrent reads through the client:       ${fmt(concurrentMs)}`);
  } finally {
    await links.getLink(IFNAME).then(
      (link) => links.deleteLink(link.index),
      () => undefined,
    );
    wireguard.close();
    links.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
