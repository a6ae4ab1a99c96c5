/**
 * Recorded netlink exchanges. A RecordingTransport wraps a real socket and notes every request
 * datagram with the datagrams the kernel sent back; a ReplayTransport serves such a transcript,
 * checking that each request is byte-for-byte the one the kernel accepted. The committed
 * fixtures under test/fixtures/transcripts come from `npm run record-transcripts` in the VM.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { NativeTransport } from './native';
import type { DatagramHandler, Transport } from './transport';

export interface RecordedExchange {
  /** Hex of the datagram we sent. */
  sent: string;
  /** Hex of each datagram received in answer, or the errno of a socket error. */
  received: Array<string | { errno: number; code: string }>;
}

export interface SocketTranscript {
  protocol: number;
  portId: number;
  exchanges: RecordedExchange[];
}

export interface Transcript {
  description: string;
  /** `uname -r` of the kernel that answered. */
  kernel: string;
  sockets: SocketTranscript[];
  /**
   * What independent tools (wg, tc, nft) reported about the kernel's state while recording, so
   * replay tests check the decoded results against the kernel, not against the code's own output.
   */
  oracle: Record<string, unknown>;
}

export class RecordingTransport implements Transport {
  readonly protocol: number;
  readonly portId: number;

  constructor(
    private readonly inner: Transport,
    private readonly log: SocketTranscript,
  ) {
    this.protocol = inner.protocol;
    this.portId = inner.portId;
  }

  send(datagram: Buffer): void {
    this.log.exchanges.push({ sent: datagram.toString('hex'), received: [] });
    this.inner.send(datagram);
  }

  receive(handler: DatagramHandler): void {
    this.inner.receive((error, datagram) => {
      const current = this.log.exchanges[this.log.exchanges.length - 1];
      if (current) {
        if (error) {
          const errno = (error as { errno?: unknown }).errno;
          const code = (error as { code?: unknown }).code;
          current.received.push({
            errno: typeof errno === 'number' ? errno : 0,
            code: typeof code === 'string' ? code : 'EIO',
          });
        } else if (datagram) {
          current.received.push(datagram.toString('hex'));
        }
      }
      handler(error, datagram);
    });
  }

  setBusy(busy: boolean): void {
    this.inner.setBusy(busy);
  }

  /** Multicast datagrams land in the socket's last exchange, in the order they came. */
  joinGroup(group: number): void {
    if (!this.inner.joinGroup) throw new Error('the recorded transport cannot join groups');
    this.inner.joinGroup(group);
  }

  close(): void {
    this.inner.close();
  }
}

/** Opens real sockets that record into one transcript. */
export class TranscriptRecorder {
  private readonly transcript: Transcript;

  constructor(description: string, kernel: string) {
    this.transcript = { description, kernel, sockets: [], oracle: {} };
  }

  /** A transport factory to hand to the kernel clients. */
  readonly open = (protocol: number): Transport => {
    const log: SocketTranscript = { protocol, portId: 0, exchanges: [] };
    const inner = new NativeTransport(protocol);
    log.portId = inner.portId;
    this.transcript.sockets.push(log);
    return new RecordingTransport(inner, log);
  };

  /** The oracle record of this transcript, filled by the recording scenario. */
  get oracle(): Record<string, unknown> {
    return this.transcript.oracle;
  }

  toJSON(): Transcript {
    return this.transcript;
  }

  save(file: string): void {
    writeFileSync(file, `${JSON.stringify(this.transcript, null, 1)}\n`);
  }
}

export class TranscriptMismatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TranscriptMismatchError';
  }
}

function hexdump(data: Buffer, from: number): string {
  const start = Math.max(0, from - (from % 16) - 16);
  const lines: string[] = [];
  for (let offset = start; offset < Math.min(data.length, start + 64); offset += 16) {
    lines.push(
      `  ${offset.toString(16).padStart(4, '0')}: ${data
        .subarray(offset, offset + 16)
        .toString('hex')
        .replace(/(..)/g, '$1 ')}`,
    );
  }
  return lines.join('\n');
}

function describeMismatch(expected: Buffer, actual: Buffer): string {
  let offset = 0;
  while (offset < expected.length && offset < actual.length && expected[offset] === actual[offset])
    offset++;
  return (
    `request differs from the recorded one at byte ${offset} ` +
    `(recorded ${expected.length} bytes, sent ${actual.length})\n` +
    `recorded:\n${hexdump(expected, offset)}\nsent:\n${hexdump(actual, offset)}`
  );
}

export class ReplayTransport implements Transport {
  readonly protocol: number;
  readonly portId: number;
  private next = 0;
  private handler: DatagramHandler | undefined;

  constructor(private readonly transcript: SocketTranscript) {
    this.protocol = transcript.protocol;
    this.portId = transcript.portId;
  }

  get remaining(): number {
    return this.transcript.exchanges.length - this.next;
  }

  send(datagram: Buffer): void {
    const exchange = this.transcript.exchanges[this.next];
    if (!exchange) {
      throw new TranscriptMismatchError(
        `request ${this.next + 1} was never recorded (the transcript has ${this.transcript.exchanges.length})`,
      );
    }
    const expected = Buffer.from(exchange.sent, 'hex');
    if (!expected.equals(datagram)) {
      throw new TranscriptMismatchError(
        `request ${this.next + 1}: ${describeMismatch(expected, datagram)}`,
      );
    }
    this.next++;
    // Answer asynchronously, as the kernel's datagrams arrive through the event loop.
    setImmediate(() => {
      for (const answer of exchange.received) {
        if (typeof answer === 'string') {
          this.handler?.(null, Buffer.from(answer, 'hex'));
        } else {
          const error = Object.assign(new Error(`recv ${answer.code}`), answer);
          this.handler?.(error);
        }
      }
    });
  }

  receive(handler: DatagramHandler): void {
    this.handler = handler;
  }

  setBusy(): void {}

  /** The recorded multicast datagrams come with the exchange they were recorded in. */
  joinGroup(): void {}

  close(): void {}
}

/** Serves a recorded transcript: each opened transport takes the next socket of its protocol. */
export class TranscriptPlayer {
  private readonly transports: ReplayTransport[] = [];
  private readonly used = new Set<SocketTranscript>();

  constructor(readonly transcript: Transcript) {}

  static load(file: string): TranscriptPlayer {
    return new TranscriptPlayer(JSON.parse(readFileSync(file, 'utf8')) as Transcript);
  }

  readonly open = (protocol: number): Transport => {
    const socket = this.transcript.sockets.find(
      (s) => s.protocol === protocol && !this.used.has(s),
    );
    if (!socket) {
      throw new TranscriptMismatchError(`no recorded socket of protocol ${protocol} is left`);
    }
    this.used.add(socket);
    const transport = new ReplayTransport(socket);
    this.transports.push(transport);
    return transport;
  };

  /** Throws unless every recorded request was made. */
  assertConsumed(): void {
    const left = this.transports.reduce((sum, t) => sum + t.remaining, 0);
    const unopened = this.transcript.sockets.filter(
      (s) => !this.used.has(s) && s.exchanges.length > 0,
    ).length;
    if (left > 0 || unopened > 0) {
      throw new TranscriptMismatchError(
        `${left} recorded request(s) were never made and ${unopened} recorded socket(s) never opened`,
      );
    }
  }
}
