/**
 * A bulk TCP transfer for the speed-limit tests, run as its own process so each end can live in
 * its own network namespace (`ip netns exec wgcli node .../shaper-bulk.js ...`):
 *
 *   node shaper-bulk.js receive HOST PORT WARMUP_MS MEASURE_MS
 *     listens, prints "listening", and counts the bytes arriving on every connection it accepts.
 *     The clock starts with the first connection; the first WARMUP_MS (TCP slow start, queues
 *     filling) are not measured; then it prints {"bytes":N,"seconds":S,"bytesPerSecond":R} for
 *     the next MEASURE_MS and exits.
 *   node shaper-bulk.js send HOST PORT SECONDS STREAMS
 *     opens STREAMS connections and writes on each as fast as TCP lets it, until the receiver
 *     closes them or SECONDS pass.
 *
 * Several streams, like `iperf -P`: the limit is per peer, for all of its flows together, and one
 * Linux TCP socket keeps only about two packets in the qdisc (TCP small queues), so on a starved
 * test VM a single flow measures the sender's scheduling as much as the shaper.
 *
 * The rate is TCP payload per second at the receiver; the HTB limit counts IP packets, so a
 * limited transfer reads about 4% under the limit (52 bytes of IP and TCP header per 1368).
 */
import * as net from 'node:net';

function receive(host: string, port: number, warmupMs: number, measureMs: number): void {
  let bytes = 0;
  let clock: { start: bigint; bytes: number } | undefined;
  let started = false;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    socket.on('error', () => undefined);
    if (started) return;
    started = true;
    setTimeout(() => {
      clock = { start: process.hrtime.bigint(), bytes };
    }, warmupMs);
    setTimeout(() => {
      const seconds = Number(process.hrtime.bigint() - (clock?.start ?? 0n)) / 1e9;
      const measured = bytes - (clock?.bytes ?? 0);
      process.stdout.write(
        `${JSON.stringify({ bytes: measured, seconds, bytesPerSecond: measured / seconds })}\n`,
      );
      for (const open of sockets) open.destroy();
      process.exit(0);
    }, warmupMs + measureMs);
  });
  server.listen(port, host, () => process.stdout.write('listening\n'));
}

function send(host: string, port: number, seconds: number, streams: number): void {
  const block = Buffer.alloc(64 * 1024, 0x5a);
  let open = streams;
  const stop = (): void => process.exit(0);
  setTimeout(stop, seconds * 1000);
  for (let i = 0; i < streams; i++) {
    const socket = net.connect(port, host);
    socket.on('error', () => socket.destroy());
    socket.once('close', () => {
      if (--open === 0) stop();
    });
    const pump = (): void => {
      while (socket.write(block));
    };
    socket.on('connect', pump);
    socket.on('drain', pump);
  }
}

const [mode, host, port, a, b] = process.argv.slice(2);
if (mode === 'receive') receive(host, Number(port), Number(a), Number(b));
else if (mode === 'send') send(host, Number(port), Number(a), Number(b ?? 1));
else {
  process.stderr.write(
    'usage: shaper-bulk receive HOST PORT WARMUP_MS MEASURE_MS | send HOST PORT SECONDS STREAMS\n',
  );
  process.exit(2);
}
