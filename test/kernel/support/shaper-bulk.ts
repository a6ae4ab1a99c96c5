/**
 * A bulk TCP transfer for the speed-limit tests, run as its own process so each end can live in
 * its own network namespace (`ip netns exec wgcli node .../shaper-bulk.js ...`):
 *
 *   node shaper-bulk.js receive HOST PORT WARMUP_MS MEASURE_MS
 *     listens, prints "listening", accepts one connection and counts the bytes that arrive; the
 *     first WARMUP_MS (TCP slow start, queues filling) are not measured, then prints
 *     {"bytes":N,"seconds":S,"bytesPerSecond":R} for the next MEASURE_MS and exits.
 *   node shaper-bulk.js send HOST PORT SECONDS
 *     connects and writes as fast as TCP lets it until the receiver closes or SECONDS pass.
 *
 * The rate is TCP payload per second at the receiver; the HTB limit counts IP packets, so a
 * limited transfer reads about 4% under the limit (40 bytes of IP and TCP header per ~1380).
 */
import * as net from 'node:net';

function receive(host: string, port: number, warmupMs: number, measureMs: number): void {
  const server = net.createServer((socket) => {
    server.close();
    let bytes = 0;
    let start: bigint | undefined;
    let startBytes = 0;
    socket.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    socket.on('error', () => undefined);
    setTimeout(() => {
      start = process.hrtime.bigint();
      startBytes = bytes;
    }, warmupMs);
    setTimeout(() => {
      const seconds = Number(process.hrtime.bigint() - (start ?? 0n)) / 1e9;
      const measured = bytes - startBytes;
      process.stdout.write(
        `${JSON.stringify({ bytes: measured, seconds, bytesPerSecond: measured / seconds })}\n`,
      );
      socket.destroy();
      process.exit(0);
    }, warmupMs + measureMs);
  });
  server.listen(port, host, () => process.stdout.write('listening\n'));
}

function send(host: string, port: number, seconds: number): void {
  const block = Buffer.alloc(64 * 1024, 0x5a);
  const socket = net.connect(port, host);
  const stop = (): void => {
    socket.destroy();
    process.exit(0);
  };
  socket.on('error', stop);
  socket.on('close', stop);
  setTimeout(stop, seconds * 1000);
  const pump = (): void => {
    while (socket.write(block));
  };
  socket.on('connect', pump);
  socket.on('drain', pump);
}

const [mode, host, port, a, b] = process.argv.slice(2);
if (mode === 'receive') receive(host, Number(port), Number(a), Number(b));
else if (mode === 'send') send(host, Number(port), Number(a));
else {
  process.stderr.write(
    'usage: shaper-bulk receive HOST PORT WARMUP_MS MEASURE_MS | send HOST PORT SECONDS\n',
  );
  process.exit(2);
}
