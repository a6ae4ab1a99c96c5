/**
 * The one IPv6 module of the daemon, beside ipv4.ts: a strict parser and an RFC 5952 formatter
 * (text, unsigned 128-bit bigints, 16 network-order bytes) and the prefix arithmetic that
 * allocation, validation, tc keys and nft elements need. Strict: the eight-group hexadecimal
 * form of RFC 4291 §2.2 with at most one "::", without a zone ("%eth0") and without an embedded
 * dotted IPv4 tail (no tunnel address is written that way); every caller gets the same answer.
 */

const GROUP = /^[0-9a-fA-F]{1,4}$/;
const ALL_ONES = (1n << 128n) - 1n;

export function isIpv6(text: string): boolean {
  return parseGroups(text) !== null;
}

function parseGroups(text: string): number[] | null {
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const split = (half: string): string[] | null => {
    if (half === '') return [];
    const groups = half.split(':');
    return groups.every((g) => GROUP.test(g)) ? groups : null;
  };
  const head = split(halves[0]!);
  const tail = halves.length === 2 ? split(halves[1]!) : [];
  if (head === null || tail === null) return null;
  const given = head.length + tail.length;
  // "::" stands for at least one zero group (RFC 5952 §4.2.2 writes it for two or more, but
  // RFC 4291 reads it for one too).
  if (halves.length === 2 ? given > 7 : given !== 8) return null;
  const zeros = Array<string>(8 - given).fill('0');
  return [...head, ...zeros, ...tail].map((g) => parseInt(g, 16));
}

/** "fd42::1" → 0xfd42…0001n. Throws on anything that is not IPv6 text as above. */
export function ipv6ToBigInt(text: string): bigint {
  const groups = parseGroups(text);
  if (groups === null) throw new RangeError(`not an IPv6 address: ${text}`);
  return groups.reduce((acc, group) => (acc << 16n) | BigInt(group), 0n);
}

/** 16 network-order bytes of the address. */
export function ipv6ToBytes(text: string): Buffer {
  const value = ipv6ToBigInt(text);
  const buffer = Buffer.alloc(16);
  buffer.writeBigUInt64BE(value >> 64n, 0);
  buffer.writeBigUInt64BE(value & 0xffffffffffffffffn, 8);
  return buffer;
}

export function bigIntToIpv6(value: bigint): string {
  if (value < 0n || value > ALL_ONES) throw new RangeError(`not an unsigned 128-bit number`);
  const buffer = Buffer.alloc(16);
  buffer.writeBigUInt64BE(value >> 64n, 0);
  buffer.writeBigUInt64BE(value & 0xffffffffffffffffn, 8);
  return ipv6Text(buffer, 0);
}

/** 16 network-order bytes → RFC 5952 text. Throws on any other length. */
export function bytesToIpv6(data: Buffer): string {
  if (data.length !== 16) throw new RangeError(`an IPv6 address is 16 bytes, got ${data.length}`);
  return ipv6Text(data, 0);
}

/**
 * 16 address bytes at `start` as RFC 5952 text: lowercase hex groups without leading zeros, the
 * longest run of two or more zero groups (the first of equal runs) as "::".
 */
export function ipv6Text(buffer: Buffer, start: number): string {
  let bestStart = -1;
  let bestLength = 1;
  let runStart = -1;
  for (let group = 0; group <= 8; group++) {
    const zero =
      group < 8 && buffer[start + 2 * group] === 0 && buffer[start + 2 * group + 1] === 0;
    if (zero) {
      if (runStart === -1) runStart = group;
    } else if (runStart !== -1) {
      if (group - runStart > bestLength) {
        bestStart = runStart;
        bestLength = group - runStart;
      }
      runStart = -1;
    }
  }
  let text = '';
  for (let group = 0; group < 8; group++) {
    if (group === bestStart) {
      text += '::';
      group += bestLength - 1;
      continue;
    }
    const value = (buffer[start + 2 * group]! << 8) | buffer[start + 2 * group + 1]!;
    text += text === '' || text.endsWith(':') ? value.toString(16) : `:${value.toString(16)}`;
  }
  return text;
}

/** Netmask of a prefix length as a 128-bit number (prefix 0 → 0). */
export function prefixMask6(prefixLength: number): bigint {
  if (!Number.isInteger(prefixLength) || prefixLength < 0 || prefixLength > 128) {
    throw new RangeError(`not an IPv6 prefix length: ${prefixLength}`);
  }
  return (ALL_ONES << BigInt(128 - prefixLength)) & ALL_ONES;
}

/** An inclusive range of IPv6 addresses as numbers. */
export interface Ipv6Range {
  first: bigint;
  last: bigint;
}

/** All addresses of the prefix that contains `address`. */
export function prefixRange6(address: string, prefixLength: number): Ipv6Range {
  const mask = prefixMask6(prefixLength);
  const first = ipv6ToBigInt(address) & mask;
  return { first, last: first | (~mask & ALL_ONES) };
}

/** "fd42::/64" for fd42::1 with prefix 64. */
export function networkCidr6(address: string, prefixLength: number): string {
  return `${bigIntToIpv6(prefixRange6(address, prefixLength).first)}/${prefixLength}`;
}

/**
 * Addresses a peer may get from a prefix: all but the first, the Subnet-Router anycast address
 * (RFC 4291 §2.6.1: the prefix with an all-zero interface identifier). IPv6 has no broadcast.
 */
export function hostRange6(address: string, prefixLength: number): Ipv6Range {
  const { first, last } = prefixRange6(address, prefixLength);
  return { first: first + 1n, last };
}
