/**
 * Configuration of DESIGN §4: flags, each with an environment variable of the same meaning
 * (a flag wins over its variable; an empty variable counts as unset). OPTIONS is the one table:
 * a row names the flag, its variable, its default (written once, as text parsed like a given
 * value) and its parse; `Config` and `--help` follow from it, so a new flag is one row.
 * Node's util.parseArgs splits the command line; every message is our own. Parsing is a pure
 * function so it can be tested; main.ts turns a ConfigError into one line on stderr and exit
 * status 2.
 */
import { isIP } from 'node:net';
import { parseArgs } from 'node:util';
import { hostRange, ipv4ToNumber, isIpv4, prefixRange } from './kernel/ipv4';
import { bigIntToIpv6, ipv6ToBigInt, isIpv6, prefixRange6 } from './kernel/ipv6';
import type { LogLevel } from './log';
import {
  TokenFileError,
  checkToken,
  loadTokens,
  type ReadTokenFile,
  type TokenSource,
  type TokenSources,
  type Tokens,
} from './token-files';
import { TlsFileError, loadTlsFiles, type TlsMaterial, type TlsSources } from './tls-files';
import {
  CLIENT_ALLOWED_IPS_MAX_ITEMS,
  CLIENT_DNS_MAX_ITEMS,
  CLIENT_KEEPALIVE_DEFAULT,
  CLIENT_KEEPALIVE_MAX,
  CLIENT_MTU_MAX,
  CLIENT_MTU_MIN,
  isCidrText,
  isIpAddressText,
} from './peers/client-options';

export interface ListenAddress {
  /** IP literal without brackets, or "localhost". */
  host: string;
  port: number;
}

export type ParseOutcome = { kind: 'help' } | { kind: 'version' } | { kind: 'run'; config: Config };

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

export type Environment = Readonly<Record<string, string | undefined>>;
export type { ReadTokenFile } from './token-files';

/** pino's levels, most to least severe, and `silent`. */
export const LOG_LEVELS: readonly LogLevel[] = [
  'fatal',
  'error',
  'warn',
  'info',
  'debug',
  'trace',
  'silent',
];

const INTERFACE_NAME = /^[^\s/:]{1,15}$/;
const HOSTNAME =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

/**
 * A parse of whole numbers from `min` to `max`; `noun` says what one is in messages ("a port
 * number"). Digits only: no sign, no fraction, no exponent.
 */
export function wholeNumber(
  min: number,
  max: number,
  noun = 'a whole number',
): (text: string, what: string) => number {
  return (text, what) => {
    const value = Number(text);
    if (!/^\d{1,15}$/.test(text) || value < min || value > max) {
      throw new ConfigError(`${what} must be ${noun} from ${min} to ${max}, not "${text}"`);
    }
    return value;
  };
}

const parsePort = wholeNumber(1, 65535, 'a port number');

export function parseInterfaceName(text: string, what: string): string {
  if (!INTERFACE_NAME.test(text) || text === '.' || text === '..') {
    throw new ConfigError(
      `${what} must be an interface name of 1 to 15 characters without spaces, "/" or ":", not "${text}"`,
    );
  }
  return text;
}

export function parseListen(text: string, what: string): ListenAddress {
  const bracketed = /^\[([^\]]+)\]:(\d+)$/.exec(text);
  const plain = /^([^:[\]]+):(\d+)$/.exec(text);
  const match = bracketed ?? plain;
  if (match === null) {
    throw new ConfigError(`${what} must be HOST:PORT (IPv6 as [::1]:8080), not "${text}"`);
  }
  const host = match[1]!;
  const family = isIP(host);
  if ((bracketed && family !== 6) || (!bracketed && family !== 4 && host !== 'localhost')) {
    throw new ConfigError(
      `${what} must name an IP address or localhost as host (IPv6 in brackets), not "${host}"`,
    );
  }
  return { host, port: parsePort(match[2]!, what) };
}

export function parseEndpointHost(text: string, what: string): string {
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  if (isIP(bare) !== 0 || HOSTNAME.test(bare)) return bare;
  throw new ConfigError(`${what} must be a host name or an IP address without port, not "${text}"`);
}

export function parseInterfaceAddress(
  text: string,
  what: string,
): { address: string; prefixLength: number } {
  const match = /^([0-9.]+)\/(\d{1,2})$/.exec(text);
  if (match === null || !isIpv4(match[1]!) || Number(match[2]) > 32) {
    throw new ConfigError(
      `${what} must be an IPv4 address with prefix length, like 10.8.0.1/24, not "${text}"`,
    );
  }
  const address = match[1]!;
  const prefixLength = Number(match[2]);
  // /30 leaves one address for a peer; /16 is the widest subnet per-peer speed limits can key
  // on (a tc class id has 16 bits for the peer) and holds far more than 10,000 peers.
  if (prefixLength < 16 || prefixLength > 30) {
    throw new ConfigError(
      `${what} must have a prefix length from /16 to /30, not /${prefixLength}`,
    );
  }
  const hosts = hostRange(address, prefixLength);
  const value = ipv4ToNumber(address);
  if (value < hosts.first || value > hosts.last) {
    const { first } = prefixRange(address, prefixLength);
    const which = value === first ? 'network' : 'broadcast';
    throw new ConfigError(
      `${what} ${text} is the ${which} address of its subnet; use a host address`,
    );
  }
  return { address, prefixLength };
}

/**
 * --address6: the interface's IPv6 address and prefix, /64 to /120. /64 is the widest prefix an
 * operator routes to one link (RFC 7421); /120 still leaves 255 addresses for peers. The address
 * must be a unicast one a peer can route to: not the prefix's Subnet-Router anycast address
 * (all-zero interface identifier, RFC 4291 §2.6.1), not link-local (fe80::/10), not multicast
 * (ff00::/8), not the unspecified or loopback address.
 */
export function parseInterfaceAddress6(
  text: string,
  what: string,
): { address: string; prefixLength: number } {
  const match = /^([0-9A-Fa-f:]+)\/(\d{1,3})$/.exec(text);
  if (match === null || !isIpv6(match[1]!) || Number(match[2]) > 128) {
    throw new ConfigError(
      `${what} must be an IPv6 address with prefix length, like fd42:42:42::1/64, not "${text}"`,
    );
  }
  const prefixLength = Number(match[2]);
  if (prefixLength < 64 || prefixLength > 120) {
    throw new ConfigError(
      `${what} must have a prefix length from /64 to /120, not /${prefixLength}`,
    );
  }
  const value = ipv6ToBigInt(match[1]!);
  const address = bigIntToIpv6(value);
  const top = value >> 118n;
  if (value >> 120n === 0xffn || top === 0x3fan || value <= 1n) {
    throw new ConfigError(
      `${what} ${text} is a multicast, link-local, unspecified or loopback address; use a ` +
        'global or unique-local one (fd00::/8)',
    );
  }
  if (value === prefixRange6(address, prefixLength).first) {
    throw new ConfigError(
      `${what} ${text} is the Subnet-Router anycast address of its prefix; use a host address`,
    );
  }
  return { address, prefixLength };
}

/** The freshness window: 60 s bounds how stale a list may be (liveness has minute resolution). */
export const LIST_MAX_AGE_MAX_MS = 60_000;

/** A token variable's value: one token, surrounding whitespace ignored. */
function parseTokenVariable(text: string, where: string): string[] {
  const token = text.trim();
  if (token === '') throw new ConfigError(`${where} holds no token`);
  try {
    return [checkToken(token, where)];
  } catch (error) {
    if (error instanceof TokenFileError) throw new ConfigError(error.message);
    throw error;
  }
}

export function parseLogLevel(text: string, what: string): LogLevel {
  const level = LOG_LEVELS.find((l) => l === text);
  if (level === undefined) {
    throw new ConfigError(`${what} must be one of ${LOG_LEVELS.join(', ')}, not "${text}"`);
  }
  return level;
}

export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return isIpv4(host) && host.startsWith('127.');
}

/** Formats a listen address back as HOST:PORT. */
export function formatListen(listen: ListenAddress): string {
  return listen.host.includes(':')
    ? `[${listen.host}]:${listen.port}`
    : `${listen.host}:${listen.port}`;
}

/** A token flag names a file (re-read on SIGHUP); its variable holds the token itself. */
function parseTokenSource(text: string, what: string, fromEnv: boolean): TokenSource {
  return fromEnv
    ? { kind: 'value', tokens: parseTokenVariable(text, what) }
    : { kind: 'file', path: text, flag: what };
}

/** A switch: given as the flag alone, or as its variable set to 1 (on) or 0 (off). */
function parseSwitch(text: string, what: string): boolean {
  if (text !== '1' && text !== '0') {
    throw new ConfigError(`${what} must be 1 or 0, not "${text}"`);
  }
  return text === '1';
}

function parseBoolean(text: string, what: string): boolean {
  if (!/^(true|false|1|0)$/.test(text)) {
    throw new ConfigError(`${what} must be true or false, not "${text}"`);
  }
  return text === 'true' || text === '1';
}

/**
 * One option. `default` is text parsed like a given value (so it is written once, and --help
 * shows it as written), or null for none; `T` is what `parse` makes of a value.
 */
interface Option<T, D extends string | null = string | null> {
  flag: `--${string}`;
  env: `WG_PEERD_${string}`;
  /** The value's name in --help; absent for a switch (the flag alone; its variable 1 or 0). */
  value?: string;
  default: D;
  /** What --help says of the default when the text alone would not say it. */
  shown?: string;
  /** What the variable holds when that is not what the flag takes (shown in --help). */
  envHolds?: string;
  meaning: string;
  /** `what` names the flag or the variable as the operator wrote it, for messages. */
  parse(text: string, what: string, fromEnv: boolean): T;
}

/** Usage checkpoints: at least every second, at most every hour. */
export const USAGE_SAVE_INTERVAL_MAX_S = 3600;

/** An absolute path: a relative one would name another directory from another cwd. */
function parseStateDir(text: string, what: string): string {
  if (!text.startsWith('/'))
    throw new ConfigError(`${what} must be an absolute path, not "${text}"`);
  return text;
}

/** --event-stream-stall: at most an hour. */
export const EVENT_STREAM_STALL_MAX_S = 3600;
/** --webhook-retry-for: from a minute (a few retries) to 30 days. */
export const WEBHOOK_RETRY_FOR_MIN_MS = 60_000;
export const WEBHOOK_RETRY_FOR_MAX_MS = 30 * 86_400_000;

const DURATION_UNITS: Readonly<Record<string, number>> = {
  d: 86_400_000,
  h: 3_600_000,
  m: 60_000,
  s: 1000,
};

/**
 * A parse of durations written as whole numbers with units, largest first: `36h`, `90m`,
 * `1d12h`, `45s`; to milliseconds from `minMs` to `maxMs`.
 */
export function parseDuration(
  minMs: number,
  maxMs: number,
): (text: string, what: string) => number {
  const show = (ms: number) => formatDuration(ms);
  return (text, what) => {
    const parts = /^(?:(\d{1,6})d)?(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?$/.exec(text);
    const ms =
      parts === null || text === ''
        ? NaN
        : ['d', 'h', 'm', 's'].reduce(
            (sum, unit, i) => sum + Number(parts[i + 1] ?? 0) * DURATION_UNITS[unit]!,
            0,
          );
    if (!(ms >= minMs && ms <= maxMs)) {
      throw new ConfigError(
        `${what} must be a duration from ${show(minMs)} to ${show(maxMs)} in d, h, m and s ` +
          `(like 36h or 1d12h), not "${text}"`,
      );
    }
    return ms;
  };
}

/** Milliseconds as the largest whole units that make them up: 129600000 → 1d12h. */
export function formatDuration(ms: number): string {
  let rest = Math.floor(ms / 1000) * 1000;
  let text = '';
  for (const [unit, size] of Object.entries(DURATION_UNITS)) {
    if (rest >= size) {
      text += `${Math.floor(rest / size)}${unit}`;
      rest %= size;
    }
  }
  return text === '' ? '0s' : text;
}

/**
 * A parse of comma-separated lists (spaces around the commas allowed), each item checked by
 * `valid`: the defaults of the client configs (issue 31).
 */
function commaList(
  valid: (text: string) => boolean,
  noun: string,
  example: string,
  max: number,
): (text: string, what: string) => string[] {
  return (text, what) => {
    const items = text.split(',').map((item) => item.trim());
    const bad = items.find((item) => !valid(item));
    if (bad !== undefined || items.length > max) {
      throw new ConfigError(
        bad === undefined
          ? `${what} holds more than ${max} items`
          : `${what} must be ${noun} separated by commas, like ${example}; "${bad}" is not one`,
      );
    }
    return items;
  };
}

/** Ties a row's default to its parse, for the type of Config. */
function option<T, D extends string | null>(row: Option<T, D>): Option<T, D> {
  return row;
}

/** The table of DESIGN §4, in the order --help prints it. The keys are Config's fields. */
export const OPTIONS = {
  interfaceName: option({
    flag: '--interface',
    env: 'WG_PEERD_INTERFACE',
    value: 'NAME',
    default: 'wg0',
    meaning: 'WireGuard interface whose peers are managed',
    parse: parseInterfaceName,
  }),
  listen: option({
    flag: '--listen',
    env: 'WG_PEERD_LISTEN',
    value: 'HOST:PORT',
    default: '127.0.0.1:8080',
    meaning: 'HTTP (HTTPS with --tls-cert) listen address (IPv6 as [::1]:8080)',
    parse: parseListen,
  }),
  endpointHost: option({
    flag: '--endpoint-host',
    env: 'WG_PEERD_ENDPOINT_HOST',
    value: 'HOST',
    default: null,
    shown: "the host's primary IPv4 address",
    meaning: 'host part of server.endpoint handed to new peers',
    parse: parseEndpointHost,
  }),
  clientDns: option({
    flag: '--client-dns',
    env: 'WG_PEERD_CLIENT_DNS',
    value: 'ADDRS',
    default: null,
    shown: 'none (no DNS line)',
    meaning:
      "DNS servers of new peers' client configs (IPv4 or IPv6 addresses, comma-separated); a " +
      "create's dns overrides it",
    parse: commaList(
      isIpAddressText,
      'IP addresses',
      '1.1.1.1,2606:4700:4700::1111',
      CLIENT_DNS_MAX_ITEMS,
    ),
  }),
  clientAllowedIps: option({
    flag: '--client-allowed-ips',
    env: 'WG_PEERD_CLIENT_ALLOWED_IPS',
    value: 'CIDRS',
    default: null,
    shown: "the interface's subnet",
    meaning:
      "AllowedIPs of new peers' client configs, comma-separated CIDRs (0.0.0.0/0,::/0 is a " +
      "full tunnel; without it a dual-stack interface's clients get 0.0.0.0/0, ::/0); a " +
      "create's allowedIps overrides it",
    parse: commaList(
      isCidrText,
      'CIDRs',
      '10.8.0.0/24,192.168.1.0/24',
      CLIENT_ALLOWED_IPS_MAX_ITEMS,
    ),
  }),
  clientMtu: option({
    flag: '--client-mtu',
    env: 'WG_PEERD_CLIENT_MTU',
    value: 'BYTES',
    default: null,
    shown: 'none (no MTU line)',
    meaning: `MTU of new peers' client configs (${CLIENT_MTU_MIN}-${CLIENT_MTU_MAX}); a create's mtu overrides it`,
    parse: wholeNumber(CLIENT_MTU_MIN, CLIENT_MTU_MAX),
  }),
  clientKeepalive: option({
    flag: '--client-keepalive',
    env: 'WG_PEERD_CLIENT_KEEPALIVE',
    value: 'S',
    default: String(CLIENT_KEEPALIVE_DEFAULT),
    meaning:
      `PersistentKeepalive of new peers' client configs in seconds (0-${CLIENT_KEEPALIVE_MAX}; ` +
      "0: no line); a create's persistentKeepalive overrides it",
    parse: wholeNumber(0, CLIENT_KEEPALIVE_MAX, 'a whole number of seconds'),
  }),
  presharedKeys: option({
    flag: '--preshared-keys',
    env: 'WG_PEERD_PRESHARED_KEYS',
    default: '0',
    shown: 'off',
    meaning: 'every new peer gets a preshared key unless its create says presharedKey false',
    parse: parseSwitch,
  }),
  adminTokens: option({
    flag: '--token-file',
    env: 'WG_PEERD_TOKEN',
    value: 'PATH',
    default: null,
    envHolds: 'the token itself',
    meaning: 'file of admin bearer tokens (all routes), one a line; re-read on SIGHUP',
    parse: parseTokenSource,
  }),
  readTokens: option({
    flag: '--read-token-file',
    env: 'WG_PEERD_READ_TOKEN',
    value: 'PATH',
    default: null,
    envHolds: 'the token itself',
    meaning: 'file of read-only tokens (list, metrics), one a line; re-read on SIGHUP',
    parse: parseTokenSource,
  }),
  tlsCert: option({
    flag: '--tls-cert',
    env: 'WG_PEERD_TLS_CERT',
    value: 'PATH',
    default: null,
    shown: 'none (plain HTTP)',
    meaning:
      'serve HTTPS (TLS 1.2 or 1.3) on --listen with this PEM certificate, intermediates ' +
      'after it; needs --tls-key; re-read on SIGHUP',
    parse: tlsPath,
  }),
  tlsKey: option({
    flag: '--tls-key',
    env: 'WG_PEERD_TLS_KEY',
    value: 'PATH',
    default: null,
    meaning:
      "the certificate's PEM private key, unencrypted and private to the daemon's user " +
      '(chmod 600); re-read on SIGHUP',
    parse: tlsPath,
  }),
  tlsClientCa: option({
    flag: '--tls-client-ca',
    env: 'WG_PEERD_TLS_CLIENT_CA',
    value: 'PATH',
    default: null,
    meaning:
      'mutual TLS: refuse the handshake to a client without a certificate signed by a CA ' +
      'of this PEM file (tokens still apply); probes need one too: curl --cacert CA.pem ' +
      '--cert CLIENT.pem --key CLIENT.key https://HOST:PORT/readyz; re-read on SIGHUP',
    parse: tlsPath,
  }),
  address: option({
    flag: '--address',
    env: 'WG_PEERD_ADDRESS',
    value: 'CIDR',
    default: '10.8.0.1/24',
    meaning: 'address of the interface, only when wg-peerd creates it',
    parse: parseInterfaceAddress,
  }),
  address6: option({
    flag: '--address6',
    env: 'WG_PEERD_ADDRESS6',
    value: 'CIDR',
    default: null,
    shown: 'none (IPv4 only)',
    meaning:
      'IPv6 address of the interface (/64 to /120), only when wg-peerd creates it; each peer ' +
      'then also gets a /128 from it',
    parse: parseInterfaceAddress6,
  }),
  listenPort: option({
    flag: '--listen-port',
    env: 'WG_PEERD_LISTEN_PORT',
    value: 'PORT',
    default: '51820',
    meaning: 'WireGuard UDP port, only when wg-peerd creates the interface',
    parse: parsePort,
  }),
  allowUnauthenticated: option({
    flag: '--allow-unauthenticated',
    env: 'WG_PEERD_ALLOW_UNAUTHENTICATED',
    default: '0',
    shown: 'off',
    meaning: 'serve a non-loopback address without a token',
    parse: parseSwitch,
  }),
  listMaxAgeMs: option({
    flag: '--list-max-age',
    env: 'WG_PEERD_LIST_MAX_AGE_MS',
    value: 'MS',
    default: '1000',
    meaning:
      `lists share a kernel read this long (0-${LIST_MAX_AGE_MAX_MS}; 0: only reads in ` +
      'flight); higher costs less, data ages more; a change ends it',
    parse: wholeNumber(0, LIST_MAX_AGE_MAX_MS, 'a whole number of milliseconds'),
  }),
  maxConnections: option({
    flag: '--max-connections',
    env: 'WG_PEERD_MAX_CONNECTIONS',
    value: 'N',
    default: '512',
    // Each connection is a file descriptor: 65,535 is far past any sane open-file limit.
    meaning: 'open HTTP connections at most (1-65535); new ones over it are closed at once',
    parse: wholeNumber(1, 65535),
  }),
  logLevel: option({
    flag: '--log-level',
    env: 'WG_PEERD_LOG_LEVEL',
    value: 'LEVEL',
    default: 'info',
    meaning: `least severe log level written: ${LOG_LEVELS.join(', ')}`,
    parse: parseLogLevel,
  }),
  metricsPerPeer: option({
    flag: '--metrics-per-peer',
    env: 'WG_PEERD_METRICS_PER_PEER',
    value: 'BOOL',
    default: 'true',
    meaning:
      'per-peer series on GET /metrics, up to 16 series per peer (false: only the aggregates; choose false above 10,000 peers)',
    parse: parseBoolean,
  }),
  eventHistory: option({
    flag: '--event-history',
    env: 'WG_PEERD_EVENT_HISTORY',
    value: 'N',
    default: '10000',
    meaning:
      'events kept for GET /api/events clients resuming with Last-Event-ID (1-1000000), ' +
      'and of them at most 16 MiB',
    parse: wholeNumber(1, 1_000_000),
  }),
  webhooksFile: option({
    flag: '--webhooks-file',
    env: 'WG_PEERD_WEBHOOKS_FILE',
    value: 'PATH',
    default: null,
    meaning:
      'webhook targets, one a line: <url> <whsec_secret> [<type>,...]; mode 0600; re-read on SIGHUP',
    parse: (text: string) => text,
  }),
  maxEventStreams: option({
    flag: '--max-event-streams',
    env: 'WG_PEERD_MAX_EVENT_STREAMS',
    value: 'N',
    default: '64',
    meaning:
      'open GET /api/events streams at most (0-65534; 0: none), below --max-connections so ' +
      'the API keeps room (the default drops to fit); one more is answered 503',
    parse: wholeNumber(0, 65534),
  }),
  eventStreamStallS: option({
    flag: '--event-stream-stall',
    env: 'WG_PEERD_EVENT_STREAM_STALL',
    value: 'S',
    default: '60',
    meaning: `an event stream whose reader has not taken what was sent within this many seconds (1-${EVENT_STREAM_STALL_MAX_S}) is closed`,
    parse: wholeNumber(1, EVENT_STREAM_STALL_MAX_S, 'a whole number of seconds'),
  }),
  webhookRetryForMs: option({
    flag: '--webhook-retry-for',
    env: 'WG_PEERD_WEBHOOK_RETRY_FOR',
    value: 'DURATION',
    default: '36h',
    meaning:
      'how long a webhook delivery is retried (backoff with jitter, the first retry within ' +
      '30 s): 1m to 30d, like 36h, 90m or 1d12h',
    parse: parseDuration(WEBHOOK_RETRY_FOR_MIN_MS, WEBHOOK_RETRY_FOR_MAX_MS),
  }),
  stateDir: option({
    flag: '--state-dir',
    env: 'WG_PEERD_STATE_DIR',
    value: 'DIR',
    default: null,
    shown: 'none',
    meaning:
      'keep peers, limits, caps, usage and the server key here (mode 0700) and put them back ' +
      'after a reboot; none: the kernel is the only store',
    parse: parseStateDir,
  }),
  usageSaveIntervalS: option({
    flag: '--usage-save-interval',
    env: 'WG_PEERD_USAGE_SAVE_INTERVAL',
    value: 'S',
    default: '10',
    meaning: `seconds between saves of what data caps counted (1-${USAGE_SAVE_INTERVAL_MAX_S}), with --state-dir`,
    parse: wholeNumber(1, USAGE_SAVE_INTERVAL_MAX_S, 'a whole number of seconds'),
  }),
};

type Options = typeof OPTIONS;
type Key = keyof Options;
type ValueOf<R> = R extends Option<infer T, infer D> ? (D extends null ? T | null : T) : never;

/** Every option's value: what was given, else its default. */
export type Settings = { [K in Key]: ValueOf<Options[K]> };

/**
 * What the daemon starts with. Admin and read tokens at start, both empty: no authentication
 * (only allowed on loopback or with allowUnauthenticated); `tokenSources` is where they came
 * from, for the SIGHUP re-read (files only; variables stay).
 */
export type Config = Omit<
  Settings,
  'adminTokens' | 'readTokens' | 'tlsCert' | 'tlsKey' | 'tlsClientCa'
> & {
  tokens: Tokens;
  tokenSources: TokenSources;
  /** HTTPS (issue 22): where the files are (re-read on SIGHUP) and what they held at start. */
  tls: { sources: TlsSources; material: TlsMaterial } | null;
};

/** The switches that need no value of their own, beside the options of the table. */
const COMMANDS = [
  { flag: '--help', short: 'h', meaning: 'print this help and exit', kind: 'help' },
  { flag: '--version', short: 'V', meaning: 'print the version and exit', kind: 'version' },
] as const;

const WIDTH = 80;
const INDENT = '      ';

/** `text` in lines of at most WIDTH columns, the first starting with `first`, the rest indented. */
function wrap(first: string, text: string): string[] {
  const lines: string[] = [];
  let line = first;
  for (const word of text.split(' ')) {
    const joined = line.trim() === '' ? `${line}${word}` : `${line} ${word}`;
    if (joined.length > WIDTH && line.trim() !== '') {
      lines.push(line);
      line = `${INDENT}${word}`;
    } else {
      line = joined;
    }
  }
  lines.push(line);
  return lines;
}

/** --help: the table of DESIGN §4 as one block per option, within 80 columns. */
export function helpText(): string {
  const rows: Array<Option<unknown>> = Object.values(OPTIONS);
  const blocks = rows.map((o) => {
    const env = o.value === undefined ? `${o.env}=1` : o.env;
    return [
      `  ${o.value === undefined ? o.flag : `${o.flag} ${o.value}`}`,
      ...wrap(INDENT, `${o.meaning}.`),
      ...wrap(
        INDENT,
        `env: ${o.envHolds === undefined ? env : `${env} (${o.envHolds})`}; ` +
          `default: ${o.shown ?? o.default ?? 'none'}`,
      ),
    ];
  });
  const commands = COMMANDS.map((c) => `  ${c.flag}, -${c.short}`.padEnd(24) + c.meaning);
  return [
    'Usage: wg-peerd [options]',
    '',
    'Manages the peers of a WireGuard interface over an HTTP API (see the README).',
    'Each option has an environment variable of the same meaning; the flag wins and',
    'an empty variable counts as unset. A value goes as --flag VALUE or --flag=VALUE.',
    '',
    ...blocks.flat(),
    ...commands,
    '',
    'A journal the start refuses as damaged (stop the daemon, run as its user):',
    '  wg-peerd state salvage --state-dir DIR [--interface NAME]',
    '',
  ].join('\n');
}

/** One flag as given on the command line. */
interface Given {
  flag: string;
  value: string;
}

/**
 * The command line, split by util.parseArgs (non-strict, so every message below is our own and
 * names what the operator typed): a help or version outcome, or the options given.
 */
function readArguments(argv: readonly string[]): ParseOutcome | Map<Key, Given> {
  const byFlag = new Map<string, Key>();
  for (const key of Object.keys(OPTIONS) as Key[]) byFlag.set(OPTIONS[key].flag, key);
  const parseOptions: Record<string, { type: 'string' | 'boolean'; short?: string }> = {};
  for (const [flag, key] of byFlag) {
    const switchOnly = OPTIONS[key].value === undefined;
    parseOptions[flag.slice(2)] = { type: switchOnly ? 'boolean' : 'string' };
  }
  for (const c of COMMANDS) parseOptions[c.flag.slice(2)] = { type: 'boolean', short: c.short };

  const { tokens } = parseArgs({
    args: [...argv],
    options: parseOptions,
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  const given = new Map<Key, Given>();
  for (const token of tokens) {
    if (token.kind === 'option-terminator') continue;
    if (token.kind === 'positional') {
      throw new ConfigError(
        `unexpected argument "${token.value}"; wg-peerd takes only --flags (see --help)`,
      );
    }
    const name = token.rawName;
    const command = COMMANDS.find((c) => c.flag === name || `-${c.short}` === name);
    const key = byFlag.get(name);
    if (command === undefined && key === undefined) {
      throw new ConfigError(`unknown option ${name} (see --help)`);
    }
    const switchOnly = command !== undefined || OPTIONS[key!].value === undefined;
    if (switchOnly) {
      if (token.value !== undefined) throw new ConfigError(`${name} takes no value`);
      if (command !== undefined) return { kind: command.kind };
    } else if (token.value === undefined || (!token.inlineValue && token.value.startsWith('--'))) {
      throw new ConfigError(`${name} needs a value: ${name} ${OPTIONS[key!].value}`);
    }
    if (given.has(key!)) throw new ConfigError(`${name} is given more than once`);
    given.set(key!, { flag: name, value: token.value ?? '1' });
  }
  return given;
}

/** Every option's value: the flag's, else its non-empty variable's, else the default. */
function settingsOf(given: Map<Key, Given>, env: Environment): Settings {
  const settings: Record<string, unknown> = {};
  for (const key of Object.keys(OPTIONS) as Key[]) {
    const row: Option<unknown> = OPTIONS[key];
    const flag = given.get(key);
    const fromEnv = env[row.env];
    if (flag !== undefined) settings[key] = row.parse(flag.value, flag.flag, false);
    else if (fromEnv !== undefined && fromEnv !== '') {
      settings[key] = row.parse(fromEnv, row.env, true);
    } else settings[key] = row.default === null ? null : row.parse(row.default, row.flag, false);
  }
  return settings as Settings;
}

/** A TLS file's path and how the operator named it (the flag or its variable). */
export interface TlsPath {
  path: string;
  what: string;
}

function tlsPath(text: string, what: string): TlsPath {
  return { path: text, what };
}

/**
 * The TLS options: both of the pair or neither, the client CA only with them; the files read
 * and checked (src/tls-files.ts). null: plain HTTP.
 */
function loadTls(
  cert: TlsPath | null,
  key: TlsPath | null,
  clientCa: TlsPath | null,
  read: ReadTokenFile,
): Config['tls'] {
  if (cert === null && key === null) {
    if (clientCa === null) return null;
    throw new ConfigError(
      `${clientCa.what} needs --tls-cert and --tls-key: mutual TLS runs over HTTPS`,
    );
  }
  if (cert === null || key === null) {
    const given = (cert ?? key)!.what;
    const missing =
      cert === null ? '--tls-cert (WG_PEERD_TLS_CERT)' : '--tls-key (WG_PEERD_TLS_KEY)';
    throw new ConfigError(`${given} needs ${missing}: HTTPS takes a certificate and its key`);
  }
  const sources: TlsSources = { cert: cert.path, key: key.path, clientCa: clientCa?.path ?? null };
  try {
    return { sources, material: loadTlsFiles(sources, read) };
  } catch (error) {
    if (error instanceof TlsFileError) throw new ConfigError(error.message);
    throw error;
  }
}

/**
 * Names of the `WG_PEERD_` family that are no setting of the daemon but set around it by the
 * project's own files: the systemd unit's environment file splits WG_PEERD_ARGS into flags
 * (contrib/systemd), and the test VM and release scripts (scripts/vm, scripts/release) pass
 * their knobs through the environment of the processes they start.
 */
const NOT_SETTINGS =
  /^WG_PEERD_(?:ARGS|PREFIX|README|DEBIAN_MIRROR|VM(?:_[A-Z0-9_]+)?|TEST_[A-Z0-9_]+)$/;

/** Levenshtein distance of two names. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row.push(Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + cost));
    }
    previous = row;
  }
  return previous[b.length]!;
}

/**
 * DESIGN §4: a non-empty `WG_PEERD_*` variable that is no setting stops the start (systemd's
 * stance on unknown settings), naming the nearest known variable; when the name is a flag's in
 * variable form (WG_PEERD_TOKEN_FILE for --token-file), the message says what that flag's
 * variable holds instead.
 */
function checkVariableNames(env: Environment): void {
  const rows: Array<Option<unknown>> = Object.values(OPTIONS);
  const known = new Set<string>(rows.map((row) => row.env));
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith('WG_PEERD_') || known.has(name) || NOT_SETTINGS.test(name)) continue;
    if (env[name] === undefined || env[name] === '') continue;
    let nearest = rows[0]!;
    for (const row of rows) {
      if (editDistance(name, row.env) < editDistance(name, nearest.env)) nearest = row;
    }
    const flagForm = rows.find(
      (row) => `WG_PEERD_${row.flag.slice(2).toUpperCase().replace(/-/g, '_')}` === name,
    );
    const hint =
      flagForm?.envHolds === undefined
        ? ''
        : ` It holds ${flagForm.envHolds}; a path goes as ${flagForm.flag} ${flagForm.value}`;
    throw new ConfigError(
      `unknown environment variable ${name} (wg-peerd --help lists them): ` +
        `did you mean ${nearest.env}?${hint}`,
    );
  }
}

/**
 * --max-event-streams below --max-connections, so a full set of streams leaves the API room: a
 * value given that is not below is refused; the default is lowered to fit (to 0, no streams, at
 * --max-connections 1).
 */
function fitStreams(config: Config, given: Map<Key, Given>, env: Environment): number {
  const named = (key: Key): string | null =>
    given.get(key)?.flag ?? (env[OPTIONS[key].env] ? OPTIONS[key].env : null);
  const streams = named('maxEventStreams');
  if (streams === null) return Math.min(config.maxEventStreams, config.maxConnections - 1);
  if (config.maxEventStreams < config.maxConnections) return config.maxEventStreams;
  throw new ConfigError(
    `${streams} (${config.maxEventStreams}) must be below ` +
      `${named('maxConnections') ?? '--max-connections'} (${config.maxConnections}): event ` +
      'streams may not take every connection from the API; lower the one or raise the other',
  );
}

/**
 * argv without node and script. Throws ConfigError with one line a person can act on.
 */
export function parseConfig(
  argv: readonly string[],
  env: Environment,
  readTokenFile: ReadTokenFile,
): ParseOutcome {
  const given = readArguments(argv);
  if (!(given instanceof Map)) return given;
  checkVariableNames(env);
  const { adminTokens, readTokens, tlsCert, tlsKey, tlsClientCa, ...settings } = settingsOf(
    given,
    env,
  );
  const tokenSources: TokenSources = { admin: adminTokens, read: readTokens };
  let tokens: Tokens;
  try {
    tokens = loadTokens(tokenSources, readTokenFile);
  } catch (error) {
    if (error instanceof TokenFileError) throw new ConfigError(error.message);
    throw error;
  }
  const tls = loadTls(tlsCert, tlsKey, tlsClientCa, readTokenFile);
  const config: Config = { ...settings, tokens, tokenSources, tls };
  config.maxEventStreams = fitStreams(config, given, env);

  // Read tokens alone count as authentication: the API then lists for read tokens and refuses
  // every change (no admin token exists), which is a safe monitoring-only deployment.
  const anyToken = tokens.admin.length + tokens.read.length > 0;
  if (!isLoopback(config.listen.host) && !anyToken && !config.allowUnauthenticated) {
    throw new ConfigError(
      `refusing to serve ${formatListen(config.listen)} without authentication: give a token ` +
        '(--token-file PATH or WG_PEERD_TOKEN) or pass --allow-unauthenticated',
    );
  }
  return { kind: 'run', config };
}
