/**
 * CIDR texts as the journal keeps them ("10.8.0.2/32", "fd42::2/128"), read back as the kernel
 * layer's prefixes. Pure.
 */
import type { IpPrefix } from '../kernel/types';

export function prefixOf(cidr: string): IpPrefix {
  const [address, length] = cidr.split('/');
  return { family: address.includes(':') ? 6 : 4, address, cidr: Number(length) };
}
