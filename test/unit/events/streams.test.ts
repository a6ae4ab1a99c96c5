import { expect } from 'chai';
import { Writable } from 'node:stream';
import sinon from 'sinon';
import {
  ADMISSIONS_PER_TURN,
  EventHub,
  EventStreams,
  EventStreamsFullError,
  SLICE_BYTES,
  TURN_BYTES,
  TURN_MS,
  ARRIVAL_GAP_MS,
  MAX_PAUSE_MS,
  type EventType,
} from '../../../src/events';

/** A socket-like sink: takes writes until `stall()`, then holds them unread (a slow reader). */
class Sink extends Writable {
  readonly chunks: Buffer[] = [];
  private stalled = false;
  private readonly held: Array<() => void> = [];
  constructor() {
    super({ highWaterMark: 1024 });
  }
  override write(chunk: Buffer): boolean {
    this.chunks.push(chunk);
    return super.write(chunk);
  }
  override _write(_chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    if (this.stalled) this.held.push(callback);
    else callback();
  }
  stall(): void {
    this.stalled = true;
  }
  /** The reader takes everything held, and what comes next. */
  resume(): void {
    this.stalled = false;
    for (const callback of this.held.splice(0)) callback();
  }
  text(): string {
    return Buffer.concat(this.chunks).toString();
  }
  ids(): string[] {
    return [...this.text().matchAll(/^id: (.*)$/gm)].map((m) => m[1]!);
  }
  events(): string[] {
    return [...this.text().matchAll(/^event: (.*)$/gm)].map((m) => m[1]!);
  }
}

function setup(
  options: {
    maxBufferedBytes?: number;
    historySize?: number;
    maxHistoryBytes?: number;
    maxStreams?: number;
    stallMs?: number;
    clock?: () => number;
  } = {},
) {
  const hub = new EventHub({
    interfaceName: 'wg0',
    historySize: options.historySize ?? 100,
    maxHistoryBytes: options.maxHistoryBytes,
    run: 'r',
  });
  const warnings: Array<Record<string, unknown>> = [];
  let open = 0;
  let slow = 0;
  let stalled = 0;
  let refused = 0;
  const streams = new EventStreams(hub, {
    maxBufferedBytes: options.maxBufferedBytes,
    maxStreams: options.maxStreams,
    stallMs: options.stallMs,
    // Date is faked in these tests (sinon): the turns' clock moves with clock.tick().
    clock: options.clock ?? (() => Date.now()),
    logger: { warn: (object) => warnings.push(object) },
    observer: {
      open: (n) => (open = n),
      slowReaderClosed: () => (slow += 1),
      stalledClosed: () => (stalled += 1),
      refused: () => (refused += 1),
    },
  });
  return {
    hub,
    streams,
    warnings,
    open: () => open,
    slow: () => slow,
    stalled: () => stalled,
    refused: () => refused,
  };
}

/** Lets the sinks' callbacks and 'drain' events run (they are queued, not synchronous). */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

const publish = (hub: EventHub, type: 'interface.lost' | 'interface.restored' = 'interface.lost') =>
  hub.publish(type === 'interface.lost' ? { type, details: { reason: 'gone' } } : { type });

describe('events: the streams (filtering, one serialization, keep-alive, slow readers)', () => {
  let clock: sinon.SinonFakeTimers;
  beforeEach(() => {
    clock = sinon.useFakeTimers({
      now: Date.parse('2026-03-01T12:00:00Z'),
      toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'],
    });
  });
  afterEach(() => clock.restore());

  it('starts with the retry hint, then sends live events as SSE frames', () => {
    const { hub, streams } = setup();
    const sink = new Sink();
    streams.open(sink, { types: null });
    publish(hub);
    expect(sink.text()).to.match(/^retry: 2000\n\nid: r\.1\nevent: interface\.lost\ndata: \{/);
  });

  it('writes the very same Buffer of an event to every stream (serialized once)', () => {
    const { hub, streams } = setup();
    const sinks = [new Sink(), new Sink(), new Sink()];
    for (const sink of sinks) streams.open(sink, { types: null });
    const event = publish(hub);
    for (const sink of sinks) expect(sink.chunks.at(-1)).to.equal(event.frame);
  });

  it('?types= filters: a stream gets only the types it asked for', () => {
    const { hub, streams } = setup();
    const sink = new Sink();
    streams.open(sink, { types: new Set<EventType>(['interface.restored']) });
    publish(hub, 'interface.lost');
    publish(hub, 'interface.restored');
    publish(hub, 'interface.lost');
    expect(sink.events()).to.deep.equal(['interface.restored']);
    expect(sink.ids()).to.deep.equal(['r.2']);
  });

  it('resumes: the missed events (filtered) come first, then the live ones, none twice', async () => {
    const { hub, streams } = setup();
    publish(hub, 'interface.lost'); // r.1
    publish(hub, 'interface.restored'); // r.2
    publish(hub, 'interface.lost'); // r.3
    const sink = new Sink();
    streams.open(sink, { types: new Set<EventType>(['interface.lost']), lastEventId: 'r.1' });
    // Published before the replay's first slice (a later turn): read from the history in order.
    publish(hub, 'interface.lost'); // r.4
    await settle();
    publish(hub, 'interface.lost'); // r.5, live
    expect(sink.ids()).to.deep.equal(['r.3', 'r.4', 'r.5']);
  });

  it('an id the history no longer holds gets one reset event, then the live ones', () => {
    const { hub, streams } = setup({ historySize: 2 });
    for (let i = 0; i < 5; i++) publish(hub);
    const sink = new Sink();
    streams.open(sink, { types: new Set<EventType>(['interface.restored']), lastEventId: 'r.1' });
    publish(hub, 'interface.restored');
    expect(sink.events()).to.deep.equal(['reset', 'interface.restored']);
    expect(sink.ids()).to.deep.equal(['r.5', 'r.6']);
  });

  it('writes a comment line every 15 s to every open stream, and stops when none is open', () => {
    const { streams } = setup();
    const a = new Sink();
    const b = new Sink();
    streams.open(a, { types: null });
    streams.open(b, { types: null });
    clock.tick(14_999);
    expect(a.text()).to.not.include(': keep-alive');
    clock.tick(1);
    expect(a.text()).to.include(': keep-alive\n\n');
    expect(b.text()).to.include(': keep-alive\n\n');
    a.destroy();
    b.destroy();
    return new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      expect(streams.size).to.equal(0);
      expect(clock.countTimers()).to.equal(0);
    });
  });

  it('closes a reader that fell more than the bound behind, logs it and counts it; the others go on', () => {
    const { hub, streams, warnings, slow, open } = setup({ maxBufferedBytes: 4096 });
    const fast = new Sink();
    const slowSink = new Sink();
    streams.open(fast, { types: null });
    streams.open(slowSink, { types: null });
    expect(open()).to.equal(2);
    slowSink.stall();
    let published = 0;
    while (!slowSink.destroyed && published < 1000) {
      publish(hub);
      published += 1;
    }
    expect(slowSink.destroyed).to.equal(true);
    // About the bound's worth of frames, not everything: it was never buffered without limit.
    expect(slowSink.writableLength).to.be.at.most(4096);
    expect(slow()).to.equal(1);
    expect(open()).to.equal(1);
    expect(warnings).to.have.length(1);
    expect(warnings[0]).to.include({ event: 'event_stream_slow_reader', maxBufferedBytes: 4096 });
    publish(hub);
    expect(fast.ids()).to.have.length(published + 1);
  });

  // Issue 30: a replay used to be exempt from the bound (+84 MB for 100 raw sockets that never read).
  it('replays in slices under the same bound: a reader that takes nothing holds at most the bound', async () => {
    const { hub, streams, slow } = setup({ maxBufferedBytes: 4096, historySize: 1000 });
    for (let i = 0; i < 200; i++) publish(hub);
    const sink = new Sink();
    sink.stall();
    streams.open(sink, { types: null, lastEventId: 'r.0' });
    for (let round = 0; round < 5; round++) await settle();
    // It stops where the sink says it is full (its highWaterMark, 1024), within the bound.
    expect(sink.writableLength).to.be.at.least(1024).and.at.most(4096);
    expect(sink.ids().length).to.be.below(200);
    // Events published meanwhile wait in the history: a replaying stream is never closed for them.
    for (let i = 0; i < 50; i++) publish(hub);
    expect(sink.writableLength).to.be.at.most(4096);
    expect(sink.destroyed).to.equal(false);
    expect(slow()).to.equal(0);
  });

  it('sends the next slice on drain, in order, then the events published meanwhile, then live ones, none twice', async () => {
    const { hub, streams } = setup({ maxBufferedBytes: 2048, historySize: 1000 });
    for (let i = 0; i < 100; i++) publish(hub);
    const sink = new Sink();
    sink.stall();
    streams.open(sink, { types: null, lastEventId: 'r.10' });
    for (let i = 0; i < 20; i++) publish(hub);
    sink.resume();
    for (let round = 0; round < 200 && sink.ids().length < 110; round++) await settle();
    publish(hub);
    const expected = Array.from({ length: 111 }, (_, i) => `r.${i + 11}`);
    expect(sink.ids()).to.deep.equal(expected);
  });

  it('lets other work run between slices of a replay, even to a reader that takes everything at once', async () => {
    const { hub, streams } = setup({ historySize: 2000 });
    for (let i = 0; i < 2000; i++) publish(hub);
    const sink = new Sink();
    streams.open(sink, { types: null, lastEventId: 'r.0' });
    const bytes = () => sink.chunks.reduce((sum, chunk) => sum + chunk.length, 0);
    // The retry hint and one slice, not the 2000 events (about 170 KB) in one go.
    expect(bytes()).to.be.at.most(SLICE_BYTES + 100);
    // An API request's turn comes while the replay is still under way.
    const midway = await new Promise<number>((resolve) =>
      setImmediate(() => resolve(sink.ids().length)),
    );
    expect(midway).to.be.above(0).and.below(2000);
    for (let round = 0; round < 1000 && sink.ids().length < 2000; round++) await settle();
    expect(sink.ids()).to.deep.equal(Array.from({ length: 2000 }, (_, i) => `r.${i + 1}`));
  });

  // Issue 30's kernel test: 64 streams replaying to raw sockets that never read (loopback takes
  // megabytes each) wrote a slice each per turn, and an admin's POST /api/peer waited 16 s.
  it('writes at most TURN_BYTES of replays per turn of the event loop however many streams replay, each stream in turn, every one in order to its end', async () => {
    const { hub, streams } = setup({ historySize: 2000 });
    for (let i = 0; i < 2000; i++) publish(hub);
    const sinks = Array.from({ length: 16 }, () => new Sink());
    for (const sink of sinks) streams.open(sink, { types: null, lastEventId: 'r.0' });
    const written = () =>
      sinks.map((sink) => sink.chunks.reduce((sum, chunk) => sum + chunk.length, 0));
    const total = () => written().reduce((a, b) => a + b, 0);
    let before = total();
    let turns = 0;
    while (sinks.some((sink) => sink.ids().length < 2000) && turns < 10_000) {
      await settle();
      const now = total();
      // The last stream of a turn may start below the budget and write a whole slice.
      expect(now - before, `turn ${turns}`).to.be.at.most(TURN_BYTES + SLICE_BYTES);
      before = now;
      turns += 1;
      if (turns === 20) {
        // Every stream has had its turns by now: none waits for the others to finish.
        for (const bytes of written()) expect(bytes).to.be.above(SLICE_BYTES);
      }
    }
    const expected = Array.from({ length: 2000 }, (_, i) => `r.${i + 1}`);
    for (const sink of sinks) expect(sink.ids()).to.deep.equal(expected);
  });

  // Issue 30's kernel test: 64 streams opened in one turn (a burst of 200 raw sockets) wrote a
  // slice each in that turn, between two steps of an admin's request.
  it('writes nothing of a replay from open: a burst of streams opened in one turn writes their retry hints in it, then at most TURN_BYTES (and one slice) per turn', async () => {
    const { hub, streams } = setup({ historySize: 2000, maxStreams: 64 });
    for (let i = 0; i < 2000; i++) publish(hub);
    const sinks = Array.from({ length: 64 }, () => new Sink());
    for (const sink of sinks) streams.open(sink, { types: null, lastEventId: 'r.0' });
    const total = () =>
      sinks.reduce((sum, sink) => sum + sink.chunks.reduce((s, c) => s + c.length, 0), 0);
    expect(total()).to.equal(64 * 'retry: 2000\n\n'.length);
    let before = total();
    for (let turn = 0; turn < 50; turn++) {
      await settle();
      expect(total() - before, `turn ${turn}`).to.be.at.most(TURN_BYTES + SLICE_BYTES);
      before = total();
    }
    expect(before).to.be.above(64 * 'retry: 2000\n\n'.length);
  });

  it('answers at most ADMISSIONS_PER_TURN stream requests per turn of the event loop, in arrival order, none in the turn that asked', async () => {
    const { streams } = setup();
    const answered: number[] = [];
    for (let i = 0; i < 3 * ADMISSIONS_PER_TURN + 2; i++) streams.admit(() => answered.push(i));
    await settle();
    expect(answered).to.deep.equal([]);
    expect(streams.waiting).to.equal(3 * ADMISSIONS_PER_TURN + 2);
    // Requests still arriving: the first turn waits ARRIVAL_GAP_MS (the burst is read first).
    clock.tick(ARRIVAL_GAP_MS);
    const counts: number[] = [answered.length];
    for (let turn = 1; turn < 5; turn++) {
      await settle();
      counts.push(answered.length);
    }
    expect(counts).to.deep.equal([
      ADMISSIONS_PER_TURN,
      2 * ADMISSIONS_PER_TURN,
      3 * ADMISSIONS_PER_TURN,
      3 * ADMISSIONS_PER_TURN + 2,
      3 * ADMISSIONS_PER_TURN + 2,
    ]);
    expect(answered).to.deep.equal(
      Array.from({ length: 3 * ADMISSIONS_PER_TURN + 2 }, (_, i) => i),
    );
    expect(streams.waiting).to.equal(0);
  });

  it('ends a turn once TURN_MS went by, having answered one request and written one slice at least: a slow machine keeps its turns short too', async () => {
    let now = 0;
    const { hub, streams } = setup({ historySize: 2000, maxStreams: 64, clock: () => now });
    for (let i = 0; i < 2000; i++) publish(hub);
    // Each answer takes TURN_MS / 2 of the clock: two per turn, then the turn ends.
    const answered: number[] = [];
    for (let i = 0; i < 8; i++) {
      streams.admit(() => {
        now += TURN_MS / 2;
        answered.push(i);
      });
    }
    const sinks = Array.from({ length: 8 }, () => new Sink());
    for (const sink of sinks) streams.open(sink, { types: null, lastEventId: 'r.0' });
    const total = () =>
      sinks.reduce((sum, sink) => sum + sink.chunks.reduce((s, c) => s + c.length, 0), 0);
    let before = total();
    const counts: number[] = [];
    // The requests stopped arriving ARRIVAL_GAP_MS ago: the turns come on every turn of the loop.
    now += ARRIVAL_GAP_MS;
    for (let turn = 0; turn < 4; turn++) {
      if (turn === 0) clock.tick(ARRIVAL_GAP_MS);
      else await settle();
      counts.push(answered.length);
      // The time went to the answers: one slice of one stream, not TURN_BYTES of them.
      expect(total() - before, `turn ${turn}`)
        .to.be.above(0)
        .and.at.most(SLICE_BYTES);
      before = total();
    }
    expect(counts).to.deep.equal([2, 4, 6, 8]);
    // With the clock standing still, a turn writes up to TURN_BYTES again.
    await settle();
    expect(total() - before).to.be.above(SLICE_BYTES);
  });

  // Issue 30's kernel test: with one turn of stream work every 20 ms while it ran, an admin's
  // POST /api/peer sent into a burst of 200 resuming streams took 1.4-1.7 s in the VM.
  it('pauses while an API request is in flight: no stream request is answered and no slice of a replay written until the last one ends, then the turns come on every turn of the loop again', async () => {
    const { hub, streams } = setup({ historySize: 2000 });
    for (let i = 0; i < 2000; i++) publish(hub);
    const sink = new Sink();
    streams.open(sink, { types: null, lastEventId: 'r.0' });
    const answered: number[] = [];
    for (let i = 0; i < 3 * ADMISSIONS_PER_TURN; i++) streams.admit(() => answered.push(i));
    const done = [streams.apiRequest(), streams.apiRequest()];
    const hint = sink.chunks.length;
    clock.tick(ARRIVAL_GAP_MS);
    for (let round = 0; round < 5; round++) await settle();
    clock.tick(MAX_PAUSE_MS - ARRIVAL_GAP_MS - 1);
    await settle();
    expect(answered).to.have.length(0);
    expect(sink.chunks).to.have.length(hint);
    done[0]!();
    done[0]!(); // once only
    await settle();
    expect(answered).to.have.length(0);
    done[1]!();
    await settle();
    expect(answered).to.have.length(ADMISSIONS_PER_TURN);
    expect(sink.chunks.length).to.be.above(hint);
    await settle();
    expect(answered).to.have.length(2 * ADMISSIONS_PER_TURN);
  });

  it('a pause lasts MAX_PAUSE_MS at most: under API requests that never end, one turn (one answer and one slice at least) every MAX_PAUSE_MS, each pause counted from the last turn', async () => {
    const { hub, streams } = setup({ historySize: 2000 });
    for (let i = 0; i < 2000; i++) publish(hub);
    const sink = new Sink();
    streams.open(sink, { types: null, lastEventId: 'r.0' });
    const answered: number[] = [];
    streams.apiRequest(); // never ends
    for (let i = 0; i < 3 * ADMISSIONS_PER_TURN; i++) streams.admit(() => answered.push(i));
    const slices = () => sink.chunks.length;
    const counts: Array<[number, number]> = [];
    for (let pause = 0; pause < 3; pause++) {
      clock.tick(MAX_PAUSE_MS - 1);
      for (let round = 0; round < 3; round++) await settle();
      counts.push([answered.length, slices()]);
      clock.tick(1);
      counts.push([answered.length, slices()]);
    }
    const [a0, s0] = counts[0]!;
    expect(a0).to.equal(0);
    expect(s0).to.equal(1); // the retry hint
    for (let pause = 0; pause < 3; pause++) {
      const [before, beforeSlices] = counts[2 * pause]!;
      const [after, afterSlices] = counts[2 * pause + 1]!;
      expect(after, `pause ${pause}`).to.equal(before + ADMISSIONS_PER_TURN);
      expect(afterSlices, `pause ${pause}`).to.equal(beforeSlices + 1);
    }
  });

  it('an API request that begins while a turn is due (scheduled, not yet run) holds that turn too', async () => {
    const { streams } = setup();
    const answered: number[] = [];
    streams.admit(() => answered.push(0));
    clock.tick(ARRIVAL_GAP_MS - 1);
    const done = streams.apiRequest();
    clock.tick(1); // the turn's time came: it waits for the API request
    await settle();
    expect(answered).to.deep.equal([]);
    done();
    await settle();
    expect(answered).to.deep.equal([0]);
    expect(clock.countTimers()).to.equal(0);
  });

  it('pauses while a burst of stream requests is still arriving (each within ARRIVAL_GAP_MS of the last), so that an API request among or behind it is read first; a burst that never ends is answered a turn every MAX_PAUSE_MS', async () => {
    const { streams } = setup();
    const answered: number[] = [];
    let sent = 0;
    const arrive = () => streams.admit(() => answered.push(sent++));
    arrive();
    // One request every ARRIVAL_GAP_MS - 1: the burst goes on.
    for (let t = ARRIVAL_GAP_MS - 1; t < MAX_PAUSE_MS; t += ARRIVAL_GAP_MS - 1) {
      clock.tick(ARRIVAL_GAP_MS - 1);
      await settle();
      expect(answered, `at ${t} ms`).to.have.length(0);
      arrive();
    }
    clock.tick(
      MAX_PAUSE_MS - Math.floor(MAX_PAUSE_MS / (ARRIVAL_GAP_MS - 1)) * (ARRIVAL_GAP_MS - 1),
    );
    await settle();
    expect(answered).to.have.length(ADMISSIONS_PER_TURN);
    // The burst ends: ARRIVAL_GAP_MS after its last request, the turns come on every turn again.
    const waiting = streams.waiting;
    clock.tick(ARRIVAL_GAP_MS);
    for (let round = 0; round < 5; round++) await settle();
    expect(streams.waiting).to.equal(0);
    expect(answered).to.have.length(ADMISSIONS_PER_TURN + waiting);
  });

  it('an answer that throws is logged; the other requests of its turn are answered still', async () => {
    const { streams, warnings } = setup();
    const answered: string[] = [];
    streams.admit(() => answered.push('a'));
    streams.admit(() => {
      throw new Error('boom');
    });
    streams.admit(() => answered.push('c'));
    clock.tick(ARRIVAL_GAP_MS);
    expect(answered).to.deep.equal(['a', 'c']);
    expect(warnings).to.have.length(1);
    expect(warnings[0]).to.include({ event: 'event_stream_admission_failed' });
  });

  it('a replaying reader the history runs away from is closed as a slow reader at its next slice, logged and counted', async () => {
    const { hub, streams, slow, warnings } = setup({ maxBufferedBytes: 2048, historySize: 50 });
    for (let i = 0; i < 50; i++) publish(hub);
    const sink = new Sink();
    sink.stall();
    streams.open(sink, { types: null, lastEventId: 'r.0' });
    // 50 more events push what it still owes out of the history; it has nothing more of it yet.
    for (let i = 0; i < 50; i++) publish(hub);
    expect(sink.destroyed).to.equal(false);
    sink.resume();
    await settle();
    expect(sink.destroyed).to.equal(true);
    expect(slow()).to.equal(1);
    expect(warnings[0]).to.include({ event: 'event_stream_slow_reader' });
    expect(warnings).to.have.length(1);
  });

  it('a resume older than the history byte bound is one reset, whatever --event-history says', () => {
    const { hub, streams } = setup({ historySize: 1000, maxHistoryBytes: 2000 });
    for (let i = 0; i < 100; i++) publish(hub);
    const sink = new Sink();
    streams.open(sink, { types: null, lastEventId: 'r.1' });
    expect(sink.events()).to.deep.equal(['reset']);
    expect(sink.text()).to.match(
      /no longer in the history \(it keeps 1000 events, at most 2000 bytes\)/,
    );
  });

  it('opens at most maxStreams streams: one more is refused and counted, room comes back on close', async () => {
    const { streams, refused } = setup({ maxStreams: 2 });
    const sinks = [new Sink(), new Sink()];
    for (const sink of sinks) streams.open(sink, { types: null });
    expect(streams.full).to.equal(true);
    expect(() => streams.open(new Sink(), { types: null })).to.throw(
      EventStreamsFullError,
      '2 event streams are open, the most --max-event-streams allows',
    );
    expect(refused()).to.equal(1);
    sinks[0]!.destroy();
    await settle();
    expect(streams.full).to.equal(false);
    streams.open(new Sink(), { types: null });
    expect(streams.size).to.equal(2);
  });

  it('with maxStreams 0 (--max-connections 1) refuses every stream, saying they are off', () => {
    const { streams } = setup({ maxStreams: 0 });
    expect(streams.full).to.equal(true);
    expect(() => streams.open(new Sink(), { types: null })).to.throw(
      EventStreamsFullError,
      'Event streams are off on this daemon (--max-event-streams 0)',
    );
  });

  it('closes a stream whose reader left bytes untaken for the stall bound, logs and counts it', () => {
    const { hub, streams, stalled, open, warnings } = setup({
      stallMs: 60_000,
      maxBufferedBytes: 1 << 20,
    });
    const stuck = new Sink();
    const reading = new Sink();
    streams.open(stuck, { types: null });
    streams.open(reading, { types: null });
    stuck.stall();
    // Enough to pass the sink's own buffer: what it holds is not taken.
    for (let i = 0; i < 20; i++) publish(hub);
    expect(stuck.writableLength).to.be.above(0);
    clock.tick(59_000);
    expect(stuck.destroyed).to.equal(false);
    clock.tick(6_000);
    expect(stuck.destroyed).to.equal(true);
    expect(reading.destroyed).to.equal(false);
    expect(stalled()).to.equal(1);
    expect(open()).to.equal(1);
    expect(warnings).to.have.length(1);
    expect(warnings[0]).to.include({ event: 'event_stream_stalled', stallMs: 60_000 });
  });

  it('closeAll ends every stream (shutdown)', () => {
    const { streams } = setup();
    const sink = new Sink();
    streams.open(sink, { types: null });
    streams.closeAll();
    expect(sink.writableEnded).to.equal(true);
    expect(streams.size).to.equal(0);
  });

  it('a stream request answered after closeAll (it waited for its turn) gets a stream that ends at once', async () => {
    const { streams } = setup();
    const sink = new Sink();
    streams.admit(() => streams.open(sink, { types: null }));
    streams.closeAll();
    clock.tick(ARRIVAL_GAP_MS);
    expect(sink.writableEnded).to.equal(true);
    expect(streams.size).to.equal(0);
    expect(clock.countTimers()).to.equal(0);
  });
});
