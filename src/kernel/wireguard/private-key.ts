/**
 * The device's private key as WG_CMD_GET_DEVICE reports it, for one purpose: a start with a state
 * directory adopting an interface it did not create saves that key, so that a reboot can create
 * the interface again with it (issue 28). /usr/include/linux/wireguard.h: "WGDEVICE_A_PRIVATE_KEY:
 * NLA_EXACT_LEN, len WG_KEY_LEN", sent (with WGDEVICE_A_PUBLIC_KEY) in the first message of the
 * dump when the device has a key, and the command needs CAP_NET_ADMIN. The ordinary device read
 * (./dump.ts, ./schema.ts) skips the attribute, so the key is held nowhere else in the daemon.
 * One decoder per reply: each message is walked with the netlink layer's AttributeCursor; the
 * key's bytes are copied out once and zeroed in the received message at once. The caller owns
 * the copy, zeroes it after use and never logs it.
 */
import { AttributeCursor, NetlinkProtocolError } from '../../netlink';
import { WGDEVICE_A_PRIVATE_KEY, WG_KEY_LEN } from './schema';

/**
 * The private key in one reply's attributes, or null when the reply has none; its bytes in the
 * reply are zeroed. A key of another length than WG_KEY_LEN is a protocol error (zeroed too).
 */
export function takePrivateKey(attributes: Buffer): Buffer | null {
  const cursor = new AttributeCursor(attributes, 0, attributes.length);
  let key: Buffer | null = null;
  while (cursor.next()) {
    if (cursor.type !== WGDEVICE_A_PRIVATE_KEY) continue;
    const value = attributes.subarray(cursor.start, cursor.end);
    if (value.length !== WG_KEY_LEN) {
      value.fill(0);
      throw new NetlinkProtocolError(
        `wgdevice.privateKey: expected ${WG_KEY_LEN} bytes, got ${value.length}`,
      );
    }
    key?.fill(0); // a repeated attribute keeps its last value, as the table codec's do
    key = Buffer.from(value);
    value.fill(0);
  }
  return key;
}

/**
 * The key of a whole dump: the first reply's (the device's own fields come in the first message),
 * every reply's copy zeroed. Null: the device has no private key.
 */
export function takeDevicePrivateKey(replies: readonly Buffer[]): Buffer | null {
  let key: Buffer | null = null;
  for (const [index, attributes] of replies.entries()) {
    const found = takePrivateKey(attributes);
    if (index === 0) key = found;
    else found?.fill(0);
  }
  return key;
}
