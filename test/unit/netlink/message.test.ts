import { expect } from 'chai';
import {
  NLMSG_ERROR,
  NLM_F_ACK_TLVS,
  NetlinkProtocolError,
  encodeMessage,
  nlmsghdr,
  parseErrorPayload,
  parseMessages,
} from '../../../src/netlink';
import { tcmsg } from '../../../src/kernel/rtnetlink';

describe('netlink messages', () => {
  it('encodes nlmsghdr as len, type, flags, seq, pid in host order (linux/netlink.h)', () => {
    const encoded = encodeMessage({
      type: 0x12,
      flags: 0x305,
      seq: 7,
      pid: 0,
      payload: Buffer.from([1, 2, 3]),
    });
    // nlmsg_len counts the header and payload (19) but the buffer is padded to 20.
    expect(encoded.toString('hex')).to.equal(
      '13000000' + '1200' + '0503' + '07000000' + '00000000' + '01020300',
    );
  });

  it('splits a datagram holding several aligned messages', () => {
    const datagram = Buffer.concat([
      encodeMessage({ type: 100, flags: 2, seq: 1, pid: 9, payload: Buffer.from('abcde') }),
      encodeMessage({ type: 3, flags: 2, seq: 1, pid: 9, payload: Buffer.alloc(4) }),
    ]);
    const messages = parseMessages(datagram);
    expect(messages.map((m) => [m.type, m.payload.length])).to.deep.equal([
      [100, 5],
      [3, 4],
    ]);
  });

  it('reads every nlmsghdr field of each message as the struct table reads it, in host order', () => {
    const sent = [
      { type: 0xfffe, flags: 0x8302, seq: 0xfffffff0, pid: 0x80000001, payload: Buffer.alloc(3) },
      { type: 16, flags: 0x22, seq: 1, pid: 4_000_000_000, payload: Buffer.from('x') },
    ];
    const datagram = Buffer.concat(sent.map((message) => encodeMessage(message)));
    const messages = parseMessages(datagram);
    expect(messages).to.deep.equal(sent);
    let offset = 0;
    for (const message of messages) {
      const header = nlmsghdr.readFrom(datagram, offset);
      expect([message.type, message.flags, message.seq, message.pid]).to.deep.equal([
        header.type,
        header.flags,
        header.seq,
        header.pid,
      ]);
      offset += (header.len + 3) & ~3;
    }
  });

  it('rejects a message claiming more bytes than the datagram has', () => {
    const datagram = encodeMessage({
      type: 100,
      flags: 0,
      seq: 1,
      pid: 0,
      payload: Buffer.alloc(8),
    });
    expect(() => parseMessages(datagram.subarray(0, 20))).to.throw(NetlinkProtocolError);
    expect(() => parseMessages(datagram.subarray(0, 10))).to.throw(NetlinkProtocolError);
  });

  it('finds the extended-ACK TLVs after an uncapped echo of the request', () => {
    // {int error=-EINVAL; nlmsghdr of a 24-byte request; its 8-byte body; TLV MSG "bad"}
    const echoed = encodeMessage({ type: 16, flags: 5, seq: 3, pid: 0, payload: Buffer.alloc(8) });
    const errno = Buffer.alloc(4);
    errno.writeInt32LE(-22);
    const tlv = Buffer.from('0800010062616400', 'hex');
    const payload = Buffer.concat([errno, echoed, tlv]);
    const report = parseErrorPayload({
      type: NLMSG_ERROR,
      flags: NLM_F_ACK_TLVS,
      seq: 3,
      pid: 1,
      payload,
    });
    expect(report).to.include({ errno: 22, requestSeq: 3, kernelMessage: 'bad' });
  });

  it('decodes C structs by their field tables, zero-filling what is left out', () => {
    expect(tcmsg.size).to.equal(20); // sizeof(struct tcmsg)
    const encoded = tcmsg.encode({ ifindex: 3, parent: 0xffffffff });
    expect(encoded.toString('hex')).to.equal(
      '00000000' + '03000000' + '00000000' + 'ffffffff' + '00000000',
    );
    expect(tcmsg.decode(encoded)).to.deep.equal({
      family: 0,
      pad1: 0,
      pad2: 0,
      ifindex: 3,
      handle: 0,
      parent: 0xffffffff,
      info: 0,
    });
    expect(() => tcmsg.decode(encoded.subarray(0, 19))).to.throw(NetlinkProtocolError);
  });
});
