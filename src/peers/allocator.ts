/**
 * Address allocation: the lowest free host address of the interface's IPv4 subnet. Not free are
 * the network and broadcast addresses, the server's own addresses, and every address inside any
 * peer's IPv4 allowed IPs, whatever their prefix length.
 */
import type { IpPrefix, Ipv4Address } from '../kernel/types';
import { hostRange, ipv4ToNumber, numberToIpv4, prefixRange, type Ipv4Range } from '../kernel/ipv4';

export interface AllocationInput {
  /** The subnet to allocate from: the server's address and its prefix length. */
  subnet: Ipv4Address;
  /** Every IPv4 address of the interface (the subnet's own address included). */
  serverAddresses: readonly Ipv4Address[];
  /** Allowed IPs of every peer on the interface; IPv6 entries are ignored. */
  allowedIps: readonly IpPrefix[];
}

/** Returns the lowest free address, or null when the subnet has none left. */
export function allocateAddress(input: AllocationInput): string | null {
  const hosts = hostRange(input.subnet.address, input.subnet.prefixLength);
  const taken: Ipv4Range[] = [];
  for (const server of input.serverAddresses) {
    const value = ipv4ToNumber(server.address);
    taken.push({ first: value, last: value });
  }
  for (const prefix of input.allowedIps) {
    if (prefix.family !== 4) continue;
    taken.push(prefixRange(prefix.address, prefix.cidr));
  }
  taken.sort((a, b) => a.first - b.first);

  let candidate = hosts.first;
  for (const range of taken) {
    if (candidate > hosts.last) break;
    if (range.last < candidate) continue;
    if (range.first > candidate) break;
    candidate = range.last + 1;
  }
  return candidate <= hosts.last ? numberToIpv4(candidate) : null;
}
