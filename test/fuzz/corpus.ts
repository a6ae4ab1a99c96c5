/**
 * The seeds of the fuzzer: every datagram the kernel sent in the recorded transcripts
 * (test/fixtures/transcripts/*.json), indexed so that a decoder's table entry can pick the real
 * messages it decodes (the WireGuard dump, the tc class dump, the nf_tables object dump...).
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { NLMSG_HDRLEN, align, forEachAttribute } from '../../src/netlink';
import type { Transcript } from '../../src/netlink/transcript';

/** One request of a transcript and everything the kernel answered to it. */
export interface RecordedAnswer {
  transcript: string;
  protocol: number;
  request: Buffer;
  /** The received datagrams, in order (socket errors left out). */
  datagrams: Buffer[];
}

/** One message as received: its header fields and the bytes after nlmsghdr. */
export interface SeedMessage {
  protocol: number;
  type: number;
  flags: number;
  /** The whole message (header included), a copy. */
  bytes: Buffer;
  payload: Buffer;
}

export const TRANSCRIPTS = path.resolve(
  __dirname,
  '..',
  '..',
  '..',
  'test',
  'fixtures',
  'transcripts',
);

/** Splits a datagram leniently (the recorded ones are well formed): a seed is never rejected. */
function splitMessages(datagram: Buffer): Buffer[] {
  const messages: Buffer[] = [];
  let offset = 0;
  while (offset + NLMSG_HDRLEN <= datagram.length) {
    const length = datagram.readUInt32LE(offset);
    if (length < NLMSG_HDRLEN || offset + length > datagram.length) break;
    messages.push(Buffer.from(datagram.subarray(offset, offset + length)));
    offset += align(length);
  }
  return messages;
}

export class Corpus {
  readonly answers: RecordedAnswer[] = [];
  readonly messages: SeedMessage[] = [];

  constructor(readonly transcripts: Map<string, Transcript>) {
    for (const [name, transcript] of transcripts) {
      for (const socket of transcript.sockets) {
        for (const exchange of socket.exchanges) {
          const datagrams = exchange.received
            .filter((entry): entry is string => typeof entry === 'string')
            .map((hex) => Buffer.from(hex, 'hex'));
          this.answers.push({
            transcript: name,
            protocol: socket.protocol,
            request: Buffer.from(exchange.sent, 'hex'),
            datagrams,
          });
          for (const bytes of datagrams.flatMap(splitMessages)) {
            this.messages.push({
              protocol: socket.protocol,
              type: bytes.readUInt16LE(4),
              flags: bytes.readUInt16LE(6),
              bytes,
              payload: bytes.subarray(NLMSG_HDRLEN),
            });
          }
        }
      }
    }
  }

  static load(directory = TRANSCRIPTS): Corpus {
    const transcripts = new Map<string, Transcript>();
    for (const file of readdirSync(directory).sort()) {
      if (!file.endsWith('.json')) continue;
      const text = readFileSync(path.join(directory, file), 'utf8');
      transcripts.set(file.replace(/\.json$/, ''), JSON.parse(text) as Transcript);
    }
    return new Corpus(transcripts);
  }

  /** Every message of a protocol (and type), whole. */
  messagesOf(protocol: number, type?: (type: number) => boolean): SeedMessage[] {
    return this.messages.filter((m) => m.protocol === protocol && (!type || type(m.type)));
  }

  /** The payloads of those messages after a family header of `headerSize` bytes. */
  bodies(protocol: number, type: (type: number) => boolean, headerSize: number): Buffer[] {
    return this.messagesOf(protocol, type)
      .filter((m) => m.payload.length >= headerSize)
      .map((m) => m.payload.subarray(headerSize));
  }

  /**
   * The answers to the requests of one type, each as one datagram (a dump's datagrams
   * concatenated): the input of a kernel-level parser driven through the fuzz transport.
   */
  answersTo(protocol: number, requestType: number, transcript?: string): Buffer[] {
    return this.answers
      .filter(
        (a) =>
          a.protocol === protocol &&
          a.request.length >= NLMSG_HDRLEN &&
          a.request.readUInt16LE(4) === requestType &&
          (transcript === undefined || a.transcript === transcript) &&
          a.datagrams.length > 0,
      )
      .map((a) => Buffer.concat(a.datagrams));
  }
}

/**
 * The payloads of the attributes of `type` found in `containers` (one level down), e.g. every
 * WGDEVICE_A_PEERS nest of the recorded dumps. Containers that are not attribute streams are
 * skipped.
 */
export function attributePayloads(containers: Buffer[], type: number): Buffer[] {
  const found: Buffer[] = [];
  for (const container of containers) {
    try {
      forEachAttribute(container, (t, _nested, start, end) => {
        if (t === type) found.push(container.subarray(start, end));
      });
    } catch {
      // not an attribute stream: not a seed for this table
    }
  }
  return found;
}

/** The entries of list nests (each entry's payload), e.g. the peers inside WGDEVICE_A_PEERS. */
export function listEntries(lists: Buffer[]): Buffer[] {
  return lists.flatMap(allPayloads);
}

function allPayloads(container: Buffer): Buffer[] {
  const found: Buffer[] = [];
  try {
    forEachAttribute(container, (_t, _nested, start, end) =>
      found.push(container.subarray(start, end)),
    );
  } catch {
    // not an attribute stream
  }
  return found;
}

/** Deduplicates seeds by content and caps their number (spread over the list). */
export function distinct(seeds: Buffer[], max = 64): Buffer[] {
  const seen = new Set<string>();
  const unique: Buffer[] = [];
  for (const seed of seeds) {
    const key = seed.toString('hex');
    if (seen.has(key)) continue;
    seen.add(key);
    unique.push(Buffer.from(seed));
  }
  if (unique.length <= max) return unique;
  const step = unique.length / max;
  return Array.from({ length: max }, (_, i) => unique[Math.floor(i * step)]);
}
