/**
 * A transcript-player transport for the kernel-level parsers, whose only entry point is a
 * client method (WireGuard.getDevice, Shaper.listLimits, Quota.listCaps, Links...). Unlike
 * ReplayTransport it does not insist on byte-identical requests (a mutated reply changes what
 * the client asks next): each request is answered with the recorded answer to the same request
 * (same bytes but for seq and pid), else to a request of the same type, as last recorded, and the first
 * request of the target type gets the fuzz input instead. Sequence numbers of the answer are
 * rewritten to the request's, and every message that asked for an ACK gets one after the
 * answer, so an exchange always ends: a mutated reply the socket ignores cannot hang the case.
 */
import {
  NLMSG_ERROR,
  NLMSG_HDRLEN,
  NLM_F_ACK,
  align,
  type DatagramHandler,
  type Transport,
  type TransportFactory,
} from '../../src/netlink';
import type { Corpus, RecordedAnswer } from './corpus';

/** The headers (offset, type, flags, seq) of a datagram, walked leniently. */
function headers(
  datagram: Buffer,
): Array<{ at: number; type: number; flags: number; seq: number }> {
  const found: Array<{ at: number; type: number; flags: number; seq: number }> = [];
  let offset = 0;
  while (offset + NLMSG_HDRLEN <= datagram.length) {
    const length = datagram.readUInt32LE(offset);
    found.push({
      at: offset,
      type: datagram.readUInt16LE(offset + 4),
      flags: datagram.readUInt16LE(offset + 6),
      seq: datagram.readUInt32LE(offset + 8),
    });
    // A length past the end (0xffffffff would also wrap align()) ends the walk.
    if (length < NLMSG_HDRLEN || offset + length > datagram.length) break;
    offset += align(length);
  }
  return found;
}

/** Addresses, in place, every message header found to our request: its seq and our port. */
function readdress(datagram: Buffer, seq: number, portId: number): void {
  for (const header of headers(datagram)) {
    datagram.writeUInt32LE(seq, header.at + 8);
    datagram.writeUInt32LE(portId, header.at + 12);
  }
}

function ack(seq: number, portId: number): Buffer {
  const message = Buffer.alloc(NLMSG_HDRLEN + 4 + NLMSG_HDRLEN);
  message.writeUInt32LE(message.length, 0);
  message.writeUInt16LE(NLMSG_ERROR, 4);
  message.writeUInt32LE(seq, 8);
  message.writeUInt32LE(portId, 12);
  return message; // errno 0: a plain ACK
}

/** Request bytes with seq and pid blanked, to find the recorded answer to the same request. */
function requestKey(request: Buffer): string {
  const copy = Buffer.from(request);
  if (copy.length >= NLMSG_HDRLEN) copy.fill(0, 8, 16);
  return copy.toString('hex');
}

export interface FuzzTarget {
  protocol: number;
  /** nlmsg_type of the request whose answer is the fuzz input. */
  requestType: number;
}

class FuzzTransport implements Transport {
  readonly portId = 4242;
  private handler: DatagramHandler | undefined;

  constructor(
    readonly protocol: number,
    private readonly session: FuzzSession,
  ) {}

  send(datagram: Buffer): void {
    const requests = headers(datagram);
    const first = requests[0];
    if (!first) return;
    const answer = this.session.answer(this.protocol, datagram, first.type);
    const acks = requests
      .filter((request) => request.flags & NLM_F_ACK)
      .map((request) => ack(request.seq, this.portId));
    for (const reply of answer) readdress(reply, first.seq, this.portId);
    // Asynchronously, as the kernel's datagrams arrive through the event loop.
    setImmediate(() => {
      for (const reply of [...answer, ...acks]) this.handler?.(null, reply);
    });
  }

  receive(handler: DatagramHandler): void {
    this.handler = handler;
  }

  setBusy(): void {}

  close(): void {}
}

/** The answers of one fuzz case: recorded ones, and the input for the target request. */
export class FuzzSession {
  private targetServed = false;

  constructor(
    private readonly recorded: Map<string, RecordedAnswer>,
    private readonly byType: Map<string, RecordedAnswer>,
    private readonly target: FuzzTarget,
    private readonly input: Buffer,
  ) {}

  readonly open: TransportFactory = (protocol) => new FuzzTransport(protocol, this);

  /** Whether the client asked the request whose answer is the input. */
  get reachedTarget(): boolean {
    return this.targetServed;
  }

  answer(protocol: number, request: Buffer, type: number): Buffer[] {
    if (
      !this.targetServed &&
      protocol === this.target.protocol &&
      type === this.target.requestType
    ) {
      this.targetServed = true;
      return [this.input];
    }
    const recorded =
      this.recorded.get(`${protocol}:${requestKey(request)}`) ??
      this.byType.get(`${protocol}:${type}`);
    return recorded ? recorded.datagrams.map((d) => Buffer.from(d)) : [];
  }
}

/** Builds sessions for one kernel-level decoder from the answers of one transcript. */
export class FuzzStage {
  private readonly recorded = new Map<string, RecordedAnswer>();
  private readonly byType = new Map<string, RecordedAnswer>();

  constructor(
    corpus: Corpus,
    transcript: string,
    private readonly target: FuzzTarget,
  ) {
    for (const answer of corpus.answers) {
      if (answer.transcript !== transcript || answer.request.length < NLMSG_HDRLEN) continue;
      const key = `${answer.protocol}:${requestKey(answer.request)}`;
      // The last answer wins: the state at the end of a scenario is the one set up in full.
      this.recorded.set(key, answer);
      this.byType.set(`${answer.protocol}:${answer.request.readUInt16LE(4)}`, answer);
    }
  }

  session(input: Buffer): FuzzSession {
    return new FuzzSession(this.recorded, this.byType, this.target, input);
  }
}
