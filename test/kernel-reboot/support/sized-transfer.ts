/**
 * A TCP transfer of a given size through the tunnel, run as its own process so each end can
 * live in its own network namespace (`ip netns exec wgrc1 node .../sized-transfer.js ...`):
 *
 *   node sized-transfer.js sink HOST PORT IDLE_MS
 *     listens on HOST:PORT, prints "listening", accepts one connection and counts the payload
 *     bytes that arrive until the sender ends it or nothing arrives for IDLE_MS (a data cap
 *     that cut the tunnel), then prints {"bytes":N} and exits.
 *   node sized-transfer.js source HOST PORT BYTES SECONDS
 *     connects and writes BYTES, then ends the connection; exits once it is closed, or after
 *     SECONDS (a cut tunnel never acknowledges the rest).
 *
 * Used to make a data cap count (boot 1) and to see where a restored cap cuts (boot 2): the
 * sink's count is what got through.
 */
import * as net from 'node:net';

function sink(host: string, port: number, idleMs: number): void {
  let bytes = 0;
  let timer: NodeJS.Timeout | undefined;
  const server = net.createServer((socket) => {
    server.close(); // one connection
    const done = (): void => {
      clearTimeout(timer);
      process.stdout.write(`${JSON.stringify({ bytes })}\n`);
      socket.destroy();
      process.exit(0);
    };
    const idle = (): void => {
      clearTimeout(timer);
      timer = setTimeout(done, idleMs);
    };
    socket.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      idle();
    });
    socket.on('end', done);
    socket.on('error', done);
    idle();
  });
  server.listen(port, host, () => process.stdout.write('listening\n'));
}

function source(host: string, port: number, bytes: number, seconds: number): void {
  setTimeout(() => process.exit(0), seconds * 1000);
  const socket = net.connect(port, host, () => socket.end(Buffer.alloc(bytes, 0x5a)));
  socket.on('error', () => process.exit(0));
  socket.on('close', () => process.exit(0));
}

const [mode, host, port, a, b] = process.argv.slice(2);
if (mode === 'sink') sink(host, Number(port), Number(a));
else if (mode === 'source') source(host, Number(port), Number(a), Number(b));
else {
  process.stderr.write(
    'usage: sized-transfer sink HOST PORT IDLE_MS | source HOST PORT BYTES SECONDS\n',
  );
  process.exit(2);
}
