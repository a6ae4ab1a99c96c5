import { expect } from 'chai';
import {
  NETLINK_ROUTE,
  NetlinkSocket,
  decodeAttributes,
  encodeAttributes,
  isNetlinkError,
  schema,
  string,
} from '../../../src/netlink';
import { NativeTransport } from '../../../src/netlink/native';
import { IFLA_IFNAME, RTM_GETLINK, RTM_NEWLINK, ifinfomsg } from '../../../src/kernel/rtnetlink';

// The real addon against this machine's kernel. Reading links needs no privilege, so this runs
// as any user; it proves the socket, the poll-driven receive and the ext-ack plumbing.
const names = schema({ ifname: { type: IFLA_IFNAME, codec: string } });

describe('native netlink socket', () => {
  let socket: NetlinkSocket;
  beforeEach(() => {
    socket = new NetlinkSocket(new NativeTransport(NETLINK_ROUTE));
  });
  afterEach(() => socket.close());

  it('is bound to a kernel-assigned port id', () => {
    const transport = new NativeTransport(NETLINK_ROUTE);
    expect(transport.portId).to.be.greaterThan(0);
    transport.close();
  });

  it('dumps the links, loopback (ifindex 1, "lo") among them', async () => {
    const replies = await socket.dump(RTM_GETLINK, ifinfomsg.encode({}), {
      operation: 'RTM_GETLINK',
    });
    const links = replies.map((m) => ({
      index: ifinfomsg.decode(m.payload).index,
      name: decodeAttributes(names, m.payload.subarray(ifinfomsg.size)).ifname,
    }));
    expect(links).to.deep.include({ index: 1, name: 'lo' });
  });

  it('reports a missing link as ENODEV naming it', async () => {
    const payload = Buffer.concat([
      ifinfomsg.encode({}),
      encodeAttributes(names, { ifname: 'nosuch0' }),
    ]);
    const error = await socket
      .request(18, payload, { operation: 'RTM_GETLINK nosuch0' })
      .catch((e: unknown) => e);
    expect(isNetlinkError(error, 'ENODEV')).to.equal(true);
    expect((error as Error).message).to.contain('nosuch0');
  });

  it('carries the kernel extended-ACK message', async () => {
    // RTM_NEWLINK of an unknown kind: rtnetlink answers EOPNOTSUPP "Unknown device type"
    // (as root) or EPERM (otherwise); either way the socket must deliver the error.
    const linkinfo = schema({ ifname: { type: 3, codec: string } });
    const payload = Buffer.concat([
      ifinfomsg.encode({}),
      encodeAttributes(linkinfo, { ifname: 'x0' }),
      Buffer.from('0f0012000b00010062616e616e610000', 'hex').subarray(0, 16),
    ]);
    const error = await socket
      .request(RTM_NEWLINK, payload, { operation: 'RTM_NEWLINK x0', flags: 0x600 })
      .catch((e: unknown) => e);
    expect(isNetlinkError(error)).to.equal(true);
    if (process.getuid?.() === 0) {
      expect(isNetlinkError(error, 'EOPNOTSUPP')).to.equal(true);
      expect((error as { kernelMessage?: string }).kernelMessage).to.equal('Unknown device type');
    }
  });
});
