import { expect } from 'chai';
import { constants } from 'node:os';
import {
  FacilityUnavailableError,
  InterfaceMissingError,
  KernelCallError,
} from '../../../src/kernel/errors';
import { Links } from '../../../src/kernel/link';
import { Quota } from '../../../src/kernel/quota';
import { Shaper } from '../../../src/kernel/shaper';
import { WireGuard } from '../../../src/kernel/wireguard';
import {
  NLMSG_ERROR,
  type DatagramHandler,
  type Transport,
  encodeMessage,
  parseMessages,
} from '../../../src/netlink';

/**
 * A kernel that refuses every request with one errno, as NLMSG_ERROR (netlink(7): a negative
 * errno followed by the request's own header), without extended ACK. Enough to see what each
 * facility makes of that errno for its own calls.
 */
function refusing(errno: number): (protocol: number) => Transport {
  return (protocol) => {
    let handler: DatagramHandler = () => undefined;
    return {
      protocol,
      portId: 4242,
      send(datagram: Buffer) {
        for (const request of parseMessages(datagram)) {
          const payload = Buffer.alloc(4 + 16);
          payload.writeInt32LE(-errno, 0);
          encodeMessage({ ...request, payload: Buffer.alloc(0) }).copy(payload, 4, 0, 16);
          const reply = encodeMessage({
            type: NLMSG_ERROR,
            flags: 0,
            seq: request.seq,
            pid: 4242,
            payload,
          });
          setImmediate(() => handler(null, reply));
        }
      },
      receive(next: DatagramHandler) {
        handler = next;
      },
      setBusy() {},
      close() {},
    };
  };
}

const failure = (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => expect.fail('expected a rejection'),
    (error: unknown) => error,
  );

describe('kernel facilities decide what an errno means for their own calls', () => {
  it('WireGuard: a family lookup answered ENOENT is the missing module, named with its fix', async () => {
    const wireguard = new WireGuard(refusing(constants.errno.ENOENT));
    const error = await failure(wireguard.getDevice('wg0'));
    expect(error).to.be.instanceOf(FacilityUnavailableError);
    expect((error as Error).message).to.contain('modprobe wireguard');
    wireguard.close();
  });

  it('links and the shaper: RTM_GETLINK of the managed interface answered ENODEV is that interface missing', async () => {
    const links = new Links(refusing(constants.errno.ENODEV));
    const shaper = new Shaper(refusing(constants.errno.ENODEV), { ticksPerUs: 15.625 });
    for (const read of [links.getLink('wg0'), shaper.listLimits('wg0')]) {
      const error = await failure(read);
      expect(error).to.be.instanceOf(InterfaceMissingError);
      expect((error as InterfaceMissingError).ifname).to.equal('wg0');
    }
    links.close();
    shaper.close();
  });

  it('the shaper: any other refusal is a KernelCallError carrying operation and errno', async () => {
    const shaper = new Shaper(refusing(constants.errno.EPERM), { ticksPerUs: 15.625 });
    const error = await failure(shaper.ensure('wg0', []));
    expect(error).to.be.instanceOf(KernelCallError);
    expect(error).to.include({ code: 'EPERM', operation: 'RTM_GETLINK wg0' });
    shaper.close();
  });

  it('the quota: a bare EINVAL to a GET is nfnetlink without nf_tables, named with its fix', async () => {
    const quota = new Quota(refusing(constants.errno.EINVAL));
    const error = await failure(quota.listCaps('wg0'));
    expect(error).to.be.instanceOf(FacilityUnavailableError);
    expect((error as Error).message).to.contain('modprobe nf_tables');
    quota.close();
  });
});
