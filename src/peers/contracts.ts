/**
 * The domain's small shared shapes: the logger it writes to, and what a change answers. Types
 * only, so every file of the domain can name them without importing the service (no import
 * circle in src/peers).
 */

/** The slice of a logger the domain writes kernel changes to (pino's Logger fits). */
export interface EventLogger {
  info(object: Record<string, unknown>, message: string): void;
  warn(object: Record<string, unknown>, message: string): void;
  error(object: Record<string, unknown>, message: string): void;
}

export interface CreatedPeer {
  ip: string;
  /** The peer's IPv6 address on a dual-stack interface; null on an IPv4-only one. */
  ipv6: string | null;
  privateKey: string;
  publicKey: string;
  serverPublicKey: string;
  endpoint: string;
  /** What the client config routes through the tunnel: the subnet, or everything (dual-stack). */
  clientAllowedIps: string;
  /** Ready wg-quick configuration for the client. */
  clientConfig: string;
}

/** A peer as the result of a change names it. */
export interface ChangedPeer {
  publicKey: string;
  ip: string | null;
}

/** A cap reset: the peer and the usage the reset closed (bytes let through, at most the cap). */
export interface ResetCap extends ChangedPeer {
  usedBytes: number;
}
