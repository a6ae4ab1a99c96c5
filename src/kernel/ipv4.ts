/**
 * The one IPv4 module of the daemon: a strict dotted-quad parser and formatter (text, unsigned
 * 32-bit numbers, 4 network-order bytes) and the prefix arithmetic that allocation, validation,
 * tc keys and nft elements need. Strict: exactly four decimal octets 0-255 without leading
 * zeros ("01.2.3.4" could be read as octal by other tools), nothing else; every caller gets the
 * same answer. It lives in the kernel layer because the kernel modules need it and imports run
 * downwards only; the domain (src/peers) and the configuration use it from here.
 */

const DOTTED = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

export function isIpv4(text: string): boolean {
  return DOTTED.test(text);
}

/** "10.8.0.1" → 0x0a080001. Throws on anything that is not dotted-quad IPv4. */
export function ipv4ToNumber(text: string): number {
  if (!isIpv4(text)) throw new RangeError(`not an IPv4 address: ${text}`);
  // Checked above: digits and three dots. Read in place (a restore parses 100,000s of them).
  let value = 0;
  let octet = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 46) {
      value = value * 256 + octet;
      octet = 0;
    } else {
      octet = octet * 10 + code - 48;
    }
  }
  return value * 256 + octet;
}

export function numberToIpv4(value: number): string {
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) {
    throw new RangeError(`not an unsigned 32-bit number: ${value}`);
  }
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

/** "10.8.0.1" → 4 network-order bytes. Throws on anything that is not dotted-quad IPv4. */
export function ipv4ToBytes(text: string): Buffer {
  const buffer = Buffer.allocUnsafe(4); // every byte written below
  buffer.writeUInt32BE(ipv4ToNumber(text));
  return buffer;
}

/** 4 network-order bytes → "10.8.0.1". Throws on any other length. */
export function bytesToIpv4(data: Buffer): string {
  if (data.length !== 4) throw new RangeError(`an IPv4 address is 4 bytes, got ${data.length}`);
  return numberToIpv4(data.readUInt32BE(0));
}

/** Netmask of a prefix length as an unsigned number (prefix 0 → 0). */
export function prefixMask(prefixLength: number): number {
  if (!Number.isInteger(prefixLength) || prefixLength < 0 || prefixLength > 32) {
    throw new RangeError(`not an IPv4 prefix length: ${prefixLength}`);
  }
  return prefixLength === 0 ? 0 : (0xffffffff << (32 - prefixLength)) >>> 0;
}

/** An inclusive range of IPv4 addresses as numbers. */
export interface Ipv4Range {
  first: number;
  last: number;
}

/** All addresses of the prefix that contains `address`, network and broadcast included. */
export function prefixRange(address: string, prefixLength: number): Ipv4Range {
  const mask = prefixMask(prefixLength);
  const first = (ipv4ToNumber(address) & mask) >>> 0;
  const last = (first | ~mask) >>> 0;
  return { first, last };
}

/** "10.8.0.0/24" for 10.8.0.1 with prefix 24. */
export function networkCidr(address: string, prefixLength: number): string {
  return `${numberToIpv4(prefixRange(address, prefixLength).first)}/${prefixLength}`;
}

/**
 * Host addresses of a subnet: without network and broadcast address for prefixes up to /30;
 * both addresses of a /31 (RFC 3021); the single address of a /32.
 */
export function hostRange(address: string, prefixLength: number): Ipv4Range {
  const { first, last } = prefixRange(address, prefixLength);
  if (prefixLength >= 31) return { first, last };
  return { first: first + 1, last: last - 1 };
}
