/**
 * Configuration of DESIGN §4: flags, each with an environment variable of the same meaning
 * (a flag wins over its variable; an empty variable counts as unset). Parsing is a pure function
 * so it can be tested; main.ts turns a ConfigError into one line on stderr and exit status 2.
 */
import { isIP } from 'node:net';
import { hostRange, ipv4ToNumber, isIpv4, prefixRange } from './kernel/ipv4';
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

export interface ListenAddress {
  /** IP literal without brackets, or "localhost". */
  host: string;
  port: number;
}

export interface Config {
  interfaceName: string;
  listen: ListenAddress;
  /** null: the host's primary IPv4 address, read over rtnetlink. */
  endpointHost: string | null;
  /**
   * Admin and read tokens at start. Both empty: no authentication (only allowed on loopback or
   * with allowUnauthenticated).
   */
  tokens: Tokens;
  /** Where the tokens came from, for the SIGHUP re-read (files only; variables stay). */
  tokenSources: TokenSources;
  logLevel: LogLevel;
  /** Address of an interface wg-peerd creates. */
  address: { address: string; prefixLength: number };
  /** Listen port of an interface wg-peerd creates. */
  listenPort: number;
  allowUnauthenticated: boolean;
  /** DESIGN §5 freshness window of GET /api/peers, milliseconds; 0 shares only reads in flight. */
  listMaxAgeMs: number;
  /** Per-peer series on GET /metrics; false keeps only the aggregates (very large hosts). */
  metricsPerPeer: boolean;
  /** Open HTTP connections at most; new ones over it are closed at once. */
  maxConnections: number;
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

interface Option {
  flag: string;
  env: string;
  /** Takes no value (a switch). */
  boolean?: true;
  value: string;
  default: string;
  meaning: string;
}

export const OPTIONS: readonly Option[] = [
  {
    flag: '--interface',
    env: 'WG_PEERD_INTERFACE',
    value: 'NAME',
    default: 'wg0',
    meaning: 'WireGuard interface whose peers are managed',
  },
  {
    flag: '--listen',
    env: 'WG_PEERD_LISTEN',
    value: 'HOST:PORT',
    default: '127.0.0.1:8080',
    meaning: 'HTTP listen address (IPv6 as [::1]:8080)',
  },
  {
    flag: '--endpoint-host',
    env: 'WG_PEERD_ENDPOINT_HOST',
    value: 'HOST',
    default: "the host's primary IPv4 address",
    meaning: 'host part of server.endpoint handed to new peers',
  },
  {
    flag: '--token-file',
    env: 'WG_PEERD_TOKEN',
    value: 'PATH',
    default: 'none',
    meaning: 'file of admin bearer tokens (all routes), one a line; re-read on SIGHUP',
  },
  {
    flag: '--read-token-file',
    env: 'WG_PEERD_READ_TOKEN',
    value: 'PATH',
    default: 'none',
    meaning: 'file of read-only tokens (list, metrics), one a line; re-read on SIGHUP',
  },
  {
    flag: '--address',
    env: 'WG_PEERD_ADDRESS',
    value: 'CIDR',
    default: '10.8.0.1/24',
    meaning: 'address of the interface, only when wg-peerd creates it',
  },
  {
    flag: '--listen-port',
    env: 'WG_PEERD_LISTEN_PORT',
    value: 'PORT',
    default: '51820',
    meaning: 'WireGuard UDP port, only when wg-peerd creates the interface',
  },
  {
    flag: '--allow-unauthenticated',
    env: 'WG_PEERD_ALLOW_UNAUTHENTICATED',
    boolean: true,
    value: '',
    default: 'off',
    meaning: 'serve a non-loopback address without a token',
  },
  {
    flag: '--list-max-age',
    env: 'WG_PEERD_LIST_MAX_AGE_MS',
    value: 'MS',
    default: '1000',
    meaning:
      'lists share a kernel read this long (0-60000; 0: only reads in flight); higher costs less, data ages more; a change ends it',
  },
  {
    flag: '--max-connections',
    env: 'WG_PEERD_MAX_CONNECTIONS',
    value: 'N',
    default: '512',
    meaning: 'open HTTP connections at most (1-65535); new ones over it are closed at once',
  },
  {
    flag: '--log-level',
    env: 'WG_PEERD_LOG_LEVEL',
    value: 'LEVEL',
    default: 'info',
    meaning: `least severe log level written: ${LOG_LEVELS.join(', ')}`,
  },
  {
    flag: '--metrics-per-peer',
    env: 'WG_PEERD_METRICS_PER_PEER',
    value: 'BOOL',
    default: 'true',
    meaning: 'per-peer series on GET /metrics (false: only the aggregates)',
  },
];

/** Variables that hold a token itself rather than a file's path. */
const TOKEN_VALUE_VARIABLES = ['WG_PEERD_TOKEN', 'WG_PEERD_READ_TOKEN'];

export function helpText(): string {
  const rows = OPTIONS.map((o) => [
    o.boolean ? o.flag : `${o.flag} ${o.value}`,
    TOKEN_VALUE_VARIABLES.includes(o.env)
      ? `${o.env} (the token itself)`
      : o.boolean
        ? `${o.env}=1`
        : o.env,
    o.default,
    o.meaning,
  ]);
  rows.push(['--help', '', '', 'print this table and exit']);
  rows.push(['--version', '', '', 'print the version and exit']);
  const header = ['flag', 'env', 'default', 'meaning'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [
    'Usage: wg-peerd [options]',
    '',
    'Manages the peers of a WireGuard interface over an HTTP API (see the README).',
    'Each flag has an environment variable of the same meaning; the flag wins.',
    '',
    line(header),
    line(widths.map((w) => '-'.repeat(w))),
    ...rows.map(line),
    '',
  ].join('\n');
}

const INTERFACE_NAME = /^[^\s/:]{1,15}$/;
const HOSTNAME =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

function parsePort(text: string, what: string): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) < 1 || Number(text) > 65535) {
    throw new ConfigError(`${what} must be a port number from 1 to 65535, not "${text}"`);
  }
  return Number(text);
}

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

/** The freshness window: 60 s bounds how stale a list may be (liveness has minute resolution). */
export const LIST_MAX_AGE_MAX_MS = 60_000;

function parseListMaxAge(text: string, what: string): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) > LIST_MAX_AGE_MAX_MS) {
    throw new ConfigError(
      `${what} must be a whole number of milliseconds from 0 to ${LIST_MAX_AGE_MAX_MS}, not "${text}"`,
    );
  }
  return Number(text);
}

/** Each connection is a file descriptor: 65,535 is far past any sane open-file limit. */
function parseMaxConnections(text: string, what: string): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) < 1 || Number(text) > 65535) {
    throw new ConfigError(`${what} must be a whole number from 1 to 65535, not "${text}"`);
  }
  return Number(text);
}

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

function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return isIpv4(host) && host.startsWith('127.');
}

/** Formats a listen address back as HOST:PORT. */
export function formatListen(listen: ListenAddress): string {
  return listen.host.includes(':')
    ? `[${listen.host}]:${listen.port}`
    : `${listen.host}:${listen.port}`;
}

/**
 * argv without node and script. Throws ConfigError with one line a person can act on.
 */
export function parseConfig(
  argv: readonly string[],
  env: Environment,
  readTokenFile: ReadTokenFile,
): ParseOutcome {
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') return { kind: 'help' };
    if (arg === '--version' || arg === '-V') return { kind: 'version' };
    if (!arg.startsWith('--')) {
      throw new ConfigError(
        `unexpected argument "${arg}"; wg-peerd takes only --flags (see --help)`,
      );
    }
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const option = OPTIONS.find((o) => o.flag === name);
    if (option === undefined) throw new ConfigError(`unknown option ${name} (see --help)`);
    if (flags.has(name)) throw new ConfigError(`${name} is given more than once`);
    if (option.boolean) {
      if (eq !== -1) throw new ConfigError(`${name} takes no value`);
      flags.set(name, '1');
      continue;
    }
    let value: string | undefined;
    if (eq !== -1) {
      value = arg.slice(eq + 1);
    } else {
      value = argv[i + 1];
      if (value === undefined || value.startsWith('--')) {
        throw new ConfigError(`${name} needs a value: ${name} ${option.value}`);
      }
      i += 1;
    }
    flags.set(name, value);
  }

  /** The flag's value, else its non-empty environment variable, with where it came from. */
  const source = (flag: string): { value: string; what: string; fromEnv: boolean } | null => {
    const option = OPTIONS.find((o) => o.flag === flag)!;
    const fromFlag = flags.get(flag);
    if (fromFlag !== undefined) return { value: fromFlag, what: flag, fromEnv: false };
    const fromEnv = env[option.env];
    if (fromEnv !== undefined && fromEnv !== '') {
      return { value: fromEnv, what: option.env, fromEnv: true };
    }
    return null;
  };

  const ifname = source('--interface');
  const listenSrc = source('--listen');
  const endpoint = source('--endpoint-host');
  const address = source('--address');
  const port = source('--listen-port');
  const allow = source('--allow-unauthenticated');
  const listMaxAge = source('--list-max-age');
  const perPeer = source('--metrics-per-peer');
  const maxConnections = source('--max-connections');

  let allowUnauthenticated = false;
  if (allow !== null) {
    if (allow.value !== '1' && allow.value !== '0') {
      throw new ConfigError(`${allow.what} must be 1 or 0, not "${allow.value}"`);
    }
    allowUnauthenticated = allow.value === '1';
  }

  let metricsPerPeer = true;
  if (perPeer !== null) {
    if (!/^(true|false|1|0)$/.test(perPeer.value)) {
      throw new ConfigError(`${perPeer.what} must be true or false, not "${perPeer.value}"`);
    }
    metricsPerPeer = perPeer.value === 'true' || perPeer.value === '1';
  }

  const tokenSource = (flag: string): TokenSource | null => {
    const src = source(flag);
    if (src === null) return null;
    return src.fromEnv
      ? { kind: 'value', tokens: parseTokenVariable(src.value, src.what) }
      : { kind: 'file', path: src.value, flag };
  };
  const tokenSources: TokenSources = {
    admin: tokenSource('--token-file'),
    read: tokenSource('--read-token-file'),
  };
  let tokens: Tokens;
  try {
    tokens = loadTokens(tokenSources, readTokenFile);
  } catch (error) {
    if (error instanceof TokenFileError) throw new ConfigError(error.message);
    throw error;
  }
  const logLevel = source('--log-level');

  const config: Config = {
    interfaceName: ifname ? parseInterfaceName(ifname.value, ifname.what) : 'wg0',
    listen: listenSrc
      ? parseListen(listenSrc.value, listenSrc.what)
      : { host: '127.0.0.1', port: 8080 },
    endpointHost: endpoint ? parseEndpointHost(endpoint.value, endpoint.what) : null,
    tokens,
    tokenSources,
    logLevel: logLevel ? parseLogLevel(logLevel.value, logLevel.what) : 'info',
    address: address
      ? parseInterfaceAddress(address.value, address.what)
      : { address: '10.8.0.1', prefixLength: 24 },
    listenPort: port ? parsePort(port.value, port.what) : 51820,
    allowUnauthenticated,
    listMaxAgeMs: listMaxAge ? parseListMaxAge(listMaxAge.value, listMaxAge.what) : 1000,
    metricsPerPeer,
    maxConnections: maxConnections
      ? parseMaxConnections(maxConnections.value, maxConnections.what)
      : 512,
  };

  // Read tokens alone count as authentication: the API then lists for read tokens and refuses
  // every change (no admin token exists), which is a safe monitoring-only deployment.
  const anyToken = tokens.admin.length + tokens.read.length > 0;
  if (!isLoopback(config.listen.host) && !anyToken && !allowUnauthenticated) {
    throw new ConfigError(
      `refusing to serve ${formatListen(config.listen)} without authentication: give a token ` +
        '(--token-file PATH or WG_PEERD_TOKEN) or pass --allow-unauthenticated',
    );
  }
  return { kind: 'run', config };
}
