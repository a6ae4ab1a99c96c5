/** The ready wg-quick configuration handed to a new peer, once, in the create response. */

export interface ClientConfigInput {
  privateKey: string;
  address: string;
  serverPublicKey: string;
  endpoint: string;
  /** Routed through the tunnel by the client: the interface's subnet, e.g. "10.8.0.0/24". */
  allowedIps: string;
}

export const CLIENT_PERSISTENT_KEEPALIVE = 25;

export function renderClientConfig(input: ClientConfigInput): string {
  return [
    '[Interface]',
    `PrivateKey = ${input.privateKey}`,
    `Address = ${input.address}/32`,
    '',
    '[Peer]',
    `PublicKey = ${input.serverPublicKey}`,
    `Endpoint = ${input.endpoint}`,
    `AllowedIPs = ${input.allowedIps}`,
    `PersistentKeepalive = ${CLIENT_PERSISTENT_KEEPALIVE}`,
    '',
  ].join('\n');
}

/** `<host>:<port>`, with an IPv6 host in brackets. */
export function formatEndpoint(host: string, port: number): string {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return bare.includes(':') ? `[${bare}]:${port}` : `${bare}:${port}`;
}
