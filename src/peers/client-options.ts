/**
 * What a create may ask for beyond today's peer (issue 31, DESIGN §3 "Create body"), and the
 * daemon-wide defaults it falls back on (`--client-dns`, `--client-allowed-ips`, `--client-mtu`,
 * `--client-keepalive`, `--preshared-keys`).
 *
 * Contract. Every field of a create's options is optional; a field left out takes the daemon's
 * default, and with every default at its own default an empty create is exactly today's peer
 * (no DNS, no MTU, the interface's subnet — or everything, dual-stack — as AllowedIPs,
 * PersistentKeepalive 25, no preshared key). The checks here are the domain's (a caller that
 * skipped the HTTP schema still gets a ValidationError with `details`); the texts of addresses
 * and prefixes go into the client's config as given, once checked. Pure: no kernel, no I/O.
 */
import { isIpv4 } from '../kernel/ipv4';
import { isIpv6 } from '../kernel/ipv6';
import { ValidationError } from './errors';
import { checkName } from './names';

/** The client's MTU: IPv6's minimum link MTU up to jumbo frames (issue 31). */
export const CLIENT_MTU_MIN = 1280;
export const CLIENT_MTU_MAX = 9000;
/** WireGuard's persistent keepalive is a u16 of seconds; 0 is off. */
export const CLIENT_KEEPALIVE_MAX = 65535;
/** Today's client keepalive, the default of --client-keepalive. */
export const CLIENT_KEEPALIVE_DEFAULT = 25;
/** Lists a create may give: a client config of a sane size (the body is at most 4 KiB anyway). */
export const CLIENT_DNS_MAX_ITEMS = 16;
export const CLIENT_ALLOWED_IPS_MAX_ITEMS = 128;

/** A create's own choices (the create body, checked). */
export interface CreateOptions {
  /** The peer's name (./names.ts): 1 to 64 characters without control characters. */
  name?: string;
  /** When the peer expires (./expiry.ts): ISO 8601 with a UTC offset, in the future. */
  expiresAt?: string;
  /** Make a preshared key for the peer (true), or not even when --preshared-keys is on (false). */
  presharedKey?: boolean;
  /** The client's DNS servers; [] writes no DNS line whatever the default. */
  dns?: readonly string[];
  /** The client's AllowedIPs (what it routes through the tunnel), at least one CIDR. */
  allowedIps?: readonly string[];
  mtu?: number;
  /** Seconds; 0 writes no PersistentKeepalive line (off). */
  persistentKeepalive?: number;
}

/** The daemon-wide defaults of a create's options (configuration). */
export interface ClientDefaults {
  dns: readonly string[];
  /** null: the interface's subnet, or `0.0.0.0/0, ::/0` on a dual-stack interface (today's). */
  allowedIps: readonly string[] | null;
  mtu: number | null;
  persistentKeepalive: number;
  presharedKeys: boolean;
}

export const DEFAULT_CLIENT_DEFAULTS: ClientDefaults = {
  dns: [],
  allowedIps: null,
  mtu: null,
  persistentKeepalive: CLIENT_KEEPALIVE_DEFAULT,
  presharedKeys: false,
};

/** What one create's client gets: its options over the defaults. */
export interface ClientChoices {
  dns: readonly string[];
  allowedIps: readonly string[] | null;
  mtu: number | null;
  persistentKeepalive: number;
  presharedKey: boolean;
}

export function isIpAddressText(text: string): boolean {
  return isIpv4(text) || isIpv6(text);
}

/** "10.0.0.0/8", "::/0": an IPv4 or IPv6 address and a prefix length its family allows. */
export function isCidrText(text: string): boolean {
  const match = /^([^/]+)\/(\d{1,3})$/.exec(text);
  if (match === null) return false;
  const length = Number(match[2]);
  if (isIpv4(match[1]!)) return length <= 32;
  return isIpv6(match[1]!) && length <= 128;
}

function invalid(field: string, message: string, sentence: string): ValidationError {
  return new ValidationError(sentence, [{ field: `/${field}`, message }]);
}

function checkList(
  values: readonly string[] | undefined,
  field: string,
  max: number,
  valid: (text: string) => boolean,
  what: string,
  min: number,
): void {
  if (values === undefined) return;
  if (!Array.isArray(values) || values.length < min || values.length > max) {
    throw invalid(
      field,
      `must be a list of ${min} to ${max} items`,
      `Invalid request body: ${field} must be a list of ${min} to ${max} ${what}`,
    );
  }
  values.forEach((value, index) => {
    if (typeof value !== 'string' || !valid(value)) {
      throw invalid(
        `${field}/${index}`,
        `must be ${what === 'addresses' ? 'an IPv4 or IPv6 address' : 'an IPv4 or IPv6 CIDR'}`,
        `Invalid request body: ${field} holds ${JSON.stringify(value)}, which is not ${
          what === 'addresses'
            ? 'an IPv4 or IPv6 address (like 10.8.0.1 or fd00::1)'
            : 'a CIDR (like 10.8.0.0/24, 0.0.0.0/0 or ::/0)'
        }`,
      );
    }
  });
}

function checkWhole(value: number | undefined, field: string, min: number, max: number): void {
  if (value === undefined) return;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw invalid(
      field,
      `must be an integer from ${min} to ${max}`,
      `Invalid request body: ${field} must be an integer from ${min} to ${max}`,
    );
  }
}

/** Throws ValidationError (400, with `details`) for a field a create cannot take. */
export function checkCreateOptions(options: CreateOptions): void {
  if (options.name !== undefined) checkName(options.name);
  if (options.presharedKey !== undefined && typeof options.presharedKey !== 'boolean') {
    throw invalid(
      'presharedKey',
      'must be a boolean',
      'Invalid request body: presharedKey must be true or false',
    );
  }
  checkList(options.dns, 'dns', CLIENT_DNS_MAX_ITEMS, isIpAddressText, 'addresses', 0);
  checkList(options.allowedIps, 'allowedIps', CLIENT_ALLOWED_IPS_MAX_ITEMS, isCidrText, 'CIDRs', 1);
  checkWhole(options.mtu, 'mtu', CLIENT_MTU_MIN, CLIENT_MTU_MAX);
  checkWhole(options.persistentKeepalive, 'persistentKeepalive', 0, CLIENT_KEEPALIVE_MAX);
}

/** A create's options over the daemon's defaults. */
export function clientChoices(options: CreateOptions, defaults: ClientDefaults): ClientChoices {
  return {
    dns: options.dns ?? defaults.dns,
    allowedIps: options.allowedIps ?? defaults.allowedIps,
    mtu: options.mtu ?? defaults.mtu,
    persistentKeepalive: options.persistentKeepalive ?? defaults.persistentKeepalive,
    presharedKey: options.presharedKey ?? defaults.presharedKeys,
  };
}
