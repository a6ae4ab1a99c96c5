/**
 * The event types of DESIGN §3 and the shapes the room passes around: what a source publishes
 * (an EventInput) and what the hub keeps and fans out (a StoredEvent, serialized once).
 */

/** Every type a stream or a webhook target may ask for, in the order DESIGN §3 names them. */
export const EVENT_TYPES = [
  'peer.created',
  'peer.deleted',
  'peer.connected',
  'peer.disconnected',
  'peer.limit_changed',
  'peer.cap_changed',
  'peer.cap_exhausted',
  'peer.cap_reset',
  'peer.throttled',
  'peer.suspended',
  'peer.resumed',
  'interface.lost',
  'interface.restored',
] as const;

export type EventType = (typeof EVENT_TYPES)[number];

/** The control event a resume that cannot be served gets (re-list, then go on). */
export const RESET_EVENT = 'reset';

export function isEventType(value: string): value is EventType {
  return (EVENT_TYPES as readonly string[]).includes(value);
}

/** JSON values an event's own fields may hold. */
export type EventValue = string | number | boolean | null;

/** What a source hands the hub: the hub adds the id, the interface and (unless given) `at`. */
export interface EventInput {
  type: EventType;
  /** Milliseconds since the epoch when it happened; the hub's clock when absent. */
  at?: number;
  /** Peer events: the peer's public key and tunnel address. */
  publicKey?: string | null;
  ipAddress?: string | null;
  /** The fields that say what changed, already in the wire's snake_case. */
  details?: Readonly<Record<string, EventValue>>;
}

/** One event as kept in the history and sent to every stream and target. */
export interface StoredEvent {
  /** Position in this daemon run, from 1. */
  readonly seq: number;
  /** `<run>.<seq>`: the SSE `id:` and the Standard Webhooks `webhook-id`. */
  readonly id: string;
  readonly type: EventType;
  /** Milliseconds since the epoch, as in `data.at`. */
  readonly at: number;
  /** The JSON of `data:` (and of a webhook's body), built once. */
  readonly json: string;
  /** The whole SSE frame (`id:`, `event:`, `data:`, blank line), encoded once for every stream. */
  readonly frame: Buffer;
}
