import { expect } from 'chai';
import {
  AttributeWriter,
  NLMSG_DONE,
  NLMSG_ERROR,
  NLM_F_ACK,
  NLM_F_ACK_TLVS,
  NLM_F_CAPPED,
  NLM_F_DUMP,
  NLM_F_DUMP_INTR,
  NLM_F_MULTI,
  NLM_F_REQUEST,
  NetlinkError,
  NetlinkProtocolError,
  NetlinkSocket,
  type DatagramHandler,
  type NetlinkMessage,
  type Transport,
  encodeMessage,
  parseMessages,
} from '../../../src/netlink';

const PORT_ID = 4242;

/**
 * A stand-in for the kernel at the socket boundary: `answer` sees each request message and
 * returns the datagrams the kernel would send. Layouts follow linux/netlink.h: NLMSG_ERROR is
 * {int error; struct nlmsghdr msg; [payload]; [TLVs]} and NLMSG_DONE is {int error; [TLVs]}.
 */
class FakeKernel implements Transport {
  readonly protocol = 0;
  readonly portId = PORT_ID;
  handler: DatagramHandler | undefined;
  requests: NetlinkMessage[] = [];
  busy = false;

  constructor(
    private readonly answer: (request: NetlinkMessage, all: NetlinkMessage[]) => Buffer[],
  ) {}

  send(datagram: Buffer): void {
    const messages = parseMessages(datagram);
    this.requests.push(...messages);
    const replies = messages.flatMap((message) => this.answer(message, messages));
    setImmediate(() => replies.forEach((reply) => this.handler?.(null, reply)));
  }
  receive(handler: DatagramHandler): void {
    this.handler = handler;
  }
  setBusy(busy: boolean): void {
    this.busy = busy;
  }
  close(): void {}
}

function reply(request: NetlinkMessage, type: number, flags: number, payload: Buffer): Buffer {
  return encodeMessage({ type, flags, seq: request.seq, pid: PORT_ID, payload });
}

function ack(
  request: NetlinkMessage,
  errno = 0,
  extAck?: { message?: string; offset?: number },
): Buffer {
  const head = Buffer.alloc(4 + 16);
  head.writeInt32LE(-errno, 0);
  head.writeUInt32LE(16 + request.payload.length, 4); // echoed nlmsg_len of the original request
  head.writeUInt16LE(request.type, 8);
  head.writeUInt16LE(request.flags, 10);
  head.writeUInt32LE(request.seq, 12);
  let flags = NLM_F_CAPPED;
  const tlvs = new AttributeWriter();
  if (extAck?.message) tlvs.put(1, Buffer.from(`${extAck.message}\0`));
  if (extAck?.offset !== undefined) {
    const offset = Buffer.alloc(4);
    offset.writeUInt32LE(extAck.offset);
    tlvs.put(2, offset);
  }
  if (tlvs.length > 0) flags |= NLM_F_ACK_TLVS;
  return reply(request, NLMSG_ERROR, flags, Buffer.concat([head, tlvs.toBuffer()]));
}

function done(request: NetlinkMessage): Buffer {
  return reply(request, NLMSG_DONE, NLM_F_MULTI, Buffer.alloc(4));
}

function data(request: NetlinkMessage, text: string, flags = NLM_F_MULTI): Buffer {
  return reply(request, 100, flags, Buffer.from(text));
}

describe('netlink socket', () => {
  it('sends REQUEST|ACK and resolves with the replies before the ACK', async () => {
    const kernel = new FakeKernel((request) => [data(request, 'link', 0), ack(request)]);
    const socket = new NetlinkSocket(kernel);
    const replies = await socket.request(18, Buffer.from('q'), { operation: 'get' });
    expect(kernel.requests[0].flags).to.equal(NLM_F_REQUEST | NLM_F_ACK);
    expect(replies.map((m) => m.payload.toString())).to.deep.equal(['link']);
    expect(kernel.busy).to.equal(false);
  });

  it('gathers a multipart dump until NLMSG_DONE, across datagrams', async () => {
    const kernel = new FakeKernel((request) => [
      data(request, 'a'),
      data(request, 'b'),
      done(request),
    ]);
    const socket = new NetlinkSocket(kernel);
    const replies = await socket.dump(18, Buffer.alloc(0), { operation: 'dump' });
    expect(kernel.requests[0].flags).to.equal(NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP);
    expect(replies.map((m) => m.payload.toString())).to.deep.equal(['a', 'b']);
  });

  it('restarts a dump the kernel marked NLM_F_DUMP_INTR and returns the consistent one', async () => {
    let attempt = 0;
    const kernel = new FakeKernel((request) => {
      attempt++;
      if (attempt === 1)
        return [data(request, 'stale', NLM_F_MULTI | NLM_F_DUMP_INTR), done(request)];
      return [data(request, 'fresh'), done(request)];
    });
    const replies = await new NetlinkSocket(kernel).dump(18, Buffer.alloc(0), {
      operation: 'dump',
    });
    expect(kernel.requests).to.have.length(2);
    expect(replies.map((m) => m.payload.toString())).to.deep.equal(['fresh']);
  });

  it('gives up after maxAttempts interrupted dumps with EINTR', async () => {
    const kernel = new FakeKernel((request) => [
      data(request, 'x', NLM_F_MULTI | NLM_F_DUMP_INTR),
      done(request),
    ]);
    const error = await new NetlinkSocket(kernel)
      .dump(18, Buffer.alloc(0), { operation: 'dump wg0', maxAttempts: 3 })
      .catch((e: unknown) => e);
    expect(error).to.be.instanceOf(NetlinkError);
    expect((error as NetlinkError).code).to.equal('EINTR');
    expect(kernel.requests).to.have.length(3);
  });

  it('turns NLMSG_ERROR with extended ACK into a NetlinkError carrying the kernel text', async () => {
    const kernel = new FakeKernel((request) => [
      ack(request, 22, { message: 'Attribute failed policy validation', offset: 24 }),
    ]);
    const error = (await new NetlinkSocket(kernel)
      .request(16, Buffer.alloc(8), { operation: 'RTM_NEWLINK wg0' })
      .catch((e: unknown) => e)) as NetlinkError;
    expect(error).to.be.instanceOf(NetlinkError);
    expect(error.errno).to.equal(22);
    expect(error.code).to.equal('EINVAL');
    expect(error.kernelMessage).to.equal('Attribute failed policy validation');
    expect(error.offset).to.equal(24);
    expect(error.message).to.equal(
      'RTM_NEWLINK wg0: EINVAL (Invalid argument): Attribute failed policy validation',
    );
  });

  it('fails a dump that never started (NLMSG_ERROR instead of NLMSG_DONE)', async () => {
    const kernel = new FakeKernel((request) => [ack(request, 19)]);
    const error = (await new NetlinkSocket(kernel)
      .dump(0x1d, Buffer.alloc(4), { operation: 'WG_CMD_GET_DEVICE wg9' })
      .catch((e: unknown) => e)) as NetlinkError;
    expect(error.code).to.equal('ENODEV');
    expect(error.message).to.contain('wg9');
  });

  it('serves concurrent callers one exchange at a time, each with its own replies', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const kernel = new FakeKernel((request) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      setImmediate(() => inFlight--);
      return [data(request, `r${request.seq}`), done(request)];
    });
    const socket = new NetlinkSocket(kernel);
    const results = await Promise.all(
      Array.from({ length: 20 }, () => socket.dump(18, Buffer.alloc(0), { operation: 'dump' })),
    );
    expect(maxInFlight).to.equal(1);
    const seqs = kernel.requests.map((r) => r.seq);
    expect(new Set(seqs).size).to.equal(20);
    results.forEach((replies, index) =>
      expect(replies[0].payload.toString()).to.equal(`r${seqs[index]}`),
    );
  });

  it('ignores replies with a foreign sequence number or port id', async () => {
    const kernel = new FakeKernel((request) => [
      encodeMessage({
        type: 100,
        flags: 0,
        seq: request.seq + 1000,
        pid: PORT_ID,
        payload: Buffer.from('old'),
      }),
      encodeMessage({
        type: 100,
        flags: 0,
        seq: request.seq,
        pid: PORT_ID + 1,
        payload: Buffer.from('other'),
      }),
      data(request, 'mine', 0),
      ack(request),
    ]);
    const replies = await new NetlinkSocket(kernel).request(18, Buffer.alloc(0), {
      operation: 'get',
    });
    expect(replies.map((m) => m.payload.toString())).to.deep.equal(['mine']);
  });

  it('rejects with NetlinkProtocolError on a truncated datagram instead of hanging', async () => {
    const kernel = new FakeKernel((request) => [data(request, 'abcdef', 0).subarray(0, 18)]);
    const error = await new NetlinkSocket(kernel)
      .request(18, Buffer.alloc(0), { operation: 'get', timeoutMs: 1000 })
      .catch((e: unknown) => e);
    expect(error).to.be.instanceOf(NetlinkProtocolError);
  });

  it('fails the exchange in flight on a socket error such as ENOBUFS', async () => {
    const kernel = new FakeKernel(() => []);
    const socket = new NetlinkSocket(kernel);
    const pending = socket
      .dump(18, Buffer.alloc(0), { operation: 'dump' })
      .catch((e: unknown) => e);
    setImmediate(() => kernel.handler?.(Object.assign(new Error('recv ENOBUFS'), { errno: 105 })));
    const error = (await pending) as NetlinkError;
    expect(error.code).to.equal('ENOBUFS');
  });

  it('times out when the kernel never answers', async () => {
    const socket = new NetlinkSocket(new FakeKernel(() => []));
    const error = (await socket
      .request(18, Buffer.alloc(0), { operation: 'get', timeoutMs: 20 })
      .catch((e: unknown) => e)) as NetlinkError;
    expect(error.code).to.equal('ETIMEDOUT');
  });

  describe('batches', () => {
    it('sends all messages in one datagram with their own sequence numbers', async () => {
      const kernel = new FakeKernel((request) => (request.flags & NLM_F_ACK ? [ack(request)] : []));
      const socket = new NetlinkSocket(kernel);
      await socket.batch(
        [
          {
            type: 0x10,
            flags: NLM_F_REQUEST,
            payload: Buffer.alloc(4),
            ack: false,
            operation: 'begin',
          },
          {
            type: 0xa00,
            flags: NLM_F_REQUEST | NLM_F_ACK,
            payload: Buffer.alloc(4),
            ack: true,
            operation: 'one',
          },
          {
            type: 0xa00,
            flags: NLM_F_REQUEST | NLM_F_ACK,
            payload: Buffer.alloc(4),
            ack: true,
            operation: 'two',
          },
          {
            type: 0x11,
            flags: NLM_F_REQUEST,
            payload: Buffer.alloc(4),
            ack: false,
            operation: 'end',
          },
        ],
        { operation: 'batch' },
      );
      expect(kernel.requests).to.have.length(4);
      expect(new Set(kernel.requests.map((r) => r.seq)).size).to.equal(4);
    });

    it('names the failing message of a batch, and gives its type, by its sequence number', async () => {
      const kernel = new FakeKernel((request) => {
        if (!(request.flags & NLM_F_ACK)) return [];
        return request.payload.toString() === 'bad'
          ? [ack(request, 16, { message: 'object in use' })]
          : [ack(request)];
      });
      const error = (await new NetlinkSocket(kernel)
        .batch(
          [
            {
              type: 0xa0c,
              flags: NLM_F_REQUEST | NLM_F_ACK,
              payload: Buffer.from('ok'),
              ack: true,
              operation: 'NEWSETELEM x',
            },
            {
              type: 0xa14,
              flags: NLM_F_REQUEST | NLM_F_ACK,
              payload: Buffer.from('bad'),
              ack: true,
              operation: 'DELOBJ q_1',
            },
            {
              type: 0xa12,
              flags: NLM_F_REQUEST | NLM_F_ACK,
              payload: Buffer.from('ok'),
              ack: true,
              operation: 'NEWOBJ q_2',
            },
          ],
          { operation: 'batch' },
        )
        .catch((e: unknown) => e)) as NetlinkError;
      expect(error.code).to.equal('EBUSY');
      expect(error.operation).to.equal('DELOBJ q_1');
      expect(error.messageType).to.equal(0xa14);
      expect(error.kernelMessage).to.equal('object in use');
    });
  });

  it('gives the type of a refused request with its error, whatever its label', async () => {
    const kernel = new FakeKernel((request) => [ack(request, 2)]);
    const error = (await new NetlinkSocket(kernel)
      .request(0x10, Buffer.alloc(0), { operation: 'look the family up' })
      .catch((e: unknown) => e)) as NetlinkError;
    expect(error).to.include({ code: 'ENOENT', messageType: 0x10 });
  });

  it('rejects requests after close', async () => {
    const socket = new NetlinkSocket(new FakeKernel(() => []));
    socket.close();
    const error = (await socket
      .request(18, Buffer.alloc(0), { operation: 'get' })
      .catch((e: unknown) => e)) as NetlinkError;
    expect(error.code).to.equal('EBADF');
  });
});
