import { expect } from 'chai';
import { TranscriptPlayer } from '../../../src/netlink/transcript';
import { NetlinkProtocolError, decodeAttributes, encodeAttributes } from '../../../src/netlink';
import { WireGuard } from '../../../src/kernel/wireguard';
import { takeDevicePrivateKey, takePrivateKey } from '../../../src/kernel/wireguard/private-key';
import {
  WGDEVICE_A_PRIVATE_KEY,
  deviceReadAttributes,
  deviceWriteAttributes,
} from '../../../src/kernel/wireguard/schema';
import { FIXTURES } from '../../support/transcripts';
import { WG_IF, serverKeys } from '../../transcripts/wireguard';
import path from 'node:path';

const KEY = Buffer.from(serverKeys.privateKeyBase64, 'base64');

/** A first dump message as the kernel builds it: name, private key, port (wireguard.h order). */
function firstMessage(privateKey?: Buffer): Buffer {
  return encodeAttributes(deviceWriteAttributes, {
    ifname: 'wg0',
    ...(privateKey === undefined ? {} : { privateKey }),
    listenPort: 51820,
  });
}

// Issue 28: adopting an interface saves its private key, read back from the kernel
// (WGDEVICE_A_PRIVATE_KEY, /usr/include/linux/wireguard.h: WG_KEY_LEN bytes, in the first
// message of WG_CMD_GET_DEVICE's dump, to CAP_NET_ADMIN only).
describe('kernel/wireguard: reading the private key of an interface being adopted', () => {
  it("reads the key `wg set private-key` gave the recorded device, from the kernel's own answer", async () => {
    const player = TranscriptPlayer.load(path.join(FIXTURES, 'wireguard-device.json'));
    const key = await new WireGuard(player.open).readPrivateKey(WG_IF);
    expect(key?.equals(KEY)).to.equal(true);
  });

  it('copies the key out and zeroes it in the received message, leaving the other attributes', () => {
    const message = firstMessage(KEY);
    const key = takePrivateKey(message);
    expect(key?.equals(KEY)).to.equal(true);
    expect(message.includes(KEY)).to.equal(false);
    expect(decodeAttributes(deviceReadAttributes, message)).to.deep.equal({
      ifname: 'wg0',
      listenPort: 51820,
    });
    key!.fill(0); // the caller's copy is its own
    expect(takePrivateKey(firstMessage(KEY))?.equals(KEY)).to.equal(true);
  });

  it('answers null for a device without a key', () => {
    expect(takeDevicePrivateKey([firstMessage()])).to.equal(null);
  });

  it("takes the first message's key and zeroes any in later messages", () => {
    const other = Buffer.alloc(32, 9);
    const later = firstMessage(other);
    expect(takeDevicePrivateKey([firstMessage(KEY), later])?.equals(KEY)).to.equal(true);
    expect(later.includes(other)).to.equal(false);
  });

  it('refuses a key of another length than 32 bytes, zeroing it too', () => {
    const short = Buffer.alloc(16, 5);
    const message = Buffer.alloc(4 + 16);
    message.writeUInt16LE(20, 0);
    message.writeUInt16LE(WGDEVICE_A_PRIVATE_KEY, 2);
    short.copy(message, 4);
    expect(() => takePrivateKey(message))
      .to.throw(NetlinkProtocolError)
      .with.property('message')
      .that.contains('expected 32 bytes, got 16');
    expect(message.subarray(4).equals(Buffer.alloc(16))).to.equal(true);
  });
});
