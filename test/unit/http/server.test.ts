/**
 * The HTTP limits of issue 10 over real sockets: the server is driven byte by byte with
 * net.Socket so that what the client has (not) sent is known. Timeouts are made short
 * (hundreds of ms) and nothing asserts how long anything took: a test only waits, within
 * mocha's generous timeout, for the server to answer or close.
 */
import { expect } from 'chai';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { createHttpServer, createServer, type HttpLimits } from '../../../src/http';
import { type CapturedLog, captureLog } from '../support/log-capture';
import { setup } from './helpers';

interface Exchange {
  /** Everything the server sent before it closed the connection. */
  text: string;
  status: number | null;
  body: Record<string, unknown> | null;
}

function parse(text: string): Exchange {
  const status = /^HTTP\/1\.1 (\d{3}) /.exec(text);
  const split = text.indexOf('\r\n\r\n');
  const rest = split === -1 ? '' : text.slice(split + 4);
  return {
    text,
    status: status === null ? null : Number(status[1]),
    body: rest.startsWith('{') ? (JSON.parse(rest) as Record<string, unknown>) : null,
  };
}

/** Connects, lets `talk` write, and resolves once the server has closed the connection. */
function converse(
  server: http.Server,
  talk: (socket: net.Socket) => void = () => undefined,
): Promise<Exchange> {
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', (error: NodeJS.ErrnoException) => {
      // A reset after the answer still counts as the server closing.
      if (error.code === 'ECONNRESET' || error.code === 'EPIPE') return;
      reject(error);
    });
    socket.on('close', () => resolve(parse(text)));
    socket.on('connect', () => talk(socket));
  });
}

/** A server around the app of `setup`; the app and the server log to `log`. */
async function listening(
  limits: Partial<HttpLimits>,
  log: CapturedLog = captureLog(),
): Promise<http.Server> {
  const server = createServer(setup({ log }).app, {
    timeoutCheckIntervalMs: 50,
    ...limits,
    logger: log.logger,
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

function close(server: http.Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

const LONG = 60_000;

/** The Keep-Alive header of a GET /healthz on a kept-alive connection, which is then dropped. */
function keepAliveHeader(server: http.Server): Promise<string | undefined> {
  const { port } = server.address() as AddressInfo;
  const agent = new http.Agent({ keepAlive: true });
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/healthz', agent }, (res) => {
        res.resume();
        res.on('end', () => {
          agent.destroy();
          resolve(res.headers['keep-alive'] as string | undefined);
        });
      })
      .on('error', reject);
  });
}

describe('HTTP limits (issue 10)', () => {
  let server: http.Server;
  afterEach(async () => {
    await close(server);
  });

  it('answers 413 to an announced 100 MB body before the client sends a byte of it, and closes', async () => {
    server = await listening({ headersTimeoutMs: LONG, requestTimeoutMs: LONG });
    // Only the headers are ever written: an answer can only come without the body.
    const res = await converse(server, (socket) => {
      socket.write(
        'POST /api/peer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
          'Content-Length: 100000000\r\n\r\n',
      );
    });
    expect(res.status).to.equal(413);
    expect(res.text).to.match(/\r\nConnection: close\r\n/i);
    expect(res.body).to.include({ success: false, code: 'BODY_TOO_LARGE' });
  });

  it('answers 413 instead of 100 Continue to a client that waits before sending a large body', async () => {
    server = await listening({ headersTimeoutMs: LONG, requestTimeoutMs: LONG });
    const res = await converse(server, (socket) => {
      socket.write(
        'POST /api/peer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
          'Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n',
      );
    });
    expect(res.text).not.to.contain('100 Continue');
    expect(res.status).to.equal(413);
    expect(res.body).to.include({ code: 'BODY_TOO_LARGE' });
  });

  it('still serves a small body, with 100 Continue when asked for', async () => {
    server = await listening({});
    const res = await converse(server, (socket) => {
      socket.write(
        'POST /api/peer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
          'Expect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n',
      );
      socket.once('data', () => socket.write('{}'));
    });
    expect(res.text.startsWith('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 ')).to.equal(true);
  });

  it('cuts a chunked body at the limit with 413, without waiting for its end', async () => {
    // The request timeout is far away: the answer can only come from the cut.
    server = await listening({ headersTimeoutMs: LONG, requestTimeoutMs: LONG });
    const res = await converse(server, (socket) => {
      socket.write(
        'POST /api/peer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
          'Transfer-Encoding: chunked\r\n\r\n',
      );
      const kilobyte = `400\r\n${' '.repeat(1024)}\r\n`;
      // 1 KiB at a time, never the final chunk: the body never ends on its own.
      const timer = setInterval(() => {
        if (socket.writable) socket.write(kilobyte);
      }, 20);
      socket.on('close', () => clearInterval(timer));
    });
    expect(res.status).to.equal(413);
    expect(res.body).to.include({ success: false, code: 'BODY_TOO_LARGE' });
  });

  it('still parses a chunked body under the limit (counting takes no chunk from the parser)', async () => {
    server = await listening({});
    const chunked = (body: string[]) =>
      converse(server, (socket) => {
        socket.write(
          'POST /api/peer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
            'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n' +
            body.map((part) => `${part.length.toString(16)}\r\n${part}\r\n`).join('') +
            '0\r\n\r\n',
        );
      });
    // SPEC: POST /api/peer takes an empty object and refuses unknown fields.
    const created = await chunked(['{', '}']);
    expect(created.status).to.equal(201);
    const refused = await chunked(['{"col', 'our":"x"}']);
    expect(refused.status).to.equal(400);
    expect(JSON.stringify(refused.body)).to.contain('colour');
  });

  it('closes a connection whose headers do not arrive in time, with 408 JSON', async () => {
    server = await listening({ headersTimeoutMs: 200, requestTimeoutMs: LONG });
    const res = await converse(server, (socket) => {
      socket.write('GET /api/peers HTTP/1.1\r\nHost: t\r\n');
    });
    expect(res.status).to.equal(408);
    expect(res.body).to.include({ success: false, code: 'REQUEST_TIMEOUT' });
  });

  it('closes a connection whose body does not arrive in time, with 408 JSON', async () => {
    server = await listening({ headersTimeoutMs: 200, requestTimeoutMs: 400 });
    const res = await converse(server, (socket) => {
      socket.write(
        'POST /api/peer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
          'Content-Length: 100\r\n\r\n{"a":',
      );
    });
    expect(res.status).to.equal(408);
    expect(res.body).to.include({ success: false, code: 'REQUEST_TIMEOUT' });
  });

  it('closes an idle keep-alive connection after its answer', async () => {
    server = await listening({ keepAliveTimeoutMs: 200 });
    const res = await converse(server, (socket) => {
      socket.write('GET /api/peers HTTP/1.1\r\nHost: t\r\n\r\n');
    });
    // The one answer, kept alive, then closed by the server with nothing more said.
    expect(res.status).to.equal(200);
    expect(res.text).to.match(/\r\nConnection: keep-alive\r\n/i);
    expect(res.text.match(/HTTP\/1\.1 /g)).to.have.length(1);
  });

  // Node announces the idle timeout it applies in whole seconds (Keep-Alive: timeout=N), read
  // from the server's own keepAliveTimeout: the header shows what the setting became.
  it("applies the keep-alive timeout it is given, and Node's 5 s by default", async () => {
    server = await listening({ keepAliveTimeoutMs: 2_000 });
    expect(await keepAliveHeader(server)).to.equal('timeout=2');
    await close(server);
    server = await listening({});
    expect(await keepAliveHeader(server)).to.equal('timeout=5');
  });

  it('passes the limits of createHttpServer to the server (the keep-alive timeout)', async () => {
    const log = captureLog();
    const { service } = setup({ log });
    server = createHttpServer({
      service,
      logger: log.logger,
      limits: { keepAliveTimeoutMs: 3_000 },
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    expect(await keepAliveHeader(server)).to.equal('timeout=3');
  });

  it('closes new connections over the cap at once, and serves again once idle ones are gone', async () => {
    server = await listening({ maxConnections: 2, headersTimeoutMs: LONG, requestTimeoutMs: LONG });
    const { port } = server.address() as AddressInfo;
    const idle = await Promise.all(
      [1, 2].map(
        () =>
          new Promise<net.Socket>((resolve) => {
            const s = net.connect(port, '127.0.0.1', () => resolve(s));
            s.on('error', () => undefined);
          }),
      ),
    );
    await until(async () => (await connections(server)) === 2);
    const refused = await converse(server, (socket) => {
      socket.write('GET /api/peers HTTP/1.1\r\nHost: t\r\n\r\n');
    });
    expect(refused.text).to.equal('');

    for (const s of idle) s.destroy();
    await until(async () => (await connections(server)) === 0);
    const served = await converse(server, (socket) => {
      socket.write('GET /api/peers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n');
    });
    expect(served.status).to.equal(200);
    expect(served.body).to.include({ success: true });
  });

  it('answers an unknown method with JSON 400 and closes', async () => {
    server = await listening({});
    const res = await converse(server, (socket) => {
      socket.write('FROBNICATE /api/peers HTTP/1.1\r\nHost: t\r\n\r\n');
    });
    expect(res.status).to.equal(400);
    expect(res.body).to.include({ success: false, code: 'METHOD_NOT_SUPPORTED' });
  });

  it('answers CONNECT with JSON 405 and closes', async () => {
    server = await listening({});
    const res = await converse(server, (socket) => {
      socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    });
    expect(res.status).to.equal(405);
    expect(res.body).to.include({ success: false, code: 'METHOD_NOT_ALLOWED' });
  });

  it('answers a method Node knows on a known path with the JSON 405 of the app', async () => {
    server = await listening({});
    const res = await converse(server, (socket) => {
      socket.write('PROPFIND /api/peers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n');
    });
    expect(res.status).to.equal(405);
    expect(res.body).to.include({ success: false, code: 'METHOD_NOT_ALLOWED' });
  });
});

// What the server answers before Express sees the request is logged too: an operator sees every
// refusal, not only those of the app.
describe('HTTP refusals of the server in the log', () => {
  let server: http.Server;
  let log: CapturedLog;
  beforeEach(() => {
    log = captureLog();
  });
  afterEach(async () => {
    await close(server);
  });

  const withMsg = (msg: string): Array<Record<string, unknown>> =>
    log.lines().filter((l) => l['msg'] === msg);
  const LOOPBACK = /^(::ffff:)?127\.0\.0\.1$/;

  it('logs an announced over-limit body (413) with the line and X-Request-Id of any request', async () => {
    server = await listening({ headersTimeoutMs: LONG, requestTimeoutMs: LONG }, log);
    const res = await converse(server, (socket) => {
      socket.write(
        'POST /api/peer?who=me HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
          'X-Request-Id: big-body-1\r\nContent-Length: 100000000\r\n\r\n',
      );
    });
    expect(res.status).to.equal(413);
    expect(res.text).to.match(/\r\nX-Request-Id: big-body-1\r\n/i);
    // The line is written when the server's side of the connection closes.
    await until(async () => withMsg('request').length > 0);
    const lines = withMsg('request');
    expect(lines).to.have.length(1);
    expect(lines[0]).to.include({
      level: 30,
      method: 'POST',
      path: '/api/peer',
      status: 413,
      requestId: 'big-body-1',
    });
    expect(lines[0]!['ms']).to.be.a('number');
    expect(lines[0]!['client']).to.match(LOOPBACK);
    expect(lines[0]).to.not.have.property('aborted');
    expect(withMsg('request refused')).to.deep.equal([]);
  });

  it('logs the 413 that replaces 100 Continue, with a new id when the client gave none', async () => {
    server = await listening({ headersTimeoutMs: LONG, requestTimeoutMs: LONG }, log);
    const res = await converse(server, (socket) => {
      socket.write(
        'POST /api/peer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
          'Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n',
      );
    });
    expect(res.status).to.equal(413);
    const id = /\r\nX-Request-Id: ([^\r]+)\r\n/i.exec(res.text)?.[1];
    expect(id).to.match(/^[0-9a-f-]{36}$/);
    await until(async () => withMsg('request').length > 0);
    expect(withMsg('request')).to.have.length(1);
    expect(withMsg('request')[0]).to.include({ status: 413, requestId: id });
  });

  it('logs a chunked body cut at the limit once (the app logs it: it is past Express)', async () => {
    server = await listening({ headersTimeoutMs: LONG, requestTimeoutMs: LONG }, log);
    const res = await converse(server, (socket) => {
      socket.write(
        'POST /api/peer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
          'Transfer-Encoding: chunked\r\n\r\n' +
          // 6 KiB in 1 KiB chunks, past the 4 KiB limit, and never the final chunk.
          `400\r\n${' '.repeat(1024)}\r\n`.repeat(6),
      );
    });
    expect(res.status).to.equal(413);
    await until(async () => withMsg('request').length > 0);
    expect(withMsg('request').map((l) => [l['path'], l['status']])).to.deep.equal([
      ['/api/peer', 413],
    ]);
  });

  it('logs a request the parser refuses: client, status, code and the parser error', async () => {
    server = await listening({}, log);
    const res = await converse(server, (socket) => {
      socket.write('FROBNICATE /api/peers HTTP/1.1\r\nHost: t\r\n\r\n');
    });
    expect(res.status).to.equal(400);
    const [line, ...more] = withMsg('request refused');
    expect(more).to.deep.equal([]);
    expect(line).to.include({
      level: 30,
      status: 400,
      code: 'METHOD_NOT_SUPPORTED',
      cause: 'HPE_INVALID_METHOD',
    });
    expect(line!['client']).to.match(LOOPBACK);
    expect(withMsg('request')).to.deep.equal([]);
  });

  it('logs the 408 of headers that do not arrive in time', async () => {
    server = await listening({ headersTimeoutMs: 200, requestTimeoutMs: LONG }, log);
    const res = await converse(server, (socket) => {
      socket.write('GET /api/peers HTTP/1.1\r\nHost: t\r\n');
    });
    expect(res.status).to.equal(408);
    expect(withMsg('request refused')).to.have.length(1);
    expect(withMsg('request refused')[0]).to.include({
      status: 408,
      code: 'REQUEST_TIMEOUT',
      cause: 'ERR_HTTP_REQUEST_TIMEOUT',
    });
  });

  it('logs a CONNECT it refuses (405)', async () => {
    server = await listening({}, log);
    const res = await converse(server, (socket) => {
      socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    });
    expect(res.status).to.equal(405);
    expect(withMsg('request refused')).to.have.length(1);
    const [line] = withMsg('request refused');
    expect(line).to.include({
      level: 30,
      status: 405,
      code: 'METHOD_NOT_ALLOWED',
      method: 'CONNECT',
    });
    expect(line!['client']).to.match(LOOPBACK);
  });
});

function connections(server: http.Server): Promise<number> {
  return new Promise((resolve, reject) =>
    server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
  );
}

/** Waits for a condition the server reaches on its own; mocha's timeout bounds the wait. */
async function until(condition: () => Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((resolve) => setTimeout(resolve, 10));
}
