/**
 * The Express app loaded on first need (issue 29: the first list after a start): the daemon's
 * main module and the HTTP layer load no Express, the list's fast path answers the first list
 * without it, the first request the fast paths leave to the app waits for it and gets the app's
 * answer, and `appAfter` loads it before any request. Whether a module is loaded is read from a
 * fresh process's require cache (this one has Express loaded by other tests).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { createHttpServer } from '../../../src/http';
import { captureLog } from '../support/log-capture';

const DIST_SRC = path.resolve(__dirname, '../../../src');

/** Runs `script` in a fresh node and returns what it printed, parsed as JSON. */
function inFreshNode(script: string): unknown {
  const result = spawnSync(process.execPath, ['-e', script], {
    encoding: 'utf8',
    timeout: 20_000,
    env: { PATH: process.env.PATH ?? '', DIST_SRC },
  });
  expect(result.status, result.stderr).to.equal(0);
  return JSON.parse(result.stdout) as unknown;
}

/** A script fragment: whether Express (the package) and app.ts are in the require cache. */
const LOADED = `(() => {
  const keys = Object.keys(require.cache);
  return {
    express: keys.some((k) => k.includes('/node_modules/express/')),
    app: keys.some((k) => k.endsWith('/http/app.js')),
  };
})()`;

describe('http: the Express app, loaded on first need (issue 29, the first list after a start)', () => {
  it('is not loaded with the daemon main module nor with the HTTP layer', () => {
    const loaded = inFreshNode(`
      require(process.env.DIST_SRC + '/main.js');
      require(process.env.DIST_SRC + '/http/index.js');
      console.log(JSON.stringify(${LOADED}));
    `);
    expect(loaded).to.deep.equal({ express: false, app: false });
  });

  it('is not loaded by a first list, which the fast path answers; the next other request loads it', () => {
    const outcome = inFreshNode(`
      const http = require('node:http');
      const { createHttpServer } = require(process.env.DIST_SRC + '/http/index.js');
      const logger = { info() {}, warn() {}, error() {}, debug() {}, isLevelEnabled: () => false, child() { return logger; } };
      const snapshot = { device: { peers: [] }, limits: new Map(), caps: new Map(), suspended: new Map(), readAt: 0 };
      const service = {
        snapshot: async () => snapshot,
        freshSnapshot: () => snapshot,
      };
      const server = createHttpServer({ service, tokens: null, logger, version: 'test' });
      const get = (port, path) => new Promise((resolve, reject) =>
        http.get({ host: '127.0.0.1', port, path }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); }).on('error', reject));
      server.listen(0, '127.0.0.1', async () => {
        const port = server.address().port;
        const list = await get(port, '/api/peers');
        const afterList = ${LOADED};
        const health = await get(port, '/healthz');
        const afterHealth = ${LOADED};
        server.close();
        console.log(JSON.stringify({ list, afterList, health, afterHealth }));
      });
    `);
    expect(outcome).to.deep.equal({
      list: 200,
      afterList: { express: false, app: false },
      health: 200,
      afterHealth: { express: true, app: true },
    });
  });

  it('is loaded once appAfter settles, before any request', () => {
    const loaded = inFreshNode(`
      const { createHttpServer } = require(process.env.DIST_SRC + '/http/index.js');
      const logger = { info() {}, warn() {}, error() {}, debug() {}, isLevelEnabled: () => false, child() { return logger; } };
      let started;
      const appAfter = new Promise((resolve) => (started = resolve));
      createHttpServer({ service: {}, tokens: null, logger, version: 'test', appAfter });
      const before = ${LOADED};
      started();
      setTimeout(() => console.log(JSON.stringify({ before, after: ${LOADED} })), 50);
    `);
    expect(loaded).to.deep.equal({
      before: { express: false, app: false },
      after: { express: true, app: true },
    });
  });

  it('waits, once appAfter settles, for the responses still open (a first list writing its body)', () => {
    const outcome = inFreshNode(`
      const http = require('node:http');
      const { createHttpServer } = require(process.env.DIST_SRC + '/http/index.js');
      const logger = { info() {}, warn() {}, error() {}, debug() {}, isLevelEnabled: () => false, child() { return logger; } };
      const snapshot = { device: { peers: [] }, limits: new Map(), caps: new Map(), suspended: new Map(), readAt: 0 };
      let read;
      const reading = new Promise((resolve) => (read = resolve));
      const service = { snapshot: () => reading.then(() => snapshot), freshSnapshot: () => null };
      let started;
      const appAfter = new Promise((resolve) => (started = resolve));
      const server = createHttpServer({ service, tokens: null, logger, version: 'test', appAfter });
      const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
      server.listen(0, '127.0.0.1', async () => {
        const port = server.address().port;
        const list = new Promise((resolve, reject) =>
          http.get({ host: '127.0.0.1', port, path: '/api/peers' }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); }).on('error', reject));
        await pause(50);
        started();
        await pause(50);
        const whileListing = ${LOADED};
        read();
        const status = await list;
        await pause(50);
        server.close();
        console.log(JSON.stringify({ whileListing, status, after: ${LOADED} }));
      });
    `);
    expect(outcome).to.deep.equal({
      whileListing: { express: false, app: false },
      status: 200,
      after: { express: true, app: true },
    });
  });

  it('answers the first request it gets as the app does (a 404 in the API error shape)', async () => {
    const server = createHttpServer({
      service: {} as never,
      tokens: null,
      logger: captureLog().logger,
      version: 'test',
    });
    const res = await request(server).get('/api/nowhere');
    expect(res.status).to.equal(404);
    expect(res.body).to.include({ success: false, code: 'ROUTE_NOT_FOUND' });
  });
});
