/**
 * WireGuard over generic netlink: read a device (WG_CMD_GET_DEVICE, a dump that a large device
 * spreads over many messages), read its private key alone (an interface being adopted), configure
 * it and add or remove peers (WG_CMD_SET_DEVICE, split into several messages when large).
 */
import {
  AttributeWriter,
  GENL_ID_CTRL,
  GenericNetlink,
  NLA_F_NESTED,
  NLA_HDRLEN,
  type GenlReply,
  NETLINK_GENERIC,
  NetlinkSocket,
  type TransportFactory,
  encodeAttributes,
  openNativeTransport,
  writeAttributes,
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
  WGDEVICE_A_PEERS,
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
 * A peer configuration as SET_DEVICE entries: a peer with more allowed IPs than fit in one entry
 * continues in later entries, where REPLACE_ALLOWEDIPS and the keepalive go in its first entry
 * only (a later REPLACE would drop the IPs just added), while REMOVE_ME and UPDATE_ONLY go in
 * every entry.
 */
function peerEntries(peers: PeerAttributes[]): PeerAttributes[] {
  const entries: PeerAttributes[] = [];
  for (const peer of peers) {
    const ips = peer.allowedIps ?? [];
    if (ips.length <= ALLOWED_IPS_PER_ENTRY) {
      // An empty list goes as no WGPEER_A_ALLOWEDIPS at all.
      entries.push(ips.length > 0 ? peer : { ...peer, allowedIps: undefined });
      continue;
    }
    const continuationFlags = (peer.flags ?? 0) & (WGPEER_F_REMOVE_ME | WGPEER_F_UPDATE_ONLY);
    for (let start = 0; start < ips.length; start += ALLOWED_IPS_PER_ENTRY) {
      const chunk = ips.slice(start, start + ALLOWED_IPS_PER_ENTRY);
      entries.push(
        start === 0
          ? { ...peer, allowedIps: chunk }
          : { publicKey: peer.publicKey, flags: continuationFlags, allowedIps: chunk },
      );
    }
  }
  return entries;
}

/**
 * The attributes of the SET_DEVICE messages that configure `peers` on device `name`: each
 * {WGDEVICE_A_IFNAME, WGDEVICE_A_PEERS} with at most PEERS_BYTES_PER_MESSAGE of peer entries
 * (a message holds at least one). Every entry and allowed-IP entry goes out with NLA_F_NESTED,
 * which WireGuard's strict nla_parse_nested requires. Each entry is encoded once, in place: the
 * one that overflows a message is moved to the next.
 */
export function setPeerMessages(name: string, peers: PeerAttributes[]): Buffer[] {
  const messages: Buffer[] = [];
  let writer: AttributeWriter | null = null;
  let list = 0;
  let count = 0;
  const open = (): AttributeWriter => {
    const next = new AttributeWriter(PEERS_BYTES_PER_MESSAGE + 1024);
    writeAttributes(next, deviceWriteAttributes, { ifname: name });
    list = next.begin(WGDEVICE_A_PEERS, NLA_F_NESTED);
    count = 0;
    return next;
  };
  const close = (done: AttributeWriter): void => {
    messages.push(done.end(list).toBuffer());
  };
  for (const entry of peerEntries(peers)) {
    writer ??= open();
    const mark = writer.length;
    const start = writer.begin(0, NLA_F_NESTED);
    writeAttributes(writer, peerWriteAttributes, entry);
    writer.end(start);
    if (count > 0 && writer.length - list - NLA_HDRLEN > PEERS_BYTES_PER_MESSAGE) {
      const moved = Buffer.from(writer.buffer.subarray(mark, writer.length));
      writer.truncate(mark);
      close(writer);
      writer = open();
      writer.bytes(moved);
    }
    count++;
  }
  if (writer !== null) close(writer);
  return messages;
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
    const messages = setPeerMessages(name, peers);
    for (const [index, attributes] of messages.entries()) {
      const operation =
        messages.length === 1
          ? `WG_CMD_SET_DEVICE ${name} (${verb} ${peers.length} peer${peers.length === 1 ? '' : 's'})`
          : `WG_CMD_SET_DEVICE ${name} (${verb} peers, message ${index + 1} of ${messages.length})`;
      await this.call(name, WG_CMD_SET_DEVICE, attributes, operation, false);
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
