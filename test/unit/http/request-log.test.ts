import { expect } from 'chai';
import { ROUTES } from '../../../src/http';
import { logRequest, requestIdFrom } from '../../../src/http/request-log';
import { captureLog } from '../support/log-capture';
import { setup } from './helpers';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

function requestLines(log: ReturnType<typeof setup>['log']): Array<Record<string, unknown>> {
  return log.lines().filter((l) => l['msg'] === 'request');
}

// Issue 9 "Logs": a request id taken from X-Request-Id when given, else generated, echoed back,
// on the request's log line and on the error line of a server fault.
describe('http request ids', () => {
  it('echoes a given X-Request-Id and logs it with the client address', async () => {
    const { http, log } = setup();
    const res = await http.post('/api/peer').set('X-Request-Id', 'nginx-8f2c1e0a9b7d4c3e');
    expect(res.status).to.equal(201);
    expect(res.headers['x-request-id']).to.equal('nginx-8f2c1e0a9b7d4c3e');
    const [line] = requestLines(log);
    expect(line).to.include({
      method: 'POST',
      path: '/api/peer',
      status: 201,
      requestId: 'nginx-8f2c1e0a9b7d4c3e',
    });
    // supertest connects over loopback, as IPv4 or IPv4-mapped IPv6.
    expect(line!['client']).to.match(/^(::ffff:)?127\.0\.0\.1$|^::1$/);
  });

  it('generates a UUID when none is given, different for each request, and logs it', async () => {
    const { http, log } = setup();
    const first = await http.post('/api/peer');
    const second = await http.post('/api/peer');
    const ids = [first.headers['x-request-id'], second.headers['x-request-id']];
    for (const id of ids) expect(id).to.match(UUID);
    expect(ids[0]).to.not.equal(ids[1]);
    expect(requestLines(log).map((l) => l['requestId'])).to.deep.equal(ids);
  });

  it('replaces an id that is not sane (spaces, quotes, too long, empty) with a UUID', async () => {
    const { http } = setup();
    for (const bad of ['two words', 'a"b', 'x'.repeat(129), '']) {
      const res = await http.post('/api/peer').set('X-Request-Id', bad);
      expect(res.headers['x-request-id'], JSON.stringify(bad)).to.match(UUID);
    }
    expect(requestIdFrom('x'.repeat(128))).to.equal('x'.repeat(128));
    expect(requestIdFrom('0f8fad5b-d9cb-469f-a165-70867728950e')).to.equal(
      '0f8fad5b-d9cb-469f-a165-70867728950e',
    );
    expect(requestIdFrom(['a', 'b'])).to.match(UUID);
  });

  it('carries the id on the error line of a server fault and on the error response', async () => {
    const { http, log, kernel } = setup();
    kernel.fail('getDevice', new Error('the fake kernel broke'));
    const res = await http.get('/api/peers').set('X-Request-Id', 'req-500');
    expect(res.status).to.equal(500);
    expect(res.headers['x-request-id']).to.equal('req-500');
    const failed = log.lines().find((l) => l['msg'] === 'request failed');
    expect(failed).to.include({ level: 50, requestId: 'req-500', path: '/api/peers' });
  });
});

describe('http log levels of polls', () => {
  it('logs successful polls of the list at debug and everything else at info', async () => {
    const { http, log } = setup();
    await http.get('/api/peers?status=ALIVE');
    await http.post('/api/peer');
    await http.get('/api/nope');
    const levels = requestLines(log).map((l) => [l['path'], l['level']]);
    // pino: debug 20, info 30.
    expect(levels).to.deep.equal([
      ['/api/peers', 20],
      ['/api/peer', 30],
      ['/api/nope', 30],
    ]);
  });

  it('logs a failing poll at info, so a poller with a bad token shows', async () => {
    const { http, log } = setup({ token: 'admin-token-0123456789abcdef' });
    await http.get('/api/peers');
    expect(requestLines(log).map((l) => [l['status'], l['level']])).to.deep.equal([[401, 30]]);
  });

  it('takes the polled routes from the route table: the list, /metrics, /healthz, /readyz', () => {
    expect(ROUTES.filter((d) => d.polled).map((d) => `${d.method} ${d.label}`)).to.have.members([
      'get /api/peers',
      'get /metrics',
      'get /healthz',
      'get /readyz',
    ]);
  });

  it('logs HEAD of the list, the list with a trailing slash and /healthz at debug too', async () => {
    const { http, log } = setup();
    await http.head('/api/peers');
    await http.get('/api/peers/');
    await http.get('/healthz');
    await http.get('/api/peer/x/config');
    expect(requestLines(log).map((l) => [l['method'], l['path'], l['level']])).to.deep.equal([
      ['HEAD', '/api/peers', 20],
      ['GET', '/api/peers/', 20],
      ['GET', '/healthz', 20],
      ['GET', '/api/peer/x/config', 30],
    ]);
  });
});

// The one function that shapes a request line, for the app's middleware and the server's own
// refusals alike (server.ts).
describe('http request line (logRequest)', () => {
  it('keeps the path without the query, rounds ms to microseconds, marks an abort', () => {
    const log = captureLog();
    const request = {
      method: 'POST',
      path: '/api/peer?token=x',
      status: 413,
      ms: 1.23456789,
      client: '127.0.0.1',
      requestId: 'r-1',
      aborted: false,
      polled: false,
    };
    logRequest(log.logger, request);
    logRequest(log.logger, { ...request, aborted: true });
    const [done, aborted] = log.lines();
    expect(done).to.include({ level: 30, msg: 'request', path: '/api/peer', ms: 1.235 });
    expect(done).to.include({ method: 'POST', status: 413, client: '127.0.0.1', requestId: 'r-1' });
    expect(done).to.not.have.property('aborted');
    expect(aborted).to.include({ aborted: true });
  });

  it('writes a successful poll at debug and a failed one at info', () => {
    const log = captureLog();
    const poll = {
      method: 'GET',
      path: '/metrics',
      ms: 0,
      client: null,
      requestId: 'r',
      polled: true,
    };
    logRequest(log.logger, { ...poll, status: 200, aborted: false });
    logRequest(log.logger, { ...poll, status: 401, aborted: false });
    expect(log.lines().map((l) => l['level'])).to.deep.equal([20, 30]);
  });
});
