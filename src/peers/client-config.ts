/**
 * The ready wg-quick configuration handed to a new peer, once, in the create response. The
 * optional lines (DNS, MTU, PresharedKey) are written only when there is a value for them, and
 * PersistentKeepalive only when it is on: without them the text is the one every peer got before
 * issue 31.
 */

export interface ClientConfigInput {
  privateKey: string;
  address: string;
  /** The peer's IPv6 address on a dual-stack interface; absent or null: IPv4 only. */
  address6?: string | null;
  serverPublicKey: string;
  endpoint: string;
  /** Routed through the tunnel by the client: the interface's subnet, e.g. "10.8.0.0/24". */
  allowedIps: string;
  /** The client's DNS servers (`DNS =`); absent or empty: no line. */
  dns?: readonly string[];
  /** `MTU =`; absent or null: no line (wg-quick chooses). */
  mtu?: number | null;
  /** Seconds; absent: CLIENT_PERSISTENT_KEEPALIVE; 0: no line (off). */
  persistentKeepalive?: number;
  /** The peer's preshared key, base64 (`PresharedKey =` in [Peer]); absent or null: none. */
  presharedKey?: string | null;
}

export const CLIENT_PERSISTENT_KEEPALIVE = 25;

/**
 * What a dual-stack client routes through the tunnel: everything of both families, so no IPv6
 * leaks beside an IPv4 tunnel (issue 18). An IPv4-only client routes the interface's subnet.
 */
export const DUAL_STACK_CLIENT_ALLOWED_IPS = '0.0.0.0/0, ::/0';

export function renderClientConfig(input: ClientConfigInput): string {
  const keepalive = input.persistentKeepalive ?? CLIENT_PERSISTENT_KEEPALIVE;
  const dns = input.dns ?? [];
  return [
    '[Interface]',
    `PrivateKey = ${input.privateKey}`,
    input.address6 == null
      ? `Address = ${input.address}/32`
      : `Address = ${input.address}/32, ${input.address6}/128`,
    ...(dns.length === 0 ? [] : [`DNS = ${dns.join(', ')}`]),
    ...(input.mtu == null ? [] : [`MTU = ${input.mtu}`]),
    '',
    '[Peer]',
    `PublicKey = ${input.serverPublicKey}`,
    ...(input.presharedKey == null ? [] : [`PresharedKey = ${input.presharedKey}`]),
    `Endpoint = ${input.endpoint}`,
    `AllowedIPs = ${input.allowedIps}`,
    ...(keepalive === 0 ? [] : [`PersistentKeepalive = ${keepalive}`]),
    '',
  ].join('\n');
}

/** `<host>:<port>`, with an IPv6 host in brackets. */
export function formatEndpoint(host: string, port: number): string {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return bare.includes(':') ? `[${bare}]:${port}` : `${bare}:${port}`;
}
