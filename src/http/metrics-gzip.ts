/**
 * The gzip form of a GET /metrics answer (issue 32), compressed once per shared kernel read.
 *
 * A scrape is two halves (metrics.ts): the daemon's own metrics, a few kilobytes that change at
 * every scrape, then the per-peer text of the snapshot, up to 80 MB at 50,000 peers, shared by
 * every scrape of one snapshot. Compressing the whole body per scrape would redo the 80 MB each
 * time; two gzip members side by side (RFC 1952 §2.2 allows it) are read by Go's gzip reader
 * (Prometheus) but not by curl, which stops after the first member. So the answer is ONE gzip
 * member whose deflate data is two runs of blocks (RFC 1951 §3.2.3: a stream is any sequence of
 * blocks, the last one flagged final):
 *
 *   gzip header | own text, raw deflate ending in a sync flush (byte-aligned, not final)
 *               | peer text, raw deflate ending in the final block | CRC-32 | ISIZE
 *
 * The peer run and its CRC-32 are computed once per snapshot, off the event loop (zlib's gzip on
 * libuv's thread pool: its 10-byte header and 8-byte trailer are cut off, the trailer's CRC
 * kept); the own run per scrape. The CRC-32 of the whole is the two CRCs combined (zlib's
 * crc32_combine, below: no pass over the peer text again); ISIZE is the length modulo 2^32.
 * Each run's back-references stay inside its own text, so the concatenation decodes as one
 * stream. Level 1, as the list's gzip (list-body.ts GZIP_OPTIONS, which measures it).
 */
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { GZIP_OPTIONS } from './list-body';

const deflateRaw = promisify(zlib.deflateRaw);

/**
 * One half's raw deflate blocks, as the chunks zlib wrote them (never joined: the peer half's
 * run is 17.5 MB at 50,000 capped peers, and a join would hold it twice while it is made), with
 * the CRC-32 and byte length of the text they encode.
 */
export interface DeflateRun {
  blocks: readonly Buffer[];
  crc: number;
  length: number;
}

/** No text: an empty final block (fixed Huffman, end of block), as zlib writes it. */
export const EMPTY_FINAL_RUN: DeflateRun = {
  blocks: [Buffer.from([0x03, 0x00])],
  crc: 0,
  length: 0,
};

/** The bytes [start, end) of the chunks' concatenation, as views of the chunks (no copy). */
export function spanOf(chunks: readonly Buffer[], start: number, end: number): Buffer[] {
  const span: Buffer[] = [];
  let at = 0;
  for (const chunk of chunks) {
    const from = Math.max(start, at);
    const to = Math.min(end, at + chunk.length);
    if (from < to) span.push(chunk.subarray(from - at, to - at));
    at += chunk.length;
    if (at >= end) break;
  }
  return span;
}

/** The gzip header Node's zlib writes: magic, deflate, no flags, no time, no extra, OS unknown. */
const GZIP_HEADER = Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03]);
const GZIP_TRAILER_BYTES = 8;
/** zlib's output chunks for the peer half: 64 KiB, a few hundred writes for 17.5 MB. */
const OUTPUT_CHUNK_BYTES = 64 * 1024;

/**
 * The final run of `chunks`: a gzip stream compresses them (on the thread pool, computing the
 * CRC too; the chunks are written as they are, never joined into one 80 MB buffer) and the
 * header and trailer are cut off its output, which stays in zlib's chunks too. Node's zlib
 * writes no optional header fields, so its header is always the 10 bytes above; checked rather
 * than assumed.
 */
export function finalRun(chunks: readonly Buffer[]): Promise<DeflateRun> {
  const length = chunks.reduce((sum, chunk) => sum + chunk.length, 0);
  if (length === 0) return Promise.resolve(EMPTY_FINAL_RUN);
  return new Promise((resolve, reject) => {
    const stream = zlib.createGzip({ ...GZIP_OPTIONS, chunkSize: OUTPUT_CHUNK_BYTES });
    const out: Buffer[] = [];
    let size = 0;
    stream.on('data', (chunk: Buffer) => {
      out.push(chunk);
      size += chunk.length;
    });
    stream.on('error', reject);
    stream.on('end', () => {
      const header = Buffer.concat(spanOf(out, 0, GZIP_HEADER.length));
      if (header[3] !== 0) {
        reject(new Error('zlib wrote optional gzip header fields'));
        return;
      }
      const end = size - GZIP_TRAILER_BYTES;
      resolve({
        blocks: spanOf(out, GZIP_HEADER.length, end),
        crc: Buffer.concat(spanOf(out, end, size)).readUInt32LE(0),
        length,
      });
    });
    for (const chunk of chunks) stream.write(chunk);
    stream.end();
  });
}

/** The leading run of `text`: its blocks end in a sync flush, so more blocks may follow. */
export async function leadingRun(text: Buffer): Promise<DeflateRun> {
  const blocks = await deflateRaw(text, {
    ...GZIP_OPTIONS,
    finishFlush: zlib.constants.Z_SYNC_FLUSH,
  });
  return { blocks: [blocks], crc: crc32(text), length: text.length };
}

/** One gzip member holding `lead`'s text then `last`'s: the chunks to write, in order. */
export function gzipMember(lead: DeflateRun, last: DeflateRun): Buffer[] {
  const trailer = Buffer.alloc(GZIP_TRAILER_BYTES);
  trailer.writeUInt32LE(crc32Combine(lead.crc, last.crc, last.length), 0);
  trailer.writeUInt32LE((lead.length + last.length) % 2 ** 32, 4);
  return [GZIP_HEADER, ...lead.blocks, ...last.blocks, trailer];
}

// ---------------------------------------------------------------------------------------------
// CRC-32 (ISO-HDLC, the gzip trailer's), reflected polynomial 0xedb88320.

const POLY = 0xedb88320;

const TABLE = ((): Uint32Array => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n += 1) {
    let c = n;
    for (let k = 0; k < 8; k += 1) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** The CRC-32 of `bytes` (the own half only: a few kilobytes per scrape). */
export function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const byte of bytes) c = TABLE[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** a(x) * b(x) modulo the CRC polynomial, both reflected (zlib's multmodp). */
function multiplyModP(a: number, b: number): number {
  let m = 0x80000000;
  let p = 0;
  for (;;) {
    if ((a & m) !== 0) {
      p ^= b;
      if ((a & (m - 1)) === 0) break;
    }
    m >>>= 1;
    b = b & 1 ? (b >>> 1) ^ POLY : b >>> 1;
  }
  return p >>> 0;
}

/** x^(2^k) modulo the polynomial, k = 0..31 (zlib's x2n_table). */
const X2N = ((): number[] => {
  const table: number[] = [];
  let p = 0x40000000; // x^1
  table.push(p);
  for (let k = 1; k < 32; k += 1) {
    p = multiplyModP(p, p);
    table.push(p);
  }
  return table;
})();

/** x^(n * 2^k) modulo the polynomial (zlib's x2nmodp); n a byte count, any size. */
function powerModP(n: number, k: number): number {
  let p = 0x80000000; // x^0
  while (n > 0) {
    if (n % 2 === 1) p = multiplyModP(X2N[k & 31]!, p);
    n = Math.floor(n / 2);
    k += 1;
  }
  return p;
}

/** The CRC-32 of A then B from crc(A), crc(B) and B's length (zlib's crc32_combine). */
export function crc32Combine(crcA: number, crcB: number, lengthB: number): number {
  return (multiplyModP(powerModP(lengthB, 3), crcA) ^ crcB) >>> 0;
}
