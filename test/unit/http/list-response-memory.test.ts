/**
 * Issue 29's memory target under `npm run bench:api`'s load (8 connections polling a 33 MB body
 * at 50,000 capped peers): the one 200 writer of GET /api/peers (writeListResponse, used by the
 * route and the fast path) hands the body every connection shares to each socket as it is, so
 * eight slow readers hold one body's bytes, not eight copies. The clients here send their
 * request and read nothing, so every response stays in flight while the process's ArrayBuffer
 * memory is measured.
 */
import { expect } from 'chai';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { writeListResponse } from '../../../src/http/list';

const MiB = 2 ** 20;
const BODY_BYTES = 32 * MiB;
const CONNECTIONS = 8;

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe('http/list: eight responses in flight share the one list body', () => {
  it('holds the body once however many connections are being sent it (no copy per connection)', async () => {
    const body = Buffer.alloc(BODY_BYTES, 0x20);
    let started = 0;
    const server = http.createServer((_req, res) => {
      writeListResponse(res, null, body, 'identity', Date.now());
      started += 1;
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const clients: net.Socket[] = [];
    try {
      const before = process.memoryUsage().arrayBuffers;
      for (let i = 0; i < CONNECTIONS; i++) {
        const socket = net.connect(port, '127.0.0.1');
        socket.pause(); // reads nothing: the response stays in flight
        socket.write('GET /api/peers HTTP/1.1\r\nHost: test\r\n\r\n');
        clients.push(socket);
      }
      for (let waited = 0; started < CONNECTIONS && waited < 5_000; waited += 10) await delay(10);
      expect(started).to.equal(CONNECTIONS);
      const inFlight = process.memoryUsage().arrayBuffers - before;
      // A copy per connection would be 8 × 32 MiB; the kernel's socket buffers hold a few MiB
      // of each response, outside the process's ArrayBuffers.
      expect(inFlight).to.be.below(BODY_BYTES);
    } finally {
      for (const socket of clients) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
