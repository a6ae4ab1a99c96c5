/**
 * Request/response over one netlink socket: sequence numbers, multipart replies, NLMSG_DONE,
 * NLMSG_ERROR with extended ACK, NLM_F_DUMP_INTR retries and nf_tables-style batches.
 *
 * Exchanges on one socket run one at a time. The kernel allows a single dump per socket
 * (__netlink_dump_start answers EBUSY otherwise) and a dump only advances as we read, so a
 * queue is both the simplest correct design and no loss: callers that need parallelism use a
 * socket per facility, and callers that poll share one dump in flight above this layer.
 */
import {
  NLMSG_DONE,
  NLMSG_ERROR,
  NLMSG_NOOP,
  NLMSG_OVERRUN,
  NLM_F_ACK,
  NLM_F_DUMP,
  NLM_F_DUMP_INTR,
  NLM_F_REQUEST,
} from './constants';
import { NetlinkError, NetlinkProtocolError } from './errors';
import { SerialQueue } from './serial-queue';
import {
  type ErrorReport,
  type NetlinkMessage,
  encodeMessages,
  parseDonePayload,
  parseErrorPayload,
  parseMessages,
} from './message';
import type { Transport } from './transport';

const EINTR = 4;
const ETIMEDOUT = 110;
const EBADF = 9;
const EIO = 5;

export interface RequestOptions {
  /** Names the exchange in errors and logs, e.g. "WG_CMD_SET_DEVICE wg0". */
  operation: string;
  /** Flags added to NLM_F_REQUEST|NLM_F_ACK (and NLM_F_DUMP for dumps). */
  flags?: number;
  /** How long to wait for the kernel; default 30 s. A reply never comes only on a bug. */
  timeoutMs?: number;
}

export interface DumpOptions extends RequestOptions {
  /** How often a dump interrupted by a concurrent change (NLM_F_DUMP_INTR) is restarted. */
  maxAttempts?: number;
}

export interface BatchMessage {
  type: number;
  flags: number;
  payload: Buffer;
  /** Whether the kernel acknowledges this message (it must answer every message with ACK). */
  ack: boolean;
  /** Names the message in errors, e.g. "NFT_MSG_NEWOBJ q_10_8_0_2". */
  operation: string;
}

type Kind = 'request' | 'dump' | 'batch';

/** What went out under one sequence number: an error names it by these. */
interface Sent {
  operation: string;
  type: number;
}

interface Exchange {
  kind: Kind;
  operation: string;
  /** The message type of a one-message exchange (a request or dump), for its errors. */
  messageType: number | undefined;
  /** Sequence numbers still owed an answer. */
  outstanding: Set<number>;
  /** Every message of the exchange by sequence number (google/nftables keys errors alike). */
  sent: Map<number, Sent>;
  replies: NetlinkMessage[];
  interrupted: boolean;
  firstError: NetlinkError | undefined;
  finish(error: Error | null): void;
}

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_DUMP_ATTEMPTS = 5;
const BATCH_ERROR_GRACE_MS = 250;

export class NetlinkSocket {
  private seq = 0;
  /** This socket's lock: one exchange at a time (src/netlink/serial-queue.ts). */
  private readonly lock = new SerialQueue();
  private current: Exchange | undefined;
  private closed = false;

  constructor(private readonly transport: Transport) {
    transport.receive((error, datagram) => this.onDatagram(error, datagram));
  }

  get protocol(): number {
    return this.transport.protocol;
  }

  /**
   * A "do" request: REQUEST|ACK. Resolves with the messages the kernel sent before its ACK
   * (RTM_GETLINK answers one RTM_NEWLINK, a SET answers none).
   */
  request(type: number, payload: Buffer, options: RequestOptions): Promise<NetlinkMessage[]> {
    return this.enqueue(() =>
      this.exchange('request', options, [
        {
          type,
          flags: NLM_F_REQUEST | NLM_F_ACK | (options.flags ?? 0),
          payload,
          ack: true,
          operation: options.operation,
        },
      ]),
    );
  }

  /**
   * A dump: REQUEST|ACK|DUMP. Resolves with every message before NLMSG_DONE. A dump that the
   * kernel marks inconsistent (NLM_F_DUMP_INTR, e.g. WireGuard peers changed mid-dump) is read
   * to its end, discarded and restarted, up to `maxAttempts` times.
   */
  dump(type: number, payload: Buffer, options: DumpOptions): Promise<NetlinkMessage[]> {
    return this.enqueue(async () => {
      const attempts = options.maxAttempts ?? DEFAULT_DUMP_ATTEMPTS;
      for (let attempt = 1; ; attempt++) {
        const flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP | (options.flags ?? 0);
        const replies = await this.exchange('dump', options, [
          { type, flags, payload, ack: true, operation: options.operation },
        ]);
        if (!replies.some((message) => message.flags & NLM_F_DUMP_INTR)) return replies;
        if (attempt >= attempts) {
          throw new NetlinkError({
            errno: EINTR,
            operation: options.operation,
            messageType: type,
            kernelMessage: `dump was interrupted by concurrent changes ${attempts} times in a row`,
          });
        }
      }
    });
  }

  /**
   * Sends several messages in one datagram (an nf_tables transaction between BATCH_BEGIN and
   * BATCH_END) and waits until the kernel has answered every message that asked for an ACK.
   * Rejects with the first error, named after the message that caused it (matched by seq).
   */
  batch(messages: BatchMessage[], options: RequestOptions): Promise<void> {
    return this.enqueue(async () => {
      await this.exchange('batch', options, messages);
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.current?.finish(
      new NetlinkError({
        errno: EBADF,
        operation: this.current.operation,
        messageType: this.current.messageType,
        kernelMessage: 'socket closed',
      }),
    );
    this.transport.close();
  }

  private enqueue<T>(work: () => Promise<T>): Promise<T> {
    return this.lock.run(work);
  }

  private nextSeq(): number {
    this.seq = this.seq >= 0xffffffff ? 1 : this.seq + 1;
    return this.seq;
  }

  private exchange(
    kind: Kind,
    options: RequestOptions,
    messages: BatchMessage[],
  ): Promise<NetlinkMessage[]> {
    const messageType = messages.length === 1 ? messages[0]!.type : undefined;
    if (this.closed) {
      return Promise.reject(
        new NetlinkError({
          errno: EBADF,
          operation: options.operation,
          messageType,
          kernelMessage: 'socket closed',
        }),
      );
    }
    return new Promise<NetlinkMessage[]>((resolve, reject) => {
      const outstanding = new Set<number>();
      const sent = new Map<number, Sent>();
      const datagram = encodeMessages(
        messages.map((message) => {
          const seq = this.nextSeq();
          sent.set(seq, { operation: message.operation, type: message.type });
          if (message.ack) outstanding.add(seq);
          return {
            type: message.type,
            flags: message.flags,
            seq,
            pid: 0,
            payload: message.payload,
          };
        }),
      );
      const timer = setTimeout(() => {
        // A batch whose last answer never came may still have said what failed first.
        exchange.finish(
          exchange.firstError ??
            new NetlinkError({
              errno: ETIMEDOUT,
              operation: options.operation,
              messageType,
              kernelMessage: `no answer from the kernel within ${options.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms`,
            }),
        );
      }, options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
      const exchange: Exchange = {
        kind,
        operation: options.operation,
        messageType,
        outstanding,
        sent,
        replies: [],
        interrupted: false,
        firstError: undefined,
        finish: (error) => {
          if (this.current !== exchange) return;
          clearTimeout(timer);
          this.current = undefined;
          this.transport.setBusy(false);
          if (error) reject(error);
          else resolve(exchange.replies);
        },
      };
      this.current = exchange;
      this.transport.setBusy(true);
      try {
        this.transport.send(datagram);
      } catch (error) {
        const errno = (error as { errno?: unknown }).errno;
        exchange.finish(
          typeof errno === 'number'
            ? new NetlinkError({
                errno,
                operation: options.operation,
                messageType,
                kernelMessage: (error as Error).message,
              })
            : (error as Error),
        );
      }
    });
  }

  private onDatagram(error: Error | null, datagram: Buffer | undefined): void {
    const exchange = this.current;
    if (!exchange) return; // nothing is waiting: a stale reply to a timed-out request
    if (error || !datagram) {
      // ENOBUFS means the kernel dropped replies we will never see: fail rather than hang.
      const errno = (error as { errno?: unknown } | null)?.errno;
      exchange.finish(
        new NetlinkError({
          errno: typeof errno === 'number' ? errno : EIO,
          operation: exchange.operation,
          messageType: exchange.messageType,
          kernelMessage: error?.message ?? 'empty datagram',
        }),
      );
      return;
    }
    let messages: NetlinkMessage[];
    try {
      messages = parseMessages(datagram);
    } catch (parseError) {
      exchange.finish(parseError as NetlinkProtocolError);
      return;
    }
    for (const message of messages) {
      if (this.current !== exchange) return;
      this.onMessage(exchange, message);
    }
  }

  private onMessage(exchange: Exchange, message: NetlinkMessage): void {
    // Replies carry our sequence numbers and our port id; anything else is not ours (a late
    // answer to an exchange that timed out, or a notification).
    if (!exchange.sent.has(message.seq)) return;
    if (message.pid !== 0 && message.pid !== this.transport.portId) return;
    try {
      switch (message.type) {
        case NLMSG_NOOP:
          return;
        case NLMSG_OVERRUN:
          exchange.finish(
            new NetlinkProtocolError(`${exchange.operation}: NLMSG_OVERRUN, data lost`),
          );
          return;
        case NLMSG_ERROR:
          this.onAck(exchange, message.seq, parseErrorPayload(message));
          return;
        case NLMSG_DONE:
          if (exchange.kind === 'dump')
            this.onAck(exchange, message.seq, parseDonePayload(message));
          return;
        default:
          if (message.flags & NLM_F_DUMP_INTR) exchange.interrupted = true;
          exchange.replies.push(message);
      }
    } catch (error) {
      exchange.finish(error as Error);
    }
  }

  private onAck(exchange: Exchange, seq: number, report: ErrorReport): void {
    exchange.outstanding.delete(seq);
    if (report.errno !== 0 && !exchange.firstError) {
      const failed = exchange.sent.get(seq);
      exchange.firstError = new NetlinkError({
        errno: report.errno,
        operation: failed?.operation ?? exchange.operation,
        messageType: failed?.type ?? exchange.messageType,
        kernelMessage: report.kernelMessage,
        offset: report.offset,
        sequence: seq,
      });
    }
    // A do request or dump ends with its one answer. A batch ends when every message that
    // asked for an ACK has one: nfnetlink keeps processing after a failed message and delivers
    // every ACK and error once the batch is done (nfnetlink_rcv_batch), so waiting for all of
    // them leaves no stale replies. A batch it cannot parse gets one error and nothing more, so
    // after the first error only a short grace is granted.
    if (exchange.kind !== 'batch' || exchange.outstanding.size === 0) {
      exchange.finish(exchange.firstError ?? null);
    } else if (report.errno !== 0) {
      setTimeout(() => exchange.finish(exchange.firstError ?? null), BATCH_ERROR_GRACE_MS).unref();
    }
  }
}
