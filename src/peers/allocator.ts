/**
 * Address allocation: the lowest free host address of the interface's IPv4 subnet and, on a
 * dual-stack interface, the lowest free /128 of its IPv6 prefix. Not free are the network and
 * broadcast addresses (IPv4) or the Subnet-Router anycast address (IPv6, RFC 4291 §2.6.1), the
 * server's own addresses, and every address inside any peer's allowed IPs of that family,
 * whatever their prefix length.
 */
import type { IpPrefix, Ipv4Address, Ipv6Address } from '../kernel/types';
import { hostRange, ipv4ToNumber, numberToIpv4, prefixRange } from '../kernel/ipv4';
import { bigIntToIpv6, hostRange6, ipv6ToBigInt, prefixRange6 } from '../kernel/ipv6';

export interface AllocationInput {
  /** The subnet to allocate from: the server's address and its prefix length. */
  subnet: Ipv4Address;
  /** Every IPv4 address of the interface (the subnet's own address included). */
  serverAddresses: readonly Ipv4Address[];
  /** Allowed IPs of every peer on the interface; IPv6 entries are ignored. */
  allowedIps: readonly IpPrefix[];
}

export interface Allocation6Input {
  /** The prefix to allocate from: the server's IPv6 address and its prefix length. */
  prefix: Ipv6Address;
  /** Every IPv6 address of the interface (the prefix's own address included). */
  serverAddresses: readonly Ipv6Address[];
  /** Allowed IPs of every peer on the interface; IPv4 entries are ignored. */
  allowedIps: readonly IpPrefix[];
}

/** An inclusive range of addresses as numbers of one family. */
interface Range<N extends number | bigint> {
  first: N;
  last: N;
}

/**
 * The lowest address of `hosts` inside none of the `taken` ranges, or null. One walk over the
 * ranges sorted by their start, whichever family: `next` is n + 1 in the family's numbers.
 */
function lowestFree<N extends number | bigint>(
  hosts: Range<N>,
  taken: Range<N>[],
  next: (n: N) => N,
): N | null {
  taken.sort((a, b) => (a.first < b.first ? -1 : a.first > b.first ? 1 : 0));
  let candidate = hosts.first;
  for (const range of taken) {
    if (candidate > hosts.last) break;
    if (range.last < candidate) continue;
    if (range.first > candidate) break;
    candidate = next(range.last);
  }
  return candidate <= hosts.last ? candidate : null;
}

/** Returns the lowest free address, or null when the subnet has none left. */
export function allocateAddress(input: AllocationInput): string | null {
  const taken: Range<number>[] = [];
  for (const server of input.serverAddresses) {
    const value = ipv4ToNumber(server.address);
    taken.push({ first: value, last: value });
  }
  for (const prefix of input.allowedIps) {
    if (prefix.family !== 4) continue;
    taken.push(prefixRange(prefix.address, prefix.cidr));
  }
  const hosts = hostRange(input.subnet.address, input.subnet.prefixLength);
  const free = lowestFree(hosts, taken, (n) => n + 1);
  return free === null ? null : numberToIpv4(free);
}

/** Returns the lowest free IPv6 address of the prefix, or null when it has none left. */
export function allocateAddress6(input: Allocation6Input): string | null {
  const taken: Range<bigint>[] = [];
  for (const server of input.serverAddresses) {
    const value = ipv6ToBigInt(server.address);
    taken.push({ first: value, last: value });
  }
  for (const prefix of input.allowedIps) {
    if (prefix.family !== 6) continue;
    taken.push(prefixRange6(prefix.address, prefix.cidr));
  }
  const hosts = hostRange6(input.prefix.address, input.prefix.prefixLength);
  const free = lowestFree(hosts, taken, (n) => n + 1n);
  return free === null ? null : bigIntToIpv6(free);
}
