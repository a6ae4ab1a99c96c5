/**
 * Host-side costs of the GET /api/peers path (issue 8), on generated WG_CMD_GET_DEVICE dumps
 * (no WireGuard needed; the VM measurement with a real kernel is `npm run bench:api`'s):
 * table-codec decode vs the fast decoder, the body build vs today's objects + JSON.stringify,
 * gzip and br of the body, and the longest event-loop stall during a sliced build.
 *
 * Run: npx tsc -p tsconfig.json && node dist/bench/list-path.js
 * Options: BENCH_SIZES (default "10000,50000"), BENCH_ROUNDS (default 7).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { listPeers, toPeerJson } from '../test/support/peer-list';
import { BROTLI_OPTIONS, GZIP_OPTIONS, buildListBody } from '../src/http/list-body';
import { parseDevice } from '../test/support/wg-table-decode';
import { decodeDeviceDump } from '../src/kernel/wireguard/dump';
import { WG_CMD_GET_DEVICE } from '../src/kernel/wireguard/schema';
import type { PeerSnapshot } from '../src/peers';
import { generatedDump } from '../test/support/generated-dump';
import { serviceOver } from '../test/support/service-over';
import { median, time, timed } from './support';

const SIZES = (process.env.BENCH_SIZES ?? '10000,50000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);

/** Medians of `a` and `b` run alternately (A B A B …), so that load on a shared host hits both. */
async function alternating(a: () => unknown, b: () => unknown): Promise<[number, number]> {
  const samplesA: number[] = [];
  const samplesB: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    samplesA.push(await time(a));
    samplesB.push(await time(b));
  }
  return [median(samplesA), median(samplesB)];
}

function row(label: string, ms: number, extra = ''): void {
  console.log(`  ${label.padEnd(44)} ${ms.toFixed(1).padStart(8)} ms${extra}`);
}

async function main(): Promise<void> {
  const gzip = promisify(zlib.gzip);
  const brotli = promisify(zlib.brotliCompress);
  console.log(
    `list-path bench, node ${process.version}, median of ${ROUNDS} rounds, pairs run alternately`,
  );
  for (const size of SIZES) {
    const messages = generatedDump(size);
    const bytes = messages.reduce((sum, m) => sum + m.length, 0);
    console.log(
      `\n${size} peers: ${messages.length} messages, ${(bytes / 1e6).toFixed(1)} MB of attributes`,
    );
    const replies = messages.map((attributes) => ({
      cmd: WG_CMD_GET_DEVICE,
      version: 1,
      attributes,
    }));
    const [table, fast] = await alternating(
      () => parseDevice('wgx', replies),
      () => decodeDeviceDump('wgx', messages),
    );
    row('decode, table codec (parseDevice)', table);
    row('decode, fast (decodeDeviceDump)', fast, `  (${(table / fast).toFixed(1)}x faster)`);

    const service = serviceOver(decodeDeviceDump('wgx', messages), 60_000);
    const snapshot: PeerSnapshot = await service.snapshot();
    const [reference, build] = await alternating(
      async () => {
        const entries = await listPeers(service, null);
        const text = JSON.stringify({
          success: true,
          peers: entries.map(toPeerJson),
          total_count: entries.length,
          filter: null,
        });
        return Buffer.from(text);
      },
      () => buildListBody(snapshot, null),
    );
    row("body, today's PeerEntry + JSON.stringify", reference);
    row(
      'body, sliced serializer (buildListBody)',
      build,
      `  (${(reference / build).toFixed(1)}x faster)`,
    );

    const body = await buildListBody(snapshot, null);
    const stall = monitorEventLoopDelay({ resolution: 1 });
    stall.enable();
    await buildListBody(snapshot, null);
    stall.disable();
    console.log(
      `  body: ${(body.length / 1e6).toFixed(1)} MB; longest event-loop stall during a build ${(stall.max / 1e6).toFixed(1)} ms`,
    );
    const gzipped = await gzip(body, GZIP_OPTIONS);
    const brotlied = await brotli(body, BROTLI_OPTIONS);
    row(
      `gzip (level ${GZIP_OPTIONS.level}, thread pool)`,
      await timed(ROUNDS, () => gzip(body, GZIP_OPTIONS)),
      `  → ${(gzipped.length / 1e6).toFixed(2)} MB`,
    );
    row(
      'br (quality 1, thread pool)',
      await timed(ROUNDS, () => brotli(body, BROTLI_OPTIONS)),
      `  → ${(brotlied.length / 1e6).toFixed(2)} MB`,
    );
    const heap = process.memoryUsage();
    console.log(
      `  memory now: rss ${(heap.rss / 2 ** 20).toFixed(0)} MiB, heap used ${(heap.heapUsed / 2 ** 20).toFixed(0)} MiB`,
    );
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
