/**
 * GET /metrics with `Accept-Encoding: gzip` (issue 32): one gzip member whose text is the plain
 * scrape's, byte for byte, which `promtool check metrics` accepts once gunzipped; the peer half
 * compressed once per snapshot however many scrapes share it; and the CRC-32 arithmetic
 * (src/http/metrics-gzip.ts) checked against the standard's check value and zlib's own gunzip.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import express from 'express';
import { createMetrics } from '../../../src/http/metrics';
import {
  crc32,
  crc32Combine,
  finalRun,
  gzipMember,
  leadingRun,
  spanOf,
} from '../../../src/http/metrics-gzip';
import type { WireGuardPeer } from '../../../src/kernel/types';
import type { PeerSnapshot } from '../../../src/peers';
import { NOW, key } from './helpers';

function snapshotOf(count: number): PeerSnapshot {
  const peers: WireGuardPeer[] = [];
  const caps = new Map<string, { quotaBytes: number; usedBytes: number; enforced: boolean }>();
  for (let i = 0; i < count; i += 1) {
    const address = `10.8.${i >> 8}.${i & 255}`;
    peers.push({
      publicKey: key(i + 1),
      endpoint: null,
      lastHandshake: i % 2 === 0 ? new Date(NOW - i * 1000) : null,
      rxBytes: i * 1000,
      txBytes: i * 7,
      persistentKeepalive: 0,
      allowedIps: [{ family: 4, address, cidr: 32 }],
    });
    if (i % 3 === 0) caps.set(address, { quotaBytes: 5000, usedBytes: i, enforced: true });
  }
  return {
    takenAt: NOW,
    readMs: 1,
    device: { name: 'wg0', ifindex: 3, publicKey: null, listenPort: 51820, fwmark: 0, peers },
    limits: new Map(),
    caps,
  };
}

interface Raw {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** The app's /metrics on a real socket, read raw (supertest would gunzip on its own). */
async function serve(snapshot: () => Promise<PeerSnapshot>): Promise<{
  get: (acceptEncoding?: string) => Promise<Raw>;
  close: () => void;
  count: () => number;
  held: (snapshot: PeerSnapshot) => { text: boolean; run: boolean };
}> {
  const metrics = createMetrics({
    service: { snapshot },
    perPeer: true,
    now: () => NOW,
    processMetrics: false,
  });
  const app = express();
  app.get('/metrics', metrics.handler);
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const get = (acceptEncoding?: string): Promise<Raw> =>
    new Promise((resolve, reject) => {
      const headers = acceptEncoding === undefined ? {} : { 'Accept-Encoding': acceptEncoding };
      http
        .get({ host: '127.0.0.1', port, path: '/metrics', headers }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () =>
            resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }),
          );
        })
        .on('error', reject);
    });
  return {
    get,
    close: () => server.close(),
    count: metrics.peerCompressions,
    held: metrics.peerHalfHeld,
  };
}

/** The text of a body that must be exactly ONE gzip member (curl reads no second one). */
function oneMember(body: Buffer): string {
  expect([...body.subarray(0, 3)], 'gzip magic and deflate').to.deep.equal([0x1f, 0x8b, 0x08]);
  // The deflate data between the 10-byte header and the 8-byte trailer decodes as one stream
  // to the whole text; a final block before the end would stop it early.
  const text = zlib.inflateRawSync(body.subarray(10, body.length - 8));
  expect(body.readUInt32LE(body.length - 8), 'CRC-32 of the whole text').to.equal(crc32(text));
  expect(body.readUInt32LE(body.length - 4), 'ISIZE').to.equal(text.length);
  // And zlib's own gunzip, which checks the trailer, agrees.
  expect(zlib.gunzipSync(body).equals(text)).to.equal(true);
  return text.toString('utf8');
}

describe('metrics: gzip when asked (issue 32)', () => {
  it('answers Accept-Encoding: gzip with one gzip member holding the plain text, which promtool accepts', async () => {
    const snapshot = snapshotOf(2500);
    const app = await serve(async () => snapshot);
    try {
      const plain = await app.get();
      expect(plain.headers['content-encoding']).to.equal(undefined);
      const zipped = await app.get('gzip');
      expect(zipped.status).to.equal(200);
      expect(zipped.headers['content-encoding']).to.equal('gzip');
      expect(zipped.headers.vary).to.equal('Accept-Encoding');
      expect(Number(zipped.headers['content-length'])).to.equal(zipped.body.length);
      const text = oneMember(zipped.body);
      expect(text).to.equal(plain.body.toString('utf8'));
      expect(zipped.body.length).to.be.below(plain.body.length / 4);
      const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
      expect(check.error, 'promtool (Debian package prometheus) must be installed').to.equal(
        undefined,
      );
      expect(check.status, `${check.stdout}${check.stderr}`).to.equal(0);
    } finally {
      app.close();
    }
  });

  it('lets the peer text go once it is compressed, and answers later plain scrapes by inflating it, byte for byte (issue 29: memory)', async () => {
    const snapshot = snapshotOf(2500);
    const app = await serve(async () => snapshot);
    try {
      const plain = await app.get();
      expect(app.held(snapshot)).to.deep.equal({ text: true, run: false });
      const zipped = await app.get('gzip');
      // Compressed: only the run is held now (a third of the text's size, or less).
      expect(app.held(snapshot)).to.deep.equal({ text: false, run: true });
      const again = await Promise.all([app.get(), app.get()]);
      for (const answer of again) {
        expect(answer.status).to.equal(200);
        expect(Number(answer.headers['content-length'])).to.equal(answer.body.length);
        expect(answer.body.toString('utf8')).to.equal(plain.body.toString('utf8'));
      }
      expect(oneMember(zipped.body)).to.equal(plain.body.toString('utf8'));
      // Neither rendered the text again nor compressed it again.
      expect(app.held(snapshot)).to.deep.equal({ text: false, run: true });
      expect(app.count()).to.equal(1);
    } finally {
      app.close();
    }
  });

  it("compresses a snapshot's peer half once however many scrapes share it, again for the next read", async () => {
    let current = snapshotOf(300);
    const app = await serve(async () => current);
    try {
      const first = await Promise.all([app.get('gzip'), app.get('gzip'), app.get('gzip')]);
      await app.get('gzip');
      expect(app.count()).to.equal(1);
      for (const res of first) expect(oneMember(res.body)).to.contain('10.8.1.43');
      current = snapshotOf(301);
      expect(oneMember((await app.get('gzip')).body)).to.contain('10.8.1.44');
      expect(app.count()).to.equal(2);
      // A plain scrape compresses nothing.
      await app.get();
      expect(app.count()).to.equal(2);
    } finally {
      app.close();
    }
  });

  it('follows the Accept-Encoding weights: gzip;q=0 or br alone get the plain text; * and x-gzip get gzip', async () => {
    const snapshot = snapshotOf(10);
    const app = await serve(async () => snapshot);
    try {
      for (const refused of ['gzip;q=0', 'br', 'identity', 'deflate']) {
        const res = await app.get(refused);
        expect(res.headers['content-encoding'], refused).to.equal(undefined);
        expect(res.body.toString('utf8'), refused).to.match(/^# HELP /);
      }
      for (const accepted of ['*', 'x-gzip', 'br;q=1, gzip;q=0.5', 'gzip, deflate, br']) {
        const res = await app.get(accepted);
        expect(res.headers['content-encoding'], accepted).to.equal('gzip');
        expect(oneMember(res.body), accepted).to.match(/^# HELP /);
      }
    } finally {
      app.close();
    }
  });

  it("still gzips the daemon's own metrics when the kernel read fails", async () => {
    const app = await serve(async () => {
      throw new Error('EPERM');
    });
    try {
      const res = await app.get('gzip');
      expect(res.status).to.equal(200);
      const text = oneMember(res.body);
      expect(text).to.contain('wg_peerd_snapshot_up 0');
      expect(text).to.not.contain('wg_peerd_peer_');
    } finally {
      app.close();
    }
  });
});

describe('metrics-gzip: the CRC-32 and the two deflate runs', () => {
  it('gives the CRC-32 check value of "123456789" (0xCBF43926)', () => {
    expect(crc32(Buffer.from('123456789'))).to.equal(0xcbf43926);
  });

  it('combines two CRCs into the CRC of the concatenation, for lengths from 0 to past 2^32', () => {
    const a = Buffer.from('wg_peerd_build_info{version="0.2.0"} 1\n');
    for (const length of [0, 1, 7, 8, 255, 4096, 100_003]) {
      const b = Buffer.alloc(length, 'x');
      expect(crc32Combine(crc32(a), crc32(b), b.length), String(length)).to.equal(
        crc32(Buffer.concat([a, b])),
      );
    }
    // Past 2^32 bytes nothing can be concatenated in a test: combining in two steps must equal
    // combining the sum at once (the powers of x add up).
    const crcA = crc32(a);
    const zeros = 0; // the CRC-32 of no bytes
    const big = 2 ** 32 + 5;
    const inTwo = crc32Combine(crc32Combine(crcA, zeros, 2 ** 32), zeros, 5);
    expect(crc32Combine(crcA, zeros, big)).to.equal(inTwo);
  });

  it('joins a leading run and a final run into one member of both texts, either of them empty', async () => {
    const own = Buffer.from('# HELP a x\n# TYPE a gauge\na 1\n');
    const peers = [Buffer.from('# HELP b y\n'), Buffer.from('# TYPE b gauge\nb 2\n')];
    const cases: Array<[Buffer, Buffer[]]> = [
      [own, peers],
      [own, []],
      [Buffer.alloc(0), peers],
    ];
    for (const [lead, last] of cases) {
      const body = Buffer.concat(gzipMember(await leadingRun(lead), await finalRun(last)));
      expect(oneMember(body)).to.equal(Buffer.concat([lead, ...last]).toString('utf8'));
    }
  });

  it("keeps a large peer run in zlib's chunks, never joined into one buffer, and the member still decodes to the text (issue 29: memory)", async () => {
    // About 2.5 MB of text that compresses poorly (random hex): a run of several 64 KiB chunks.
    const lines: Buffer[] = [];
    for (let i = 0; i < 40; i += 1) lines.push(Buffer.from(randomBytes(32_768).toString('hex')));
    const run = await finalRun(lines);
    expect(run.blocks.length).to.be.greaterThan(1);
    for (const block of run.blocks) expect(block.length).to.be.at.most(64 * 1024);
    const lead = Buffer.from('# own half\n');
    const body = Buffer.concat(gzipMember(await leadingRun(lead), run));
    expect(oneMember(body)).to.equal(Buffer.concat([lead, ...lines]).toString('utf8'));
  });

  it('takes any span of chunks as views of them, across chunk boundaries', () => {
    const chunks = [Buffer.from('abc'), Buffer.from(''), Buffer.from('defg'), Buffer.from('hi')];
    const text = (span: Buffer[]): string => Buffer.concat(span).toString();
    expect(text(spanOf(chunks, 0, 9))).to.equal('abcdefghi');
    expect(text(spanOf(chunks, 2, 8))).to.equal('cdefgh');
    expect(text(spanOf(chunks, 3, 7))).to.equal('defg');
    expect(text(spanOf(chunks, 7, 9))).to.equal('hi');
    expect(spanOf(chunks, 4, 4)).to.deep.equal([]);
    // Views, not copies: a span shares its chunk's memory.
    expect(spanOf(chunks, 3, 5)[0]!.buffer).to.equal(chunks[2]!.buffer);
  });
});
