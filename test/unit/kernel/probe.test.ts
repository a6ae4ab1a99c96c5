/**
 * The readiness probe's three kernel questions (src/kernel/probe.ts), on the wire. Golden bytes:
 * the requests that `tc qdisc show` (iproute2 6.1) and `nft list tables` (nftables 1.0.6) send
 * for the same questions, captured with `strace -e trace=sendmsg,sendto` in a scratch network
 * namespace; the replies are built here by the layout of linux/netlink.h and nf_tables.h.
 */
import { expect } from 'chai';
import { Probe } from '../../../src/kernel/probe';
import type { DatagramHandler, Transport } from '../../../src/netlink';

const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLM_F_REQUEST = 0x1;
const NLM_F_ACK = 0x4;
const NLM_F_DUMP = 0x300;

interface Sent {
  protocol: number;
  type: number;
  flags: number;
  payload: Buffer;
}

function message(type: number, flags: number, seq: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(16);
  header.writeUInt32LE(16 + payload.length, 0);
  header.writeUInt16LE(type, 4);
  header.writeUInt16LE(flags, 6);
  header.writeUInt32LE(seq, 8);
  header.writeUInt32LE(0, 12);
  return Buffer.concat([header, payload]);
}

/** A kernel that answers each request with `reply(sent)` then an ACK (or DONE for a dump). */
function scriptedOpen(reply: (sent: Sent) => Buffer[], sent: Sent[]) {
  return (protocol: number): Transport => {
    let handler: DatagramHandler = () => undefined;
    return {
      protocol,
      portId: 4242,
      receive(h) {
        handler = h;
      },
      setBusy() {},
      close() {},
      send(datagram) {
        const request: Sent = {
          protocol,
          type: datagram.readUInt16LE(4),
          flags: datagram.readUInt16LE(6),
          payload: datagram.subarray(16, datagram.readUInt32LE(0)),
        };
        sent.push(request);
        const seq = datagram.readUInt32LE(8);
        const end =
          request.flags & NLM_F_DUMP
            ? message(NLMSG_DONE, 0, seq, Buffer.alloc(4))
            : message(
                NLMSG_ERROR,
                0,
                seq,
                Buffer.concat([Buffer.alloc(4), datagram.subarray(0, 16)]),
              );
        const replies = reply(request).map((payload) => message(request.type, 0, seq, payload));
        setImmediate(() => handler(null, Buffer.concat([...replies, end])));
      },
    };
  };
}

describe('kernel/probe: cheap readiness questions', () => {
  it("dumps qdiscs as `tc qdisc show` does and counts only the interface's", async () => {
    const sent: Sent[] = [];
    const tcmsg = (ifindex: number) => {
      const b = Buffer.alloc(20);
      b.writeInt32LE(ifindex, 4);
      return b;
    };
    const probe = new Probe(scriptedOpen(() => [tcmsg(7), tcmsg(3), tcmsg(7)], sent));
    expect(await probe.qdiscCount(7)).to.equal(2);
    // strace of tc: RTM_GETQDISC (38), REQUEST|DUMP, struct tcmsg all zero (20 bytes).
    expect(sent).to.have.length(1);
    expect(sent[0]).to.deep.include({ protocol: 0, type: 38 });
    expect(sent[0]!.flags & (NLM_F_REQUEST | NLM_F_DUMP)).to.equal(NLM_F_REQUEST | NLM_F_DUMP);
    expect(sent[0]!.payload).to.deep.equal(Buffer.alloc(20));
  });

  it('asks the ruleset generation as `nft` does and reads NFTA_GEN_ID', async () => {
    const sent: Sent[] = [];
    // nfgenmsg, then NFTA_GEN_ID (1) as a big-endian u32: nla_len 8.
    const newgen = Buffer.from([0, 0, 0, 0, 8, 0, 1, 0, 0, 0, 0x01, 0x2c]);
    const probe = new Probe(scriptedOpen(() => [newgen], sent));
    expect(await probe.nftGeneration()).to.equal(300);
    // strace of nft: type NFNL_SUBSYS_NFTABLES<<8|NFT_MSG_GETGEN = 0xa10, REQUEST, nfgenmsg
    // {AF_UNSPEC, NFNETLINK_V0, res_id 0}. We also ask for an ACK.
    expect(sent).to.have.length(1);
    expect(sent[0]).to.deep.include({ protocol: 12, type: 0x0a10 });
    expect(sent[0]!.flags).to.equal(NLM_F_REQUEST | NLM_F_ACK);
    expect(sent[0]!.payload).to.deep.equal(Buffer.from([0, 0, 0, 0]));
  });

  it('looks the family up afresh each time (a module may be unloaded in between)', async () => {
    const sent: Sent[] = [];
    // CTRL_ATTR_FAMILY_ID (1) = 0x1b after genlmsghdr {CTRL_CMD_NEWFAMILY, 2}.
    const family = Buffer.from([1, 2, 0, 0, 6, 0, 1, 0, 0x1b, 0, 0, 0]);
    const probe = new Probe(scriptedOpen(() => [family], sent));
    await probe.genlFamily('wireguard');
    await probe.genlFamily('wireguard');
    expect(sent).to.have.length(2);
    for (const request of sent) {
      // GENL_ID_CTRL (0x10) on NETLINK_GENERIC (16), CTRL_CMD_GETFAMILY (3) naming "wireguard".
      expect(request).to.deep.include({ protocol: 16, type: 0x10 });
      expect(request.payload[0]).to.equal(3);
      expect(request.payload.subarray(4).toString('latin1')).to.contain('wireguard\0');
    }
  });
});
