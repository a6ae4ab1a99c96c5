/**
 * WireGuard over generic netlink: read a device (WG_CMD_GET_DEVICE, a dump that a large device
 * spreads over many messages), read its private key alone (an interface being adopted), configure
 * it and add or remove peers (WG_CMD_SET_DEVICE, split into several messages when large).
 */
import {
  GENL_ID_CTRL,
  GenericNetlink,
  type GenlReply,
  NETLINK_GENERIC,
  NetlinkSocket,
  type TransportFactory,
  encodeAttributes,
  nested,
  openNativeTransport,
} from '../../netlink';
import type { Attributes } from '../../netlink';
import {
  FacilityUnavailableError,
  InterfaceMissingError,
  NotWireGuardError,
  WIREGUARD_REMEDY,
  atBoundary,
} from '../errors';
import { AF_INET, AF_INET6 } from '../rtnetlink';
import { DumpMemo, decodeDeviceDump } from './dump';
import { takeDevicePrivateKey } from './private-key';
import { takePresharedKeys } from './preshared-keys';
import type { DeviceConfig, IpPrefix, PeerConfig, WireGuardApi, WireGuardDevice } from '../types';
import {
  WGPEER_F_REMOVE_ME,
  WGPEER_F_REPLACE_ALLOWEDIPS,
  WGPEER_F_UPDATE_ONLY,
  WG_CMD_GET_DEVICE,
  WG_CMD_SET_DEVICE,
  WG_GENL_NAME,
  deviceReadAttributes,
  deviceWriteAttributes,
  peerWriteAttributes,
} from './schema';

/**
 * Bytes of peer entries per SET message. WGDEVICE_A_PEERS is one attribute and nla_len is 16
 * bits, so a message can carry at most 64 KiB of peers; half of that leaves room and still
 * moves ~250 single-address peers per message.
 */
const PEERS_BYTES_PER_MESSAGE = 32 * 1024;
/** Allowed IPs per peer entry; a peer with more continues in further entries. */
const ALLOWED_IPS_PER_ENTRY = 256;

type PeerAttributes = Attributes<typeof peerWriteAttributes>;

function toAllowedIp(prefix: IpPrefix): NonNullable<PeerAttributes['allowedIps']>[number] {
  return {
    family: prefix.family === 4 ? AF_INET : AF_INET6,
    address: prefix.address,
    cidr: prefix.cidr,
  };
}

/**
 * Splits peer configurations into SET_DEVICE messages of bounded size. A peer with more
 * allowed IPs than fit in one entry continues in later entries: REPLACE_ALLOWEDIPS and the
 * keepalive go in its first entry only (a later REPLACE would drop the IPs just added), while
 * REMOVE_ME and UPDATE_ONLY go in every entry.
 */
export function planPeerMessages(peers: PeerAttributes[]): PeerAttributes[][] {
  const entries: PeerAttributes[] = [];
  for (const peer of peers) {
    const ips = peer.allowedIps ?? [];
    const continuationFlags = (peer.flags ?? 0) & (WGPEER_F_REMOVE_ME | WGPEER_F_UPDATE_ONLY);
    for (let start = 0; start === 0 || start < ips.length; start += ALLOWED_IPS_PER_ENTRY) {
      const chunk = ips.length > 0 ? ips.slice(start, start + ALLOWED_IPS_PER_ENTRY) : undefined;
      entries.push(
        start === 0
          ? { ...peer, allowedIps: chunk }
          : { publicKey: peer.publicKey, flags: continuationFlags, allowedIps: chunk },
      );
    }
  }
  const entryCodec = nested(peerWriteAttributes);
  const messages: PeerAttributes[][] = [];
  let current: PeerAttributes[] = [];
  let size = 0;
  for (const entry of entries) {
    const entrySize = entryCodec.encode(entry).length + 4;
    if (current.length > 0 && size + entrySize > PEERS_BYTES_PER_MESSAGE) {
      messages.push(current);
      current = [];
      size = 0;
    }
    current.push(entry);
    size += entrySize;
  }
  if (current.length > 0) messages.push(current);
  return messages;
}

/** Every peer entry and allowed-IP entry goes out with NLA_F_NESTED (the list codec sets it),
 * which WireGuard's strict nla_parse_nested requires. */
function setDeviceAttributes(name: string, peers: PeerAttributes[]): Buffer {
  return encodeAttributes(deviceWriteAttributes, { ifname: name, peers });
}

export class WireGuard implements WireGuardApi {
  private readonly genl: GenericNetlink;
  /** Per device: the previous dump's peers, reused where their bytes did not change. */
  private readonly memos = new Map<string, DumpMemo>();

  constructor(open: TransportFactory = openNativeTransport) {
    this.genl = new GenericNetlink(new NetlinkSocket(open(NETLINK_GENERIC)));
  }

  /** The WG_CMD_GET_DEVICE dump of one device, as the kernel's replies' attributes. */
  private async dumpDevice(name: string) {
    const replies = await this.call(
      name,
      WG_CMD_GET_DEVICE,
      encodeAttributes(deviceReadAttributes, { ifname: name }),
      `WG_CMD_GET_DEVICE ${name}`,
      true,
    );
    return replies.map((reply) => reply.attributes);
  }

  async getDevice(name: string): Promise<WireGuardDevice> {
    const replies = await this.dumpDevice(name);
    let memo = this.memos.get(name);
    if (memo === undefined) {
      memo = new DumpMemo();
      this.memos.set(name, memo);
    }
    return decodeDeviceDump(name, replies, memo);
  }

  /**
   * WG_CMD_GET_DEVICE again, read for WGDEVICE_A_PRIVATE_KEY alone (./private-key.ts): the key's
   * bytes in the received messages are zeroed once copied; the caller zeroes the copy.
   */
  async readPrivateKey(name: string): Promise<Buffer | null> {
    return takeDevicePrivateKey(await this.dumpDevice(name));
  }

  /**
   * WG_CMD_GET_DEVICE again, read for the peers' non-zero WGPEER_A_PRESHARED_KEYs alone
   * (./preshared-keys.ts): by public key; the keys' bytes in the received messages are zeroed
   * once copied; the caller zeroes the copies.
   */
  async readPresharedKeys(name: string): Promise<Map<string, Buffer>> {
    return takePresharedKeys(await this.dumpDevice(name));
  }

  async configureDevice(name: string, config: DeviceConfig): Promise<void> {
    await this.call(
      name,
      WG_CMD_SET_DEVICE,
      encodeAttributes(deviceWriteAttributes, {
        ifname: name,
        privateKey: config.privateKey,
        listenPort: config.listenPort,
      }),
      `WG_CMD_SET_DEVICE ${name}`,
      false,
    );
  }

  async addPeers(name: string, peers: PeerConfig[]): Promise<void> {
    await this.setPeers(
      name,
      peers.map((peer) => ({
        publicKey: peer.publicKey,
        flags:
          (peer.replaceAllowedIps ? WGPEER_F_REPLACE_ALLOWEDIPS : 0) |
          (peer.updateOnly ? WGPEER_F_UPDATE_ONLY : 0),
        persistentKeepalive: peer.persistentKeepalive,
        ...(peer.presharedKey === undefined ? {} : { presharedKey: peer.presharedKey }),
        allowedIps: peer.allowedIps.map(toAllowedIp),
      })),
      'add',
    );
  }

  /** Removing a key the device does not have is not an error (the kernel answers 0). */
  async removePeers(name: string, publicKeys: string[]): Promise<void> {
    await this.setPeers(
      name,
      publicKeys.map((key) => ({ publicKey: key, flags: WGPEER_F_REMOVE_ME })),
      'remove',
    );
  }

  close(): void {
    this.genl.socket.close();
  }

  /**
   * Sends the peers in as many messages as needed. WireGuard applies each message on its own,
   * so a failure in message k leaves messages 1..k-1 applied; the error says how far it got.
   */
  private async setPeers(name: string, peers: PeerAttributes[], verb: string): Promise<void> {
    const messages = planPeerMessages(peers);
    for (const [index, batch] of messages.entries()) {
      const operation =
        messages.length === 1
          ? `WG_CMD_SET_DEVICE ${name} (${verb} ${peers.length} peer${peers.length === 1 ? '' : 's'})`
          : `WG_CMD_SET_DEVICE ${name} (${verb} peers, message ${index + 1} of ${messages.length})`;
      await this.call(name, WG_CMD_SET_DEVICE, setDeviceAttributes(name, batch), operation, false);
    }
  }

  /**
   * Every WireGuard request names the device, so the errno is read here, for that device
   * (wireguard/netlink.c lookup_interface: ENODEV without such a link, EOPNOTSUPP for a link of
   * another kind; genetlink answers CTRL_CMD_GETFAMILY with ENOENT without the module).
   */
  private call(
    name: string,
    cmd: number,
    attributes: Buffer,
    operation: string,
    dump: boolean,
  ): Promise<GenlReply[]> {
    return atBoundary(
      () => this.genl.request(WG_GENL_NAME, cmd, attributes, { operation, dump }),
      (error) => {
        if (error.code === 'ENOENT' && error.messageType === GENL_ID_CTRL) {
          return new FacilityUnavailableError(
            'WireGuard (generic netlink family "wireguard")',
            WIREGUARD_REMEDY,
            { cause: error },
          );
        }
        if (error.code === 'ENODEV') return new InterfaceMissingError(name, { cause: error });
        if (error.code === 'EOPNOTSUPP' || error.code === 'ENOTSUP') {
          return new NotWireGuardError(name, null, { cause: error });
        }
        return undefined;
      },
    );
  }
}
