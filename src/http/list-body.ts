/**
 * The body of GET /api/peers, built once per kernel read (DESIGN §5, issue 8): from a PeerSnapshot
 * and a filter, the finished response bytes, memoized on the snapshot object, and compressed once
 * per encoding. Every request that shares the read (in flight or within the freshness window)
 * gets the same bytes; a request that arrives while a body is being built joins that build.
 *
 * Each peer is written from its view (src/peers/view.ts: `viewOf`). The bytes are exactly
 * what the test oracle gives (test/support/peer-list.ts: plain objects through JSON.stringify,
 * derived without the view), and the unit tests hold the two equal, so a field added to the
 * view must be written in `peerJson` below (the one place that lists the fields) and in the
 * oracle, or the tests fail.
 *
 * A partial body (issue 29, `?fields=`: schemas.ts parses and normalizes the field set) is built
 * the same way, once per read, filter and field set: each peer's piece is its fragment's view
 * written through the field set's writers (PEER_WRITERS, CAP_WRITERS: the fields a second time,
 * held equal to `peerJson` by test/unit/http/list-fields.test.ts) and memoized on the fragment.
 * At most MAX_FIELD_SETS_PER_READ field sets keep bodies per read, so no client makes the
 * daemon keep an unbounded number of bodies.
 *
 * Issue 29, a capped host at rest: a read that shows what the last body was built from (the
 * same peer objects, maps and caps' instant, before any peer's status or minute moves) is
 * answered with that body without visiting a peer (PreviousBodies); and the caps' instant
 * (`data_cap.read_at`, one per read) is written into each body rather than into each peer's
 * fragment, so a read of the caps whose figures did not move writes no peer's JSON again.
 */
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import {
  PEERS_PER_SLICE,
  capsReadAtOf,
  currentApartFromReadAt,
  inSlices,
  limitOf,
  planFields,
  statusChangesAt,
  stillCurrent,
  viewOf,
  type CapPlan,
  type FilterStatus,
  type PeerSnapshot,
  type PeerView,
} from '../peers';

import type { FieldSet } from './schemas';

export { PEERS_PER_SLICE } from '../peers';

/** A peer as the snapshot holds it (the http layer names no kernel module). */
type SnapshotPeer = PeerSnapshot['device']['peers'][number];

export type ListFilter = FilterStatus | null;
export type BodyEncoding = 'identity' | 'gzip' | 'br';
const ALL_ENCODINGS: ReadonlySet<BodyEncoding> = new Set(['identity', 'gzip', 'br']);

const gzip = promisify(zlib.gzip);
const brotli = promisify(zlib.brotliCompress);

/**
 * Compression runs on libuv's thread pool (async zlib), so it never blocks the event loop, but a
 * request for a compressed body waits for it once per read. Both at their fastest level: on a
 * 3.7 MB 10,000-peer body (one host run, alternating): gzip -1 79 ms → 0.39 MB, gzip -6 184 ms
 * → 0.32 MB, br q1 75 ms → 0.33 MB, br q5 1,000 ms → 0.27 MB (br's default, 11, takes seconds).
 */
export const GZIP_OPTIONS: zlib.ZlibOptions = { level: 1 };
export const BROTLI_OPTIONS: zlib.BrotliOptions = {
  params: {
    [zlib.constants.BROTLI_PARAM_QUALITY]: 1,
    [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT,
  },
};

/** Characters JSON.stringify would escape: '"', '\\', controls and lone surrogates. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what JSON escapes
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** A JSON string literal; JSON.stringify only when something could need escaping. */
function quoted(text: string): string {
  return NEEDS_ESCAPE.test(text) ? JSON.stringify(text) : `"${text}"`;
}

/** JSON for a number or null, as JSON.stringify writes them (finite numbers only occur here). */
function numberOrNull(value: number | null): string {
  return value === null ? 'null' : String(value);
}

/** The plan fields of a data cap, after `enforced` (text the daemon itself formats). */
function planJson(plan: CapPlan | null | undefined): string {
  if (!plan) {
    return ',"period":null,"period_start":null,"next_reset":null,"previous_period_used_bytes":null';
  }
  const fields = planFields(plan);
  return (
    `,"period":"${fields.period}","period_start":"${fields.periodStart}"` +
    `,"next_reset":"${fields.nextReset}"` +
    `,"previous_period_used_bytes":${numberOrNull(fields.previousPeriodUsedBytes)}`
  );
}

/**
 * One peer, fields in the order of the test oracle's (test/support/peer-list.ts). No escaping is needed for what the
 * kernel decoder produces: public keys are base64 ([A-Za-z0-9+/=]), tunnel addresses dotted
 * decimal or hexadecimal-colon, allowed IPs "address/cidr" in dotted or hexadecimal-colon text, handshakes ISO 8601
 * from Date#toISOString, statuses constants, counters numbers. The endpoint is text the snapshot
 * carries verbatim, so it goes through `quoted` (a cheap test, JSON.stringify if ever needed).
 */

/** An expiry as the list writes it (issue 31): ISO 8601 in UTC, or null. */
function expiresAtJson(at: number | null): string {
  return at === null ? 'null' : `"${new Date(at).toISOString()}"`;
}
function peerJson(view: PeerView): string {
  const { peer, ip, status, minutesSinceHandshake, cap, suspended } = view;
  const limit = limitOf(view.limit);
  let allowed = '';
  for (const prefix of peer.allowedIps) {
    allowed += `${allowed === '' ? '' : ','}"${prefix.address}/${prefix.cidr}"`;
  }
  return (
    `{"public_key":"${peer.publicKey}"` +
    `,"ip_address":${ip === null ? 'null' : `"${ip}"`}` +
    `,"ipv6_address":${view.ip6 === null ? 'null' : `"${view.ip6}"`}` +
    `,"last_handshake":${peer.lastHandshake === null ? 'null' : `"${peer.lastHandshake.toISOString()}"`}` +
    `,"minutes_since_handshake":${numberOrNull(minutesSinceHandshake)}` +
    `,"status":"${status}"` +
    `,"allowed_ips":[${allowed}]` +
    `,"endpoint":${peer.endpoint === null ? 'null' : quoted(peer.endpoint)}` +
    `,"rx_bytes":${peer.rxBytes}` +
    `,"tx_bytes":${peer.txBytes}` +
    `,"persistent_keepalive_seconds":${peer.persistentKeepalive}` +
    `,"preshared_key":${peer.presharedKey === true}` +
    `,"speed_limit_bytes_per_second":${numberOrNull(limit.rate)}` +
    `,"speed_limit_holds":${limit.holds === null ? 'null' : `"${limit.holds}"`}` +
    `,"data_cap":${cap === null ? 'null' : capJson(cap, view)}` +
    `,"suspended":${suspended}` +
    `,"name":${view.name === null ? 'null' : JSON.stringify(view.name)}` +
    `,"expires_at":${expiresAtJson(view.expiresAt)},"expired":${view.expired}` +
    '}'
  );
}

/** JSON text of a string the daemon formats itself (no escaping needed), or null. */
function textOrNull(value: string | null): string {
  return value === null ? 'null' : `"${value}"`;
}

type PeerWriter = (view: PeerView) => string;
type Cap = NonNullable<PeerView['cap']>;
type CapWriter = (cap: Cap, view: PeerView) => string;

/**
 * Each field of a partial response (issue 29, `?fields=`), the value as `peerJson` writes it.
 * A second listing of the fields, kept apart so that the full body's writer stays one template:
 * the unit tests hold every field of the schema (schemas.ts, the names `fields` takes) to a
 * writer here, and the projection of every field to `peerJson`'s bytes.
 */
export const PEER_WRITERS: Readonly<Record<string, PeerWriter>> = {
  public_key: (v) => `"${v.peer.publicKey}"`,
  ip_address: (v) => textOrNull(v.ip),
  ipv6_address: (v) => textOrNull(v.ip6),
  last_handshake: (v) =>
    v.peer.lastHandshake === null ? 'null' : `"${v.peer.lastHandshake.toISOString()}"`,
  minutes_since_handshake: (v) => numberOrNull(v.minutesSinceHandshake),
  status: (v) => `"${v.status}"`,
  allowed_ips: (v) => `[${v.peer.allowedIps.map((p) => `"${p.address}/${p.cidr}"`).join(',')}]`,
  endpoint: (v) => (v.peer.endpoint === null ? 'null' : quoted(v.peer.endpoint)),
  rx_bytes: (v) => String(v.peer.rxBytes),
  tx_bytes: (v) => String(v.peer.txBytes),
  persistent_keepalive_seconds: (v) => String(v.peer.persistentKeepalive),
  preshared_key: (v) => String(v.peer.presharedKey === true),
  speed_limit_bytes_per_second: (v) => numberOrNull(limitOf(v.limit).rate),
  speed_limit_holds: (v) => textOrNull(limitOf(v.limit).holds),
  data_cap: (v) => (v.cap === null ? 'null' : capJson(v.cap, v)),
  suspended: (v) => String(v.suspended),
  name: (v) => (v.name === null ? 'null' : JSON.stringify(v.name)),
  expires_at: (v) => expiresAtJson(v.expiresAt),
  expired: (v) => String(v.expired),
};

/** Each field of a peer's `data_cap` object (`data_cap.<field>`), as `capJson` writes it. */
export const CAP_WRITERS: Readonly<Record<string, CapWriter>> = {
  quota_bytes: (c) => String(c.quotaBytes),
  used_bytes: (c) => String(c.usedBytes),
  enforced: (c) => String(c.enforced),
  period: (c) => textOrNull(planFields(c.plan).period),
  period_start: (c) => textOrNull(planFields(c.plan).periodStart),
  next_reset: (c) => textOrNull(planFields(c.plan).nextReset),
  previous_period_used_bytes: (c) => numberOrNull(planFields(c.plan).previousPeriodUsedBytes),
  after_cap: (c) => ((c.throttleBytesPerSecond ?? null) === null ? '"block"' : '"throttle"'),
  throttle_bytes_per_second: (c) => numberOrNull(c.throttleBytesPerSecond ?? null),
  exhausted_at: (_c, v) =>
    v.exhaustedAt === null ? 'null' : `"${new Date(v.exhaustedAt).toISOString()}"`,
  throttled: (c) => String(c.throttled === true),
  read_at: (_c, v) => isoOrNull(v.capReadAt),
};

function writerNamed<W>(writers: Readonly<Record<string, W>>, name: string): W {
  const writer = writers[name];
  if (writer === undefined) throw new Error(`no writer for the list field ${name}`);
  return writer;
}

/**
 * The JSON of one peer restricted to a field set: the fields in the body's order; `data_cap`
 * restricted to its listed fields, and `null` for a peer without a cap whatever is listed
 * within it (the full body's `null`, projected: a cap-less peer is told apart from a cap).
 */
function partialWriter(fields: FieldSet): PeerWriter {
  const steps = fields.fields.map((name, i): [string, PeerWriter] => {
    const prefix = `${i === 0 ? '{' : ','}"${name}":`;
    const within = fields.capFields;
    if (name !== 'data_cap' || within === null) return [prefix, writerNamed(PEER_WRITERS, name)];
    const capSteps = within.map((field, j): [string, CapWriter] => [
      `${j === 0 ? '{' : ','}"${field}":`,
      writerNamed(CAP_WRITERS, field),
    ]);
    return [
      prefix,
      (view) => {
        const cap = view.cap;
        if (cap === null) return 'null';
        let out = '';
        for (const [head, write] of capSteps) out += head + write(cap, view);
        return `${out}}`;
      },
    ];
  });
  return (view) => {
    let out = '';
    for (const [head, write] of steps) out += head + write(view);
    return `${out}}`;
  };
}

/**
 * One field set's pieces: a peer's partial JSON, memoized on its full fragment (which stays the
 * same object while the peer's view is current, so an idle peer's piece is written once), and
 * the last body per filter (PreviousBodies: an idle device's partial body is the same Buffer
 * read after read, and compressed once).
 */
export class Projection {
  readonly previous = new PreviousBodies();
  private readonly pieces = new WeakMap<Fragment, Piece>();
  private readonly write: PeerWriter;
  /** Whether its pieces show `data_cap.read_at` (the whole `data_cap`, or that field of it). */
  readonly showsReadAt: boolean;

  constructor(readonly fields: FieldSet) {
    this.write = partialWriter(fields);
    this.showsReadAt =
      fields.fields.includes('data_cap') &&
      (fields.capFields === null || fields.capFields.includes('read_at'));
  }

  /** The partial JSON of a peer's view (for the tests: what pieceOf writes). */
  json(view: PeerView): string {
    return this.write(view);
  }

  pieceOf(fragment: Fragment): Piece {
    const known = this.pieces.get(fragment);
    if (known !== undefined) return known;
    piecesWritten += 1;
    const json = this.write(fragment.view);
    const bytes = Buffer.byteLength(json, 'utf8');
    const piece: Piece = { json, bytes, readAt: readAtOffset(json, bytes) };
    this.pieces.set(fragment, piece);
    return piece;
  }
}

/**
 * A peer's JSON as built for an earlier snapshot, with the view it was built from. The kernel
 * layer hands out the very same peer object for a peer whose dump entry did not change between
 * reads (DumpMemo, src/kernel/wireguard-dump.ts), so an idle peer's JSON is built once and
 * reused by every later body, as long as its view is still current (`stillCurrent`: the minute of its
 * handshake age and its status, as time moves; its speed limit and its data cap, read from
 * other facilities).
 */
/** A peer's JSON in a body, full or partial, with its length in UTF-8 bytes. */
interface Piece {
  json: string;
  bytes: number;
  /**
   * Where its `data_cap.read_at` instant's 24 characters start, in bytes from its start; -1:
   * none (no cap, `read_at` not among its fields, or an instant outside years 0-9999). Each body
   * writes its own read's instant there (ReadAtStamp), so a piece stays valid across reads of the
   * caps that changed nothing else of its peer (issue 29).
   */
  readAt: number;
}

const READ_AT_KEY = '"read_at":"';
/** The length of an instant's ISO 8601 text in years 0-9999 (Date#toISOString). */
const ISO_LENGTH = 24;
/** The first and last instants, ms since the epoch, whose ISO text has ISO_LENGTH characters. */
const ISO_FIRST = -62_167_219_200_000; // 0000-01-01T00:00:00.000Z
const ISO_LAST = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z

function fixedIso(at: number | null): boolean {
  return at === null || (at >= ISO_FIRST && at <= ISO_LAST);
}

/**
 * Where a piece's `read_at` instant starts (Piece.readAt). The first `"read_at":"` of a peer's
 * JSON is its cap's: no other field is named so, and inside a JSON string every quote is
 * escaped, so no string value holds that text.
 */
function readAtOffset(json: string, bytes: number): number {
  const key = json.indexOf(READ_AT_KEY);
  if (key < 0) return -1;
  const start = key + READ_AT_KEY.length;
  if (json.charCodeAt(start + ISO_LENGTH) !== 0x22) return -1; // not 24 characters and '"'
  return bytes === json.length ? start : Buffer.byteLength(json.slice(0, start), 'utf8');
}

/**
 * The instant a body writes as every capped peer's `read_at` (capsReadAtOf), and its text as
 * bytes; `bytes` null when no peer has a cap or the instant's text is not ISO_LENGTH long (then
 * a fragment is reused only with this very instant, `stillCurrent`, and nothing is stamped).
 */
interface ReadAtStamp {
  at: number | null;
  bytes: Buffer | null;
}

function readAtStampOf(snapshot: PeerSnapshot): ReadAtStamp {
  if (snapshot.caps.size === 0) return { at: null, bytes: null };
  const at = capsReadAtOf(snapshot);
  if (!fixedIso(at)) return { at, bytes: null };
  return { at, bytes: Buffer.from(new Date(at).toISOString(), 'latin1') };
}

interface Fragment extends Piece {
  /** The peer's JSON as text, only between its writing (`written`) and the first body it goes
   * into; then '' (issue 29): its bytes live in that body alone (`body`, `offset`), and the next
   * body copies them from there, so the daemon never holds every peer's JSON twice (33 MB of
   * text beside the 33 MB body at 50,000 capped peers). Never a Buffer of its own: 50,000 small
   * Buffers are slices of Node's 8 KiB pools, and one live fragment keeps its whole pool alive.
   * Written when a full body first needs it: a read answered only with partial bodies
   * (`?fields=`) writes no peer's full JSON. */
  json: string;
  /** Its length in UTF-8 bytes; equal to json.length when it is ASCII (always, in practice);
   * -1 until the JSON is written. */
  bytes: number;
  /** The view it was written from. Its `capReadAt` is the instant of the read that made the
   * fragment: a later read of the caps that changed nothing else keeps the fragment, and each
   * body writes its own instant into it (Piece.readAt). */
  view: PeerView;
  /** The body its JSON was last written into, and at which offset; null before the first. A
   * body is let go once no fragment's bytes are in it any longer (every later body of all the
   * peers moves them all). */
  body: Buffer | null;
  offset: number;
}

/** Peers' JSON written since start, full or partial (for the tests: what a build wrote anew). */
let piecesWritten = 0;
export function peerPiecesWritten(): number {
  return piecesWritten;
}

/** The fragment with its full JSON written (once per fragment). */
function written(fragment: Fragment): Fragment {
  if (fragment.bytes < 0) {
    piecesWritten += 1;
    fragment.json = peerJson(fragment.view);
    fragment.bytes = Buffer.byteLength(fragment.json, 'utf8');
    fragment.readAt = readAtOffset(fragment.json, fragment.bytes);
  }
  return fragment;
}

/**
 * Writes a piece at `offset` of `body`, returning its length: a partial piece from its text; a
 * fragment from the body it was last written into (or its text, the first time), after which
 * its bytes are this body's; then this body's `read_at` instant (`stamp`) over the piece's.
 */
function writePiece(
  piece: Piece | Fragment,
  body: Buffer,
  offset: number,
  stamp: Buffer | null,
): number {
  if (!('body' in piece)) {
    body.write(piece.json, offset, piece.bytes === piece.json.length ? 'latin1' : 'utf8');
  } else {
    if (piece.body === null) {
      body.write(piece.json, offset, piece.bytes === piece.json.length ? 'latin1' : 'utf8');
    } else {
      piece.body.copy(body, offset, piece.offset, piece.offset + piece.bytes);
    }
    piece.body = body;
    piece.offset = offset;
    piece.json = '';
  }
  if (stamp !== null && piece.readAt >= 0) body.set(stamp, offset + piece.readAt);
  return piece.bytes;
}

/**
 * The end (exclusive) of the run of parts from `first` that lie one after another in the same
 * earlier body, a comma between each two (as a body writes them): first + 1 at least.
 */
function runFrom(parts: readonly Piece[], first: number): number {
  const piece = parts[first]!;
  if (!('body' in piece) || (piece as Fragment).body === null) return first + 1;
  const source = (piece as Fragment).body;
  let end = (piece as Fragment).offset + piece.bytes;
  let next = first + 1;
  for (; next < parts.length; next++) {
    const fragment = parts[next] as Fragment;
    if (fragment.body !== source || fragment.offset !== end + 1) break;
    end = fragment.offset + fragment.bytes;
  }
  return next;
}

/**
 * Moves the run of fragments parts[first..end) (runFrom) into `body` at `offset` with one copy
 * of their bytes and the commas between them, then writes this body's `read_at` instant into
 * each; returns the bytes written. An idle device's body is then one copy of the last body's
 * peers (and one small write per capped peer after a read of the caps), not one per peer.
 */
function moveRun(
  parts: readonly Fragment[],
  first: number,
  end: number,
  body: Buffer,
  offset: number,
  stamp: Buffer | null,
): number {
  const head = parts[first]!;
  const last = parts[end - 1]!;
  const source = head.body!;
  const from = head.offset;
  const to = last.offset + last.bytes;
  source.copy(body, offset, from, to);
  for (let i = first; i < end; i++) {
    const fragment = parts[i]!;
    fragment.offset = offset + (fragment.offset - from);
    fragment.body = body;
    if (stamp !== null && fragment.readAt >= 0) body.set(stamp, fragment.offset + fragment.readAt);
  }
  return to - from;
}

/** Where a peer's full JSON is held (for the tests): as text, in a body, or not written. */
export function fragmentHolding(peer: SnapshotPeer): 'text' | 'body' | null {
  const fragment = fragments.get(peer);
  if (fragment === undefined || fragment.bytes < 0) return null;
  return fragment.body === null ? 'text' : 'body';
}

/** Fragments by peer object: an entry goes with its peer, once no snapshot holds it. */
const fragments = new WeakMap<SnapshotPeer, Fragment>();

/**
 * The peer's fragment (its view, and its `peerJson` once written), from the memo when its view
 * is still current, but for the instant its caps were read when the body writes that instant
 * itself (`stamp.bytes`; both instants ISO_LENGTH long).
 */
function fragmentOf(
  peer: SnapshotPeer,
  snapshot: PeerSnapshot,
  filter: ListFilter,
  stamp: ReadAtStamp,
): Fragment | null {
  const known = fragments.get(peer);
  if (
    known !== undefined &&
    (stamp.bytes !== null && fixedIso(known.view.capReadAt)
      ? currentApartFromReadAt(known.view, snapshot)
      : stillCurrent(known.view, snapshot))
  ) {
    return filter !== null && known.view.status !== filter ? null : known;
  }
  // The tunnel address depends on the peer object alone: known once its fragment is.
  const view = viewOf(peer, snapshot, known === undefined ? undefined : known.view.ip);
  if (filter !== null && view.status !== filter) return null;
  const fragment: Fragment = { json: '', bytes: -1, readAt: -1, view, body: null, offset: 0 };
  fragments.set(peer, fragment);
  return fragment;
}

/**
 * Builds the body in slices of PEERS_PER_SLICE peers, yielding to the event loop between slices
 * so that requests arriving during a 50,000-peer build are accepted (and join this build).
 * Slices rather than a worker thread (not measured): a worker would need the snapshot sent to
 * it by structured clone, itself a walk over every peer much like serializing it, and the body
 * sent back. The slices gather each peer's fragment (built, or reused from an earlier body);
 * the body is then one allocation the fragments are written into, commas between them: latin1
 * (a byte per character) for ASCII fragments, as UTF-8 would write them. Writing bytes is what
 * a warm build costs; encoding one 3.5 MB string instead was several times slower (V8 flattens
 * the concatenation first).
 */
export async function buildListBody(
  snapshot: PeerSnapshot,
  filter: ListFilter,
  peersPerSlice = PEERS_PER_SLICE,
  previous: PreviousBodies | null = null,
  projection: Projection | null = null,
): Promise<Buffer> {
  const stamp = readAtStampOf(snapshot);
  // A field set without `read_at` shows nothing of the caps' instant.
  const readAt = projection === null || projection.showsReadAt ? stamp.at : null;
  const unchanged = previous === null ? null : previous.unchanged(filter, snapshot, readAt);
  if (unchanged !== null) return unchanged;
  const parts: Piece[] = [];
  let size = 0;
  const takenAt = snapshot.takenAt;
  let until = Infinity;
  await inSlices(
    snapshot.device.peers,
    (peer) => {
      const changes = statusChangesAt(peer.lastHandshake, takenAt);
      if (changes < until) until = changes;
      const fragment = fragmentOf(peer, snapshot, filter, stamp);
      if (fragment === null) return;
      const piece = projection === null ? written(fragment) : projection.pieceOf(fragment);
      parts.push(piece);
      size += piece.bytes;
    },
    { perSlice: peersPerSlice },
  );
  const count = parts.length;
  const inputs = inputsOf(snapshot, readAt, until);
  const again = previous === null ? null : previous.same(filter, parts, readAt);
  if (again !== null) {
    previous!.keep(filter, parts, again, inputs);
    return again;
  }
  // Not the last body: it goes (with the fragments only it still held) before the new one is
  // allocated, so two whole bodies are never held at once (issue 29: 33 MB each at 50,000).
  previous?.forget(filter);
  const head = '{"success":true,"peers":[';
  const tail = `],"total_count":${count},"filter":${filter === null ? 'null' : `"${filter}"`}}`;
  const body = Buffer.allocUnsafe(head.length + size + Math.max(0, count - 1) + tail.length);
  let offset = body.write(head, 0, 'latin1');
  for (let i = 0; i < count;) {
    if (i > 0) body[offset++] = 0x2c; // ','
    const run = runFrom(parts, i);
    if (run === i + 1) {
      offset += writePiece(parts[i]!, body, offset, stamp.bytes);
    } else {
      offset += moveRun(parts as Fragment[], i, run, body, offset, stamp.bytes);
    }
    i = run;
  }
  body.write(tail, offset, 'latin1');
  previous?.keep(filter, parts, body, inputs);
  return body;
}

/**
 * What a body was built from beside its peers' fragments: everything of the snapshot `viewOf`
 * reads (the peer objects in order, the maps of the other facilities, the caps' read instant),
 * and the span of time over which no peer's status or minutes move. Another read with all of
 * it the same (the same objects: a read's maps are never changed in place, and DumpMemo hands
 * out the very same peer objects for an unchanged dump) shows the same bytes.
 */
interface BodyInputs {
  peers: readonly SnapshotPeer[];
  limits: PeerSnapshot['limits'];
  caps: PeerSnapshot['caps'];
  suspended: PeerSnapshot['suspended'];
  exhausted: PeerSnapshot['exhausted'];
  names: PeerSnapshot['names'];
  expiries: PeerSnapshot['expiries'];
  expired: PeerSnapshot['expired'];
  readAt: number | null;
  /** The snapshot's time, and the first instant from which a peer's status or minute differs. */
  from: number;
  until: number;
}

function inputsOf(snapshot: PeerSnapshot, readAt: number | null, until: number): BodyInputs {
  return {
    peers: snapshot.device.peers.slice(),
    limits: snapshot.limits,
    caps: snapshot.caps,
    suspended: snapshot.suspended,
    exhausted: snapshot.exhausted,
    names: snapshot.names,
    expiries: snapshot.expiries,
    expired: snapshot.expired,
    readAt,
    from: snapshot.takenAt,
    until,
  };
}

/** Two of a snapshot's maps or sets alike for viewOf: the same object, or both empty (or absent). */
function sameHolding(
  a: { readonly size: number } | undefined,
  b: { readonly size: number } | undefined,
): boolean {
  return a === b || ((a?.size ?? 0) === 0 && (b?.size ?? 0) === 0);
}

/** The expired keys alike (issue 31: each read makes a new set): the same keys. */
function sameKeys(a: ReadonlySet<string> | undefined, b: ReadonlySet<string> | undefined): boolean {
  if (sameHolding(a, b)) return true;
  if (a === undefined || b === undefined || a.size !== b.size) return false;
  for (const key of a) if (!b.has(key)) return false;
  return true;
}

function sameInputs(inputs: BodyInputs, snapshot: PeerSnapshot, readAt: number | null): boolean {
  const at = snapshot.takenAt;
  // Whole milliseconds (Date.now()), on or after the build's time and before any peer's status
  // or minute moves (a clock stepped back is a change).
  if (!Number.isInteger(at) || at < inputs.from || at >= inputs.until) return false;
  if (
    readAt !== inputs.readAt ||
    !sameHolding(snapshot.limits, inputs.limits) ||
    !sameHolding(snapshot.caps, inputs.caps) ||
    !sameHolding(snapshot.suspended, inputs.suspended) ||
    !sameHolding(snapshot.exhausted, inputs.exhausted) ||
    !sameHolding(snapshot.names, inputs.names) ||
    !sameHolding(snapshot.expiries, inputs.expiries) ||
    !sameKeys(snapshot.expired, inputs.expired)
  ) {
    return false;
  }
  const peers = snapshot.device.peers;
  const known = inputs.peers;
  if (peers.length !== known.length) return false;
  for (let i = 0; i < peers.length; i++) if (peers[i] !== known[i]) return false;
  return true;
}

/**
 * The last body built per filter, the fragments it was built from and what else it was built
 * from (BodyInputs). Two ways to answer it again, each with the same bytes a build would give:
 * - `unchanged`: the read shows what the last body was built from (the same peer objects, maps
 *   and caps' instant, at a time no peer's status or minute has moved since): no peer is even
 *   visited (issue 29: an idle 10,000-peer device read every window);
 * - `same`: a build whose fragments are the very same objects, in the same order, with the same
 *   `read_at` instant, as the last one's (the head and tail depend only on the filter and the
 *   count).
 * Either way no 7 MB (10,000 capped peers) or 35 MB (50,000) allocation and copy per read of
 * an idle device, and its compressed forms are reused with it (ListBodies). Any change to a
 * peer, its status or minute, its limit or its cap gives it a new fragment, and the body is
 * built.
 */
export class PreviousBodies {
  private readonly last = new Map<
    string,
    { parts: Piece[]; body: Buffer; inputs: BodyInputs | null }
  >();

  unchanged(filter: ListFilter, snapshot: PeerSnapshot, readAt: number | null): Buffer | null {
    const last = this.last.get(filter ?? 'all');
    if (last === undefined || last.inputs === null) return null;
    return sameInputs(last.inputs, snapshot, readAt) ? last.body : null;
  }

  same(filter: ListFilter, parts: readonly Piece[], readAt: number | null): Buffer | null {
    const last = this.last.get(filter ?? 'all');
    if (last === undefined || last.parts.length !== parts.length) return null;
    if ((last.inputs?.readAt ?? null) !== readAt) return null;
    for (let i = 0; i < parts.length; i++) if (last.parts[i] !== parts[i]) return null;
    return last.body;
  }

  keep(filter: ListFilter, parts: Piece[], body: Buffer, inputs: BodyInputs | null = null): void {
    this.last.set(filter ?? 'all', { parts, body, inputs });
  }

  /** Lets the last body of `filter` go: a body with other bytes is being built. */
  forget(filter: ListFilter): void {
    this.last.delete(filter ?? 'all');
  }
}

/**
 * The encoding to answer with (RFC 9110 §12.5.3): br or gzip when the client accepts it with
 * q > 0 (an explicit "q=0" refuses; "*" covers what is not listed), the higher q winning and br
 * on a tie (smaller at the same cost); identity otherwise. `offered` narrows the choice (GET
 * /metrics offers gzip alone).
 */
export function negotiateEncoding(
  acceptEncoding: string | undefined,
  offered: ReadonlySet<BodyEncoding> = ALL_ENCODINGS,
): BodyEncoding {
  if (acceptEncoding === undefined || acceptEncoding === '') return 'identity';
  const weights = new Map<string, number>();
  for (const part of acceptEncoding.split(',')) {
    const [rawName, ...params] = part.split(';');
    const name = rawName!.trim().toLowerCase();
    if (name === '') continue;
    let q = 1;
    for (const param of params) {
      const match = /^\s*q\s*=\s*([0-9.]+)\s*$/i.exec(param);
      if (match) q = Number(match[1]);
    }
    if (Number.isNaN(q)) q = 0;
    weights.set(name === 'x-gzip' ? 'gzip' : name, q);
  }
  const star = weights.get('*') ?? 0;
  const br = offered.has('br') ? (weights.get('br') ?? star) : 0;
  const gz = offered.has('gzip') ? (weights.get('gzip') ?? star) : 0;
  if (br > 0 && br >= gz) return 'br';
  if (gz > 0) return 'gzip';
  return 'identity';
}

/**
 * The distinct field sets (`?fields=`) whose bodies are kept per read: a body for a further set
 * is built for its request alone (and compressed for it alone), so a client that asks for ever
 * new field sets costs builds but never makes the daemon keep more than this many partial
 * bodies (per filter and encoding) of one read. The full body is not counted.
 */
export const MAX_FIELD_SETS_PER_READ = 4;
/** Field sets whose projections (their pieces of idle peers, their last bodies) are kept across reads, least recently used out. */
export const MAX_PROJECTIONS = 8;

/**
 * The bodies of each snapshot, keyed by filter, field set and encoding, held as promises so
 * that concurrent requests join a build or compression in flight. Held in a WeakMap on the
 * snapshot object: once no request and no freshness window holds the snapshot, its bodies go
 * with it.
 */
export class ListBodies {
  /** Bodies built and compressions run since start (for tests and metrics). */
  builds = 0;
  compressions = 0;
  /** Partial bodies built beyond MAX_FIELD_SETS_PER_READ, for their request alone. */
  unkept = 0;
  /** Per snapshot and key: the body's promise, and the body itself once built (`ready`). */
  private readonly bySnapshot = new WeakMap<PeerSnapshot, HeldBodies>();
  private readonly previous = new PreviousBodies();
  /** Projections by field set key, least recently used first. */
  private readonly projections = new Map<string, Projection>();
  /** Compressed forms by the identity body they compress: a body answered again keeps them. */
  private readonly compressed = new WeakMap<Buffer, Map<BodyEncoding, Promise<Buffer>>>();

  constructor(private readonly peersPerSlice = PEERS_PER_SLICE) {}

  /** The body `body()` would give, when it is already built; else null. */
  ready(
    snapshot: PeerSnapshot,
    filter: ListFilter,
    encoding: BodyEncoding,
    fields: FieldSet | null = null,
  ): Buffer | null {
    return (
      this.bySnapshot.get(snapshot)?.bodies.get(keyOf(filter, encoding, fields))?.built ?? null
    );
  }

  /** The body of a read for a filter, in an encoding; `fields`: a partial body (issue 29). */
  body(
    snapshot: PeerSnapshot,
    filter: ListFilter,
    encoding: BodyEncoding,
    fields: FieldSet | null = null,
  ): Promise<Buffer> {
    let held = this.bySnapshot.get(snapshot);
    if (held === undefined) {
      held = { bodies: new Map(), fieldSets: new Set() };
      this.bySnapshot.set(snapshot, held);
    }
    const key = keyOf(filter, encoding, fields);
    const existing = held.bodies.get(key);
    if (existing !== undefined) return existing.promise;
    if (fields !== null && !held.fieldSets.has(fields.key)) {
      if (held.fieldSets.size >= MAX_FIELD_SETS_PER_READ)
        return this.unkeptBody(snapshot, filter, encoding, fields);
      held.fieldSets.add(fields.key);
    }
    let promise: Promise<Buffer>;
    if (encoding === 'identity') {
      this.builds += 1;
      promise =
        fields === null
          ? buildListBody(snapshot, filter, this.peersPerSlice, this.previous)
          : this.buildPartial(snapshot, filter, this.projectionOf(fields));
    } else {
      promise = this.body(snapshot, filter, 'identity', fields).then((identity) =>
        this.compress(identity, encoding),
      );
    }
    const bodies = held.bodies;
    const entry: HeldBody = { promise, built: null };
    bodies.set(key, entry);
    promise.then(
      (body) => {
        entry.built = body;
      },
      // A failed build is not kept: the next request tries again.
      () => {
        if (bodies.get(key) === entry) bodies.delete(key);
      },
    );
    return promise;
  }

  private buildPartial(
    snapshot: PeerSnapshot,
    filter: ListFilter,
    projection: Projection,
  ): Promise<Buffer> {
    return buildListBody(snapshot, filter, this.peersPerSlice, projection.previous, projection);
  }

  /** A body beyond the bound: built (and compressed) for this request, kept nowhere. */
  private async unkeptBody(
    snapshot: PeerSnapshot,
    filter: ListFilter,
    encoding: BodyEncoding,
    fields: FieldSet,
  ): Promise<Buffer> {
    this.unkept += 1;
    this.builds += 1;
    const projection = new Projection(fields);
    const identity = await buildListBody(snapshot, filter, this.peersPerSlice, null, projection);
    return encoding === 'identity' ? identity : this.compress(identity, encoding);
  }

  /** The projection of a field set, kept among the MAX_PROJECTIONS most recently used. */
  private projectionOf(fields: FieldSet): Projection {
    const known = this.projections.get(fields.key);
    const projection = known ?? new Projection(fields);
    this.projections.delete(fields.key);
    this.projections.set(fields.key, projection);
    if (this.projections.size > MAX_PROJECTIONS) {
      const oldest = this.projections.keys().next();
      if (oldest.done !== true) this.projections.delete(oldest.value);
    }
    return projection;
  }

  private compress(identity: Buffer, encoding: BodyEncoding): Promise<Buffer> {
    let forms = this.compressed.get(identity);
    if (forms === undefined) {
      forms = new Map();
      this.compressed.set(identity, forms);
    }
    const known = forms.get(encoding);
    if (known !== undefined) return known;
    this.compressions += 1;
    const promise =
      encoding === 'gzip' ? gzip(identity, GZIP_OPTIONS) : brotli(identity, BROTLI_OPTIONS);
    const held = forms;
    forms.set(encoding, promise);
    // A failed compression is not kept: the next request tries again.
    promise.catch(() => {
      if (held.get(encoding) === promise) held.delete(encoding);
    });
    return promise;
  }
}

function keyOf(filter: ListFilter, encoding: BodyEncoding, fields: FieldSet | null): string {
  const base = `${filter ?? 'all'} ${encoding}`;
  return fields === null ? base : `${base} ${fields.key}`;
}

interface HeldBodies {
  bodies: Map<string, HeldBody>;
  /** The field sets with bodies kept for this read (at most MAX_FIELD_SETS_PER_READ). */
  fieldSets: Set<string>;
}

interface HeldBody {
  promise: Promise<Buffer>;
  built: Buffer | null;
}

/** An instant as the list writes it: ISO 8601 in UTC, or null. */
function isoOrNull(at: number | null): string {
  return at === null ? 'null' : `"${new Date(at).toISOString()}"`;
}

/** A peer's data_cap object, with the view's exhaustion time and the instant its figures were read. */
function capJson(cap: NonNullable<PeerView['cap']>, view: PeerView): string {
  const rate = cap.throttleBytesPerSecond ?? null;
  return (
    `{"quota_bytes":${cap.quotaBytes},"used_bytes":${cap.usedBytes},"enforced":${cap.enforced}` +
    planJson(cap.plan) +
    `,"after_cap":"${rate === null ? 'block' : 'throttle'}","throttle_bytes_per_second":${rate}` +
    `,"exhausted_at":${isoOrNull(view.exhaustedAt)}` +
    `,"throttled":${cap.throttled === true},"read_at":${isoOrNull(view.capReadAt)}}`
  );
}
