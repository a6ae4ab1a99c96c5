/**
 * The open Server-Sent Events streams, each held to a bound of memory and time whoever reads it.
 * Each event's frame is built once by the hub and the same Buffer is written to every stream
 * that wants its type; one timer writes the keep-alive comment to all of them. At most
 * `maxStreams` streams are open (`--max-event-streams`): one more is refused (`full`), so streams
 * never take every connection from the API. A live stream whose reader falls behind by more
 * than `maxBufferedBytes` (what its socket has not taken yet) is closed, logged and counted,
 * never buffered further. A resumption (`Last-Event-ID`) replays from the hub's history in
 * slices of at most SLICE_BYTES under the same bound, the next once the socket took the last
 * ('drain'); the events published meanwhile are read from the history in order, so the stream
 * joins the live ones only once it caught up (a reader so slow that the history dropped what it
 * still owed is closed like a slow one). A stream whose socket has held unsent bytes for
 * `stallMs` (`--event-stream-stall`) without once taking them all is closed, logged and counted
 * too.
 *
 * The work of a burst of stream requests is spread over turns of the event loop, so that API
 * requests keep their turns however many clients ask for streams at once (issue 30: 200 raw
 * sockets resuming from an old id): a request is answered (`admit`: opened or refused) on a
 * later turn, at most ADMISSIONS_PER_TURN per turn in arrival order, and no slice of a replay is
 * ever written from `open` or a socket's event: all replays together write at most TURN_BYTES
 * (and one slice) per turn, the streams taking turns. A turn also stops after TURN_MS, having
 * answered one request and written one slice at least, so that it is short on a slow machine too.
 * The turns pause while an API request is in flight (`apiRequest`, the HTTP server's: any request
 * but a stream's) and while stream requests keep arriving (each within ARRIVAL_GAP_MS of the
 * last: a burst is read, with any API request among or behind it, before it is answered), and
 * come back on the next turn of the loop once neither holds; a pause lasts MAX_PAUSE_MS at most,
 * then one turn runs and the pause starts over, so that streams are never starved (at least one
 * answer and one slice per MAX_PAUSE_MS under any load of API requests).
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
  /** A stream was closed because its reader took nothing of its buffer for the stall bound. */
  stalledClosed?(): void;
  /** A stream was refused: `maxStreams` were open. */
  refused?(): void;
}

export interface StreamsOptions {
  /** The comment line's period; 15 s keeps proxies from closing an idle stream. */
  keepAliveMs?: number;
  /** How far behind a reader may fall, in bytes not yet taken by its socket. */
  maxBufferedBytes?: number;
  /** Streams open at most (`--max-event-streams`). */
  maxStreams?: number;
  /** How long a socket may hold unsent bytes before its stream is closed (`--event-stream-stall`). */
  stallMs?: number;
  /** EventSource's reconnection delay, sent once at the start of every stream. */
  retryMs?: number;
  /** Milliseconds, for the stall bound (Date.now). */
  now?: () => number;
  /** Milliseconds of a monotonic clock, for a turn's time (performance.now). */
  clock?: () => number;
  logger: StreamLogger;
  observer?: StreamsObserver;
}

export const KEEP_ALIVE_MS = 15_000;
/** About 1,000 events of 250 bytes; the frames are shared, so this is the queue, not copies. */
export const MAX_BUFFERED_BYTES = 256 * 1024;
/** `--max-event-streams`' default (DESIGN §4). */
export const MAX_STREAMS = 64;
/** `--event-stream-stall`'s default (DESIGN §4). */
export const STALL_MS = 60_000;
export const RETRY_MS = 2_000;
/** A replay is written in chunks of at most this many bytes, one per stream per turn at most. */
export const SLICE_BYTES = 16 * 1024;
/**
 * What all replays together write per turn of the event loop at most, the streams taking turns
 * (round robin): 64 streams replaying to readers whose sockets take megabytes (loopback does)
 * would otherwise write a slice each per turn, a megabyte between any two steps of an API
 * request, and an admin waited 16 s for POST /api/peer in the VM (issue 30's kernel test).
 */
export const TURN_BYTES = 64 * 1024;
/**
 * Stream requests answered (a stream opened, or refused) per turn of the event loop at most: 200
 * requests read in one turn were all answered in that turn, and an admin's POST /api/peer sent
 * behind them waited 3 s in the VM (issue 30's kernel test).
 */
export const ADMISSIONS_PER_TURN = 8;
/**
 * Milliseconds a turn answers requests and writes slices for, at most, beyond its first of
 * each: the bounds above in time, for a machine where a request's answer costs milliseconds
 * (the kernel tests' emulated VM: 5 ms each, and a turn of 8 held each step of an admin's request
 * 100 ms).
 */
export const TURN_MS = 2;
/**
 * A burst of stream requests is still arriving while the last came less than this many
 * milliseconds ago: the turns wait for its end (or MAX_PAUSE_MS), so that an API request sent
 * among or behind it is read before any of them is answered.
 */
export const ARRIVAL_GAP_MS = 20;
/**
 * The longest the streams' turns pause for API requests in flight or a burst still arriving:
 * then one turn runs and the pause starts over. An admin's POST /api/peer takes a dozen turns
 * of the event loop (its netlink round trips), and in the kernel tests' emulated VM a turn of
 * stream work costs 10 ms or more: one every 20 ms held it 1.6 s behind a burst of 200
 * resuming streams (issue 30's kernel test); a pause without an end would let a client that
 * keeps an API request in flight (a slow upload, back to back polls) hold every stream's
 * admission and replay for ever.
 */
export const MAX_PAUSE_MS = 250;

const KEEP_ALIVE = Buffer.from(': keep-alive\n\n', 'utf8');

/** `open` on a full set of streams. */
export class EventStreamsFullError extends Error {
  constructor(readonly maxStreams: number) {
    super(
      maxStreams === 0
        ? 'Event streams are off on this daemon (--max-event-streams 0); use webhooks or poll the list'
        : `${maxStreams} event streams are open, the most --max-event-streams allows; ` +
            'retry later, or close a stream this client no longer reads',
    );
    this.name = 'EventStreamsFullError';
  }
}

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
  /** While replaying: the seq of the next event to send from the history; null once live. */
  next: number | null;
  /** A replay slice is due on the next turn of the event loop. */
  scheduled: boolean;
  /** Since when the socket holds bytes it has not taken (ms), null when it took them all. */
  bufferedSince: number | null;
  closed: boolean;
}

export class EventStreams {
  readonly maxStreams: number;
  private readonly streams = new Set<Stream>();
  private readonly keepAliveMs: number;
  private readonly maxBufferedBytes: number;
  private readonly stallMs: number;
  private readonly retry: Buffer;
  private readonly now: () => number;
  private readonly clock: () => number;
  private readonly logger: StreamLogger;
  private readonly observer: StreamsObserver | undefined;
  private unsubscribe: (() => void) | null = null;
  /** Replaying streams whose next slice is due, in the order they take their turns. */
  private readonly due: Stream[] = [];
  /** Stream requests waiting for their answer, in arrival order (`admit`). */
  private readonly admissions: Array<() => void> = [];
  private turnScheduled = false;
  /** API requests in flight (`apiRequest`). */
  private apiInFlight = 0;
  /** When the last stream request arrived (`admit`, the monotonic clock). */
  private lastArrival = -Infinity;
  /** Since when the next turn's work waits (the monotonic clock); null: no turn is due. */
  private waitingSince: number | null = null;
  /** The pause's timer: the end of the arrivals, or the pause's bound. */
  private paused: NodeJS.Timeout | null = null;
  /** closeAll ran (shutdown): a stream opened later ends at once. */
  private ended = false;
  private keepAlive: NodeJS.Timeout | null = null;
  private sweep: NodeJS.Timeout | null = null;

  constructor(
    private readonly hub: EventHub,
    options: StreamsOptions,
  ) {
    this.keepAliveMs = options.keepAliveMs ?? KEEP_ALIVE_MS;
    this.maxBufferedBytes = options.maxBufferedBytes ?? MAX_BUFFERED_BYTES;
    this.maxStreams = options.maxStreams ?? MAX_STREAMS;
    this.stallMs = options.stallMs ?? STALL_MS;
    this.retry = Buffer.from(`retry: ${options.retryMs ?? RETRY_MS}\n\n`, 'utf8');
    this.now = options.now ?? Date.now;
    this.clock = options.clock ?? (() => performance.now());
    this.logger = options.logger;
    this.observer = options.observer;
  }

  get size(): number {
    return this.streams.size;
  }

  /** Bytes written to the open streams that their sockets have not taken yet. */
  get bufferedBytes(): number {
    let sum = 0;
    for (const stream of this.streams) sum += stream.sink.writableLength;
    return sum;
  }

  /** True when one more stream would be refused. */
  get full(): boolean {
    return this.streams.size >= this.maxStreams;
  }

  /** Counts a stream refused by the caller because `full` was true (an HTTP 503). */
  refused(): void {
    this.observer?.refused?.();
  }

  /**
   * Starts a stream on `sink` (whose headers the caller has sent): the retry hint, then what a
   * resumption owes it (the missed events, in slices, or one `reset`), then the live events.
   * Throws EventStreamsFullError when `maxStreams` are open (ask `full` before the headers).
   */
  open(sink: StreamSink, options: OpenOptions): Resumption['kind'] {
    if (this.full) {
      this.refused();
      throw new EventStreamsFullError(this.maxStreams);
    }
    if (this.ended) {
      sink.end();
      return 'live';
    }
    const resumption = this.hub.resumeAfter(options.lastEventId);
    const stream: Stream = {
      sink,
      types: options.types,
      client: options.client ?? null,
      next: resumption.kind === 'replay' ? resumption.after + 1 : null,
      bufferedSince: null,
      scheduled: false,
      closed: false,
    };
    this.write(stream, this.retry);
    if (resumption.kind === 'reset') this.write(stream, this.hub.resetFrame(resumption.reason));
    sink.on('drain', () => {
      if (sink.writableLength === 0) stream.bufferedSince = null;
      this.nextSlice(stream);
    });
    sink.on('close', () => this.forget(stream));
    this.streams.add(stream);
    this.observer?.open(this.streams.size);
    if (this.unsubscribe === null) this.unsubscribe = this.hub.subscribe((e) => this.deliver(e));
    if (this.keepAlive === null) {
      this.keepAlive = setInterval(() => this.writeAll(KEEP_ALIVE), this.keepAliveMs);
      this.keepAlive.unref();
    }
    if (this.sweep === null) {
      const period = Math.min(5000, Math.max(10, Math.floor(this.stallMs / 4)));
      this.sweep = setInterval(() => this.sweepAll(), period);
      this.sweep.unref();
    }
    // Its first slice on a later turn, in its place among the others (never from here: a burst of
    // streams opened in one turn would write a slice each in it).
    this.nextSlice(stream);
    return resumption.kind;
  }

  /**
   * Runs `answer` (the caller's: `full`, then `open` or its refusal) on a later turn of the event
   * loop, in arrival order, at most ADMISSIONS_PER_TURN per turn. It is called whatever became of
   * the request meanwhile (a client that left: the caller looks).
   */
  admit(answer: () => void): void {
    this.admissions.push(answer);
    this.lastArrival = this.clock();
    this.schedule();
  }

  /** Stream requests waiting for their answer (`admit`). */
  get waiting(): number {
    return this.admissions.length;
  }

  /**
   * An API request (not a stream) began: until the function returned is called (its response
   * closed), the streams' turns pause (MAX_PAUSE_MS at most at a time), so that none of its
   * steps waits behind stream work.
   */
  apiRequest(): () => void {
    this.apiInFlight += 1;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.apiInFlight -= 1;
      if (this.apiInFlight === 0 && this.paused !== null) {
        // The last one is done: the pause ends now, unless a burst is still arriving.
        clearTimeout(this.paused);
        this.paused = null;
        this.turnScheduled = false;
        this.schedule();
      }
    };
  }

  /**
   * Ends every stream (shutdown); a request still waiting for its answer gets a stream that ends
   * at once, as the others did.
   */
  closeAll(): void {
    this.ended = true;
    for (const stream of [...this.streams]) {
      stream.sink.end();
      this.forget(stream);
    }
  }

  /**
   * A replaying stream's next slice: the history's events from `next` on, up to SLICE_BYTES
   * and while they fit in the bound (one at least on an empty buffer), written as one chunk;
   * live once it reached the last event published. The next slice comes on a later turn of the
   * event loop, once the socket took this one ('drain') or at once when it did (a socket whose
   * kernel buffers take megabytes would otherwise hold the loop, and every API request, for
   * the whole replay).
   */
  private replay(stream: Stream): number {
    if (stream.next === null || stream.closed || stream.scheduled) return 0;
    const buffered = stream.sink.writableLength;
    const frames: Buffer[] = [];
    let bytes = 0;
    while (stream.next <= this.hub.lastSeq) {
      const event = this.hub.eventAt(stream.next);
      if (event === undefined) {
        this.closeSlow(stream, 'history');
        return 0;
      }
      if (wants(stream, event)) {
        const size = event.frame.length;
        if (buffered + bytes > 0 && buffered + bytes + size > this.maxBufferedBytes) break;
        if (bytes > 0 && bytes + size > SLICE_BYTES) break;
        frames.push(event.frame);
        bytes += size;
      }
      stream.next += 1;
    }
    const taken = frames.length > 0 && this.write(stream, Buffer.concat(frames, bytes));
    if (stream.next > this.hub.lastSeq) {
      stream.next = null;
    } else if (taken) {
      this.nextSlice(stream);
    }
    // Else the socket is full: its 'drain' (or, at the latest, the sweep) sends the next slice.
    return bytes;
  }

  /**
   * The next slice on a later turn of the event loop, after the I/O waiting (a socket that takes
   * each write at once emits 'drain' on process.nextTick, which would chain the whole replay
   * ahead of every request), in its place among the other replaying streams.
   */
  private nextSlice(stream: Stream): void {
    if (stream.next === null || stream.scheduled || stream.closed) return;
    stream.scheduled = true;
    this.due.push(stream);
    this.schedule();
  }

  /** Whether the streams' work pauses now: API requests in flight, or a burst still arriving. */
  private holding(now: number): boolean {
    return this.apiInFlight > 0 || now - this.lastArrival < ARRIVAL_GAP_MS;
  }

  /**
   * The next turn, once: on the event loop's check phase (after the I/O waiting), or, in a
   * pause, when the arrivals end or the pause reaches MAX_PAUSE_MS (an API request's end ends it
   * sooner: apiRequest).
   */
  private schedule(): void {
    if (this.turnScheduled) return;
    this.turnScheduled = true;
    const now = this.clock();
    this.waitingSince ??= now;
    if (!this.holding(now)) {
      setImmediate(() => this.turn());
      return;
    }
    const bound = this.waitingSince + MAX_PAUSE_MS;
    const wake = this.apiInFlight > 0 ? bound : Math.min(bound, this.lastArrival + ARRIVAL_GAP_MS);
    this.paused = setTimeout(
      () => {
        this.paused = null;
        this.turn();
      },
      Math.max(0, wake - now),
    );
  }

  /**
   * One turn: the next ADMISSIONS_PER_TURN stream requests answered, then slices of the due
   * replays, in turn, up to TURN_BYTES together (the last may start below it and write a slice).
   */
  private turn(): void {
    this.turnScheduled = false;
    const started = this.clock();
    if (this.holding(started) && started - (this.waitingSince ?? started) < MAX_PAUSE_MS) {
      // An API request began, or a stream request came, since this turn was scheduled: it waits
      // for their end, or for the pause's bound.
      this.schedule();
      return;
    }
    // The turn runs: the next one's work waits from the end of this one (a pause starts over).
    this.waitingSince = null;
    const spent = (): boolean => this.clock() - started >= TURN_MS;
    // Each kind of work gets one item at least (progress), then more while the time lasts.
    for (let i = 0; i < ADMISSIONS_PER_TURN && this.admissions.length > 0; i++) {
      if (i > 0 && spent()) break;
      const answer = this.admissions.shift()!;
      try {
        answer();
      } catch (error) {
        // The caller's own failure: the others are answered still, and the turns go on.
        this.logger.warn(
          { event: 'event_stream_admission_failed', error: String(error) },
          `answering an event stream request failed: ${String(error)}`,
        );
      }
    }
    let budget = TURN_BYTES;
    const turns = this.due.length;
    for (let i = 0; i < turns && budget > 0; i++) {
      if (i > 0 && spent()) break;
      const stream = this.due.shift()!;
      stream.scheduled = false;
      budget -= this.replay(stream);
    }
    if (this.due.length > 0 || this.admissions.length > 0) this.schedule();
  }

  /** A live event: to every live stream that wants it; a replaying one reads it in its turn. */
  private deliver(event: StoredEvent): void {
    for (const stream of this.streams) {
      if (stream.next === null && wants(stream, event)) this.bounded(stream, event.frame);
    }
  }

  /** The keep-alive comment: to every live stream, and to a replaying one with nothing queued. */
  private writeAll(chunk: Buffer): void {
    for (const stream of this.streams) {
      if (stream.next === null) this.bounded(stream, chunk);
      else if (stream.sink.writableLength === 0) this.write(stream, chunk);
    }
  }

  /** A live stream's write, or its close when the chunk would take it past the bound. */
  private bounded(stream: Stream, chunk: Buffer): void {
    if (stream.sink.writableLength + chunk.length > this.maxBufferedBytes) {
      this.closeSlow(stream, 'bound');
    } else {
      this.write(stream, chunk);
    }
  }

  private write(stream: Stream, chunk: Buffer): boolean {
    const taken = stream.sink.write(chunk);
    if (stream.sink.writableLength > 0) stream.bufferedSince ??= this.now();
    return taken;
  }

  /** Closes the streams stalled past the bound; a replay stopped at the bound goes on. */
  private sweepAll(): void {
    const now = this.now();
    for (const stream of [...this.streams]) {
      if (stream.sink.writableLength === 0) {
        stream.bufferedSince = null;
        this.nextSlice(stream);
      } else if (stream.bufferedSince !== null && now - stream.bufferedSince >= this.stallMs) {
        this.closeStalled(stream, now - stream.bufferedSince);
      }
    }
  }

  private closeSlow(stream: Stream, why: 'bound' | 'history'): void {
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
      why === 'bound'
        ? `closed an event stream whose reader fell ${buffered} bytes behind (more than ${this.maxBufferedBytes}); it may reconnect with Last-Event-ID`
        : `closed an event stream whose reader fell behind the history (--event-history) while it was replayed; it may reconnect with Last-Event-ID`,
    );
  }

  private closeStalled(stream: Stream, stalledMs: number): void {
    const buffered = stream.sink.writableLength;
    this.forget(stream);
    stream.sink.destroy();
    this.observer?.stalledClosed?.();
    this.logger.warn(
      {
        event: 'event_stream_stalled',
        client: stream.client,
        bufferedBytes: buffered,
        stalledMs,
        stallMs: this.stallMs,
      },
      `closed an event stream whose reader left ${buffered} bytes untaken for ${Math.round(stalledMs / 1000)} s (--event-stream-stall ${this.stallMs / 1000}); it may reconnect with Last-Event-ID`,
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
      if (this.sweep !== null) clearInterval(this.sweep);
      this.sweep = null;
    }
  }
}

function wants(stream: Stream, event: StoredEvent): boolean {
  return stream.types === null || stream.types.has(event.type);
}
