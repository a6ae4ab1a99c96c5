/**
 * What PeerService tells of the changes it makes, as it makes them (DESIGN §3 "Events"): the
 * event stream (src/events) hands it a sink; the service knows nothing more of events.
 */

export type PeerChangeType =
  | 'peer.created'
  | 'peer.deleted'
  | 'peer.limit_changed'
  | 'peer.cap_changed'
  | 'peer.cap_reset'
  | 'peer.suspended'
  | 'peer.resumed'
  | 'peer.expired'
  | 'peer.renewed';

export interface PeerChange {
  type: PeerChangeType;
  publicKey: string;
  ipAddress: string | null;
  /** What changed, in the wire's snake_case (e.g. `bytes_per_second`, null when removed). */
  details?: Readonly<Record<string, string | number | boolean | null>>;
}

export interface PeerChangeSink {
  publish(change: PeerChange): void;
}
