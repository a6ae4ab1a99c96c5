/**
 * The shapes the room passes around: what a source publishes (an EventInput, whose type and
 * details the catalog defines) and what the hub keeps and fans out (a StoredEvent, serialized
 * once).
 */
import type { DetailsOf, EventType } from './catalog';

export { EVENT_TYPES, RESET_EVENT, isEventType, type DetailsOf, type EventType } from './catalog';

/** JSON values an event's own fields may hold. */
export type EventValue = string | number | boolean | null;

/** What every event may say besides its type and details. */
interface EventBase {
  /** Milliseconds since the epoch when it happened; the hub's clock when absent. */
  at?: number;
  /** Peer events: the peer's public key and tunnel address. */
  publicKey?: string | null;
  ipAddress?: string | null;
}

/** Details of `T`: required when the type has a field that may not be left out. */
type DetailsField<T extends EventType> =
  Record<string, never> extends DetailsOf<T>
    ? { details?: DetailsOf<T> }
    : { details: DetailsOf<T> };

/** What a source hands the hub for a type `T`: the catalog's details, in camelCase. */
export type EventInputOf<T extends EventType> = {
  [K in EventType]: EventBase & { type: K } & DetailsField<K>;
}[T];

/** What a source hands the hub: the hub adds the id, the interface and (unless given) `at`. */
export type EventInput = EventInputOf<EventType>;

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
