/**
 * The open Server-Sent Events streams. Each event's frame is built once by the hub and the same
 * Buffer is written to every stream that wants its type; one timer writes the keep-alive
 * comment to all of them. A stream whose reader falls behind by more than `maxBufferedBytes`
 * (what its socket has not taken yet) is closed, logged and counted, never buffered further.
 */
import type { EventHub, Resumption } from './hub';
import type { EventType, StoredEvent } from './types';

/** The slice of an http.ServerResponse a stream writes to (a test gives a Writable). */
export interface StreamSink {
  write(chunk: Buffer): boolean;
  readonly writableLength: number;
  end(): void;
  destroy(): void;
  on(event: 'close' | 'drain', listener: () => void): unknown;
}

export interface StreamLogger {
  warn(object: Record<string, unknown>, message: string): void;
}

export interface StreamsObserver {
  /** Open streams now. */
  open(count: number): void;
  /** A stream was closed because its reader fell behind. */
  slowReaderClosed(): void;
}

export interface StreamsOptions {
  /** The comment line's period; 15 s keeps proxies from closing an idle stream. */
  keepAliveMs?: number;
  /** How far behind a reader may fall, in bytes not yet taken by its socket. */
  maxBufferedBytes?: number;
  /** EventSource's reconnection delay, sent once at the start of every stream. */
  retryMs?: number;
  logger: StreamLogger;
  observer?: StreamsObserver;
}

export const KEEP_ALIVE_MS = 15_000;
/** About 1,000 events of 250 bytes; the frames are shared, so this is the queue, not copies. */
export const MAX_BUFFERED_BYTES = 256 * 1024;
export const RETRY_MS = 2_000;

const KEEP_ALIVE = Buffer.from(': keep-alive\n\n', 'utf8');

export interface OpenOptions {
  /** Only these types (and `reset`); null: all. */
  types: ReadonlySet<EventType> | null;
  /** The Last-Event-ID the client sent, if any. */
  lastEventId?: string | undefined;
  /** For the log line of a slow reader. */
  client?: string | null;
}

interface Stream {
  sink: StreamSink;
  types: ReadonlySet<EventType> | null;
  client: string | null;
  /** Buffered bytes allowed now: the bound, plus the replay until the socket took it. */
  allowance: number;
  closed: boolean;
}

export class EventStreams {
  private readonly streams = new Set<Stream>();
  private readonly keepAliveMs: number;
  private readonly maxBufferedBytes: number;
  private readonly retry: Buffer;
  private readonly logger: StreamLogger;
  private readonly observer: StreamsObserver | undefined;
  private unsubscribe: (() => void) | null = null;
  private keepAlive: NodeJS.Timeout | null = null;

  constructor(
    private readonly hub: EventHub,
    options: StreamsOptions,
  ) {
    this.keepAliveMs = options.keepAliveMs ?? KEEP_ALIVE_MS;
    this.maxBufferedBytes = options.maxBufferedBytes ?? MAX_BUFFERED_BYTES;
    this.retry = Buffer.from(`retry: ${options.retryMs ?? RETRY_MS}\n\n`, 'utf8');
    this.logger = options.logger;
    this.observer = options.observer;
  }

  get size(): number {
    return this.streams.size;
  }

  /**
   * Starts a stream on `sink` (whose headers the caller has sent): the retry hint, then what a
   * resumption owes it (the missed events, or one `reset`), then the live events.
   */
  open(sink: StreamSink, options: OpenOptions): Resumption {
    const resumption = this.hub.resume(options.lastEventId);
    const stream: Stream = {
      sink,
      types: options.types,
      client: options.client ?? null,
      allowance: this.maxBufferedBytes,
      closed: false,
    };
    sink.write(this.retry);
    if (resumption.kind === 'reset') sink.write(this.hub.resetFrame(resumption.reason));
    if (resumption.kind === 'replay') {
      for (const event of resumption.events) {
        if (wants(stream, event)) sink.write(event.frame);
      }
    }
    // The replay is what the client asked for: it may exceed the bound until the socket took it.
    stream.allowance = this.maxBufferedBytes + sink.writableLength;
    sink.on('drain', () => {
      stream.allowance = this.maxBufferedBytes;
    });
    sink.on('close', () => this.forget(stream));
    this.streams.add(stream);
    this.observer?.open(this.streams.size);
    if (this.unsubscribe === null) this.unsubscribe = this.hub.subscribe((e) => this.deliver(e));
    if (this.keepAlive === null) {
      this.keepAlive = setInterval(() => this.writeAll(KEEP_ALIVE, null), this.keepAliveMs);
      this.keepAlive.unref();
    }
    return resumption;
  }

  /** Ends every stream (shutdown). */
  closeAll(): void {
    for (const stream of [...this.streams]) {
      stream.sink.end();
      this.forget(stream);
    }
  }

  private deliver(event: StoredEvent): void {
    this.writeAll(event.frame, event);
  }

  private writeAll(chunk: Buffer, event: StoredEvent | null): void {
    for (const stream of this.streams) {
      if (event !== null && !wants(stream, event)) continue;
      if (stream.sink.writableLength + chunk.length > stream.allowance) {
        this.closeSlow(stream);
        continue;
      }
      stream.sink.write(chunk);
    }
  }

  private closeSlow(stream: Stream): void {
    const buffered = stream.sink.writableLength;
    this.forget(stream);
    stream.sink.destroy();
    this.observer?.slowReaderClosed();
    this.logger.warn(
      {
        event: 'event_stream_slow_reader',
        client: stream.client,
        bufferedBytes: buffered,
        maxBufferedBytes: this.maxBufferedBytes,
      },
      `closed an event stream whose reader fell ${buffered} bytes behind (more than ${this.maxBufferedBytes}); it may reconnect with Last-Event-ID`,
    );
  }

  private forget(stream: Stream): void {
    if (stream.closed) return;
    stream.closed = true;
    this.streams.delete(stream);
    this.observer?.open(this.streams.size);
    if (this.streams.size === 0) {
      this.unsubscribe?.();
      this.unsubscribe = null;
      if (this.keepAlive !== null) clearInterval(this.keepAlive);
      this.keepAlive = null;
    }
  }
}

function wants(stream: Stream, event: StoredEvent): boolean {
  return stream.types === null || stream.types.has(event.type);
}
