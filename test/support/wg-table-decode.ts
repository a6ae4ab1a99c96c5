/**
 * The reference decoder of a WG_CMD_GET_DEVICE dump, over the attribute tables alone
 * (decodeAttributes with src/kernel/wireguard/schema.ts's deviceReadAttributes): the oracle
 * the daemon's dump decoder (src/kernel/wireguard/dump.ts) is held deep-equal to in the unit
 * tests, the fuzzer and the benchmarks. No production code needs it; it lives here.
 *
 * Merges the messages of one GET_DEVICE dump. Only the first carries the device's own fields;
 * later ones carry WGDEVICE_A_PEERS only (wg_get_device_dump), and a peer whose allowed IPs did
 * not fit is repeated at the start of the next message with its key and the remaining IPs.
 */
import { type Attributes, type GenlReply, decodeAttributes } from '../../src/netlink';
import { AF_INET, AF_INET6 } from '../../src/kernel/rtnetlink';
import type { IpPrefix, WireGuardDevice, WireGuardPeer } from '../../src/kernel/types';
import { deviceReadAttributes, type peerAttributes } from '../../src/kernel/wireguard/schema';

type PeerAttributes = Attributes<typeof peerAttributes>;
type DeviceAttributes = Attributes<typeof deviceReadAttributes>;

function fromAllowedIp(entry: NonNullable<PeerAttributes['allowedIps']>[number]): IpPrefix | null {
  if (entry.address === undefined) return null;
  if (entry.family === AF_INET)
    return { family: 4, address: entry.address, cidr: entry.cidr ?? 32 };
  if (entry.family === AF_INET6)
    return { family: 6, address: entry.address, cidr: entry.cidr ?? 128 };
  return null;
}

function toPeer(attributes: PeerAttributes): WireGuardPeer {
  const allowedIps: IpPrefix[] = [];
  for (const entry of attributes.allowedIps ?? []) {
    const prefix = fromAllowedIp(entry);
    if (prefix) allowedIps.push(prefix);
  }
  const peer: WireGuardPeer = {
    publicKey: attributes.publicKey ?? '',
    endpoint: attributes.endpoint ?? null,
    lastHandshake: attributes.lastHandshake ?? null,
    rxBytes: attributes.rxBytes ?? 0,
    txBytes: attributes.txBytes ?? 0,
    persistentKeepalive: attributes.persistentKeepalive ?? 0,
    allowedIps,
  };
  if (attributes.presharedKey === true) peer.presharedKey = true;
  return peer;
}

export function parseDevice(name: string, replies: GenlReply[]): WireGuardDevice {
  let device: DeviceAttributes | undefined;
  const peers = new Map<string, WireGuardPeer>();
  for (const reply of replies) {
    const attributes = decodeAttributes(deviceReadAttributes, reply.attributes, 'wgdevice');
    device ??= attributes;
    for (const peerAttributesEntry of attributes.peers ?? []) {
      const peer = toPeer(peerAttributesEntry);
      const earlier = peers.get(peer.publicKey);
      if (earlier) earlier.allowedIps.push(...peer.allowedIps);
      else peers.set(peer.publicKey, peer);
    }
  }
  return {
    name: device?.ifname ?? name,
    ifindex: device?.ifindex ?? 0,
    publicKey: device?.publicKey ?? null,
    listenPort: device?.listenPort ?? 0,
    fwmark: device?.fwmark ?? 0,
    peers: [...peers.values()],
  };
}
