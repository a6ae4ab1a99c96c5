/**
 * The peers' preshared keys as WG_CMD_GET_DEVICE reports them, for one purpose (issue 31): a
 * start with a state directory that takes a peer's record from the kernel (an adopted interface,
 * a peer the journal lacks) saves its preshared key, so that a reboot can put the peer back with
 * it. /usr/include/linux/wireguard.h: "WGPEER_A_PRESHARED_KEY: NLA_EXACT_LEN, len WG_KEY_LEN" in
 * each peer of WGDEVICE_A_PEERS; the kernel's dump (netlink.c get_peer) sends it in a peer's
 * first entry, all zeros when the peer has none, and the command needs CAP_NET_ADMIN. The
 * ordinary device read (./dump.ts) reads only whether it is set. Each key's bytes are copied out
 * once and zeroed in the received message at once; the caller owns the copies, zeroes them after
 * use and never logs them.
 */
import { AttributeCursor, NetlinkProtocolError } from '../../netlink';
import {
  WGDEVICE_A_PEERS,
  WGPEER_A_PRESHARED_KEY,
  WGPEER_A_PUBLIC_KEY,
  WG_KEY_LEN,
  base64Key,
} from './schema';

const MESSAGE = new AttributeCursor();
const PEERS = new AttributeCursor();
const PEER = new AttributeCursor();

/**
 * The non-zero preshared keys of a whole dump by the peer's public key (base64); every key's
 * bytes in the replies are zeroed. A key of another length than WG_KEY_LEN is a protocol error
 * (zeroed too).
 */
export function takePresharedKeys(replies: readonly Buffer[]): Map<string, Buffer> {
  const keys = new Map<string, Buffer>();
  for (const attributes of replies) {
    MESSAGE.reset(attributes, 0, attributes.length);
    while (MESSAGE.next()) {
      if (MESSAGE.type !== WGDEVICE_A_PEERS) continue;
      MESSAGE.enter(PEERS);
      while (PEERS.next()) {
        PEERS.enter(PEER);
        let publicKey: string | null = null;
        let key: Buffer | null = null;
        while (PEER.next()) {
          if (PEER.type === WGPEER_A_PUBLIC_KEY) {
            publicKey = base64Key.read(PEER.buffer, PEER.at(WG_KEY_LEN, 'publicKey'));
          } else if (PEER.type === WGPEER_A_PRESHARED_KEY) {
            const value = PEER.buffer.subarray(PEER.start, PEER.end);
            if (value.length !== WG_KEY_LEN) {
              value.fill(0);
              throw new NetlinkProtocolError(
                `wgdevice.peers.presharedKey: expected ${WG_KEY_LEN} bytes, got ${value.length}`,
              );
            }
            key?.fill(0);
            key = value.some((byte) => byte !== 0) ? Buffer.from(value) : null;
            value.fill(0);
          }
        }
        if (publicKey !== null && key !== null) {
          keys.get(publicKey)?.fill(0);
          keys.set(publicKey, key);
        } else key?.fill(0);
      }
    }
  }
  return keys;
}
