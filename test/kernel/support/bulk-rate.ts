/**
 * The rate of a bulk TCP transfer through the tunnel (shaper-bulk.ts at each end: the server in
 * the VM's root namespace, the peer in `wgcli`), and the retrying expectations the rate tests
 * (speed limits, throttling after a cap) make of it.
 */
import { expect } from 'chai';
import { type ChildProcess, spawn } from 'node:child_process';
import * as path from 'node:path';
import { receive } from '../../support/receiver';
import { CLIENT_NS } from './topology';

const BULK = path.join(__dirname, 'shaper-bulk.js');

export type Direction = 'download' | 'upload';

export interface BulkEnds {
  serverIp: string;
  peerIp: string;
  port: number;
  /** Not measured: TCP slow start and queues filling (a TCG guest is slow to get going). */
  warmupMs: number;
  measureMs: number;
  /** Parallel TCP connections per transfer (see shaper-bulk.ts). */
  streams: number;
}

function bulk(netns: string | undefined, args: Array<string | number>): ChildProcess {
  const argv = [BULK, ...args.map(String)];
  return netns === undefined
    ? spawn(process.execPath, argv)
    : spawn('ip', ['netns', 'exec', netns, process.execPath, ...argv]);
}

/**
 * Bulk TCP over `streams` connections for warmupMs + measureMs; returns the payload bytes per
 * second the receiver got during measureMs. Download: server (root ns) → peer (wgcli); upload:
 * the other way.
 */
export async function measureBulk(direction: Direction, ends: BulkEnds): Promise<number> {
  const download = direction === 'download';
  const host = download ? ends.peerIp : ends.serverIp;
  const receiver = bulk(download ? CLIENT_NS : undefined, [
    'receive',
    host,
    ends.port,
    ends.warmupMs,
    ends.measureMs,
  ]);
  const { bytesPerSecond } = await receive<{ bytesPerSecond: number }>(
    receiver,
    () =>
      bulk(download ? undefined : CLIENT_NS, [
        'send',
        host,
        ends.port,
        (ends.warmupMs + ends.measureMs) / 1000 + 10,
        ends.streams,
      ]),
    'shaper-bulk',
  );
  return bytesPerSecond;
}

/**
 * Measures until a transfer lands within `tolerance` of `target`, at most ATTEMPTS times, and
 * fails with every measurement when none did. A TCG guest on a busy host is sometimes starved of
 * CPU for long enough that nothing, shaped or not, keeps its rate; a shaper that is wrong (a unit
 * off, the wrong class, no class) is wrong on every attempt. Returns the rate that passed.
 */
const ATTEMPTS = 3;

export async function expectRateNear(
  measure: () => Promise<number>,
  target: number,
  tolerance: number,
  what: string,
): Promise<number> {
  const rates: number[] = [];
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    const rate = await measure();
    rates.push(rate);
    const deviation = Math.abs(rate - target) / target;
    console.log(
      `      ${what}: ${Math.round(rate)} B/s, ${(deviation * 100).toFixed(1)}% from ${target}` +
        (attempt > 1 ? ` (attempt ${attempt})` : ''),
    );
    if (deviation <= tolerance) return rate;
  }
  return expect.fail(
    `${what}: ${rates.map(Math.round).join(', ')} B/s in ${ATTEMPTS} attempts, none within ` +
      `${tolerance * 100}% of ${target}`,
  );
}

/** Like expectRateNear, for "at least this fast": the best of up to ATTEMPTS transfers. */
export async function expectRateAtLeast(
  measure: () => Promise<number>,
  minimum: number,
  what: string,
): Promise<number> {
  const rates: number[] = [];
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    const rate = await measure();
    rates.push(rate);
    console.log(
      `      ${what}: ${Math.round(rate)} B/s (at least ${Math.round(minimum)} wanted)` +
        (attempt > 1 ? ` (attempt ${attempt})` : ''),
    );
    if (rate >= minimum) return rate;
  }
  return expect.fail(`${what}: ${rates.map(Math.round).join(', ')} B/s, all under ${minimum}`);
}
