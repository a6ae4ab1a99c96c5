/**
 * Numbered UDP datagrams through a tunnel in BOTH directions at once, each send and each arrival
 * timed with Date.now() (the VM's one clock; a network namespace shares it), for tests that time
 * when a tunnel stops and starts passing a peer's packets either way (udp-cut.ts does one
 * direction). A node process in the client's namespace sends to `serverAddress:port` every
 * `intervalMs` and prints each send and each arrival of the server's datagrams; this process
 * does the same the other way. The cut of a direction is the send time of the first datagram
 * that never arrived after one that did, concluded once nothing sent since has arrived for
 * `quietMs`; a resumption is the first arrival of a datagram sent after a given instant.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import dgram from 'node:dgram';

export interface TwoWayOptions {
  netns: string;
  /** This namespace's address in the tunnel (the server's), and the client's. */
  serverAddress: string;
  clientAddress: string;
  port: number;
  intervalMs: number;
}

export type Direction = 'fromPeer' | 'toPeer';

interface Flow {
  /** seq → Date.now() at its send. */
  sent: Map<number, number>;
  /** seq → Date.now() at its arrival. */
  arrived: Map<number, number>;
}

const CLIENT = `
const dgram = require('node:dgram');
const [server, client, port, interval] = process.argv.slice(1);
const socket = dgram.createSocket('udp4');
socket.on('message', (m) => {
  if (m.length >= 4) process.stdout.write('r ' + m.readUInt32BE(0) + ' ' + Date.now() + '\\n');
});
socket.bind(Number(port), client, () => {
  const payload = Buffer.alloc(200);
  let seq = 0;
  setInterval(() => {
    payload.writeUInt32BE(seq, 0);
    const at = Date.now();
    socket.send(payload, Number(port), server);
    process.stdout.write('s ' + seq + ' ' + at + '\\n');
    seq += 1;
  }, Number(interval));
});
`;

export class TwoWayUdp {
  private readonly flows: Record<Direction, Flow> = {
    fromPeer: { sent: new Map(), arrived: new Map() },
    toPeer: { sent: new Map(), arrived: new Map() },
  };
  private socket: dgram.Socket | undefined;
  private client: ChildProcess | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: TwoWayOptions) {}

  async start(): Promise<void> {
    const socket = (this.socket = dgram.createSocket('udp4'));
    socket.on('message', (m) => {
      if (m.length >= 4) this.flows.fromPeer.arrived.set(m.readUInt32BE(0), Date.now());
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(this.o.port, this.o.serverAddress, () => resolve());
    });
    const client = (this.client = spawn(
      'ip',
      [
        ...['netns', 'exec', this.o.netns, process.execPath, '-e', CLIENT],
        ...[this.o.serverAddress, this.o.clientAddress, String(this.o.port)],
        String(this.o.intervalMs),
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    ));
    let pending = '';
    client.stdout!.setEncoding('utf8');
    client.stdout!.on('data', (chunk: string) => {
      pending += chunk;
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        const [kind, seq, at] = line.split(' ');
        const flow = kind === 's' ? this.flows.fromPeer.sent : this.flows.toPeer.arrived;
        if (kind === 's' || kind === 'r') flow.set(Number(seq), Number(at));
      }
    });
    const payload = Buffer.alloc(200);
    let seq = 0;
    this.timer = setInterval(() => {
      payload.writeUInt32BE(seq, 0);
      this.flows.toPeer.sent.set(seq, Date.now());
      socket.send(payload, this.o.port, this.o.clientAddress);
      seq += 1;
    }, this.o.intervalMs);
  }

  /** How many datagrams of a direction arrived so far. */
  arrivals(direction: Direction): number {
    return this.flows[direction].arrived.size;
  }

  /** Resolves once a datagram of the direction sent at or after `since` arrived: its arrival. */
  async arrivalAfter(direction: Direction, since: number, timeoutMs: number): Promise<number> {
    const flow = this.flows[direction];
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let first: number | null = null;
      for (const [seq, at] of flow.arrived) {
        const sentAt = flow.sent.get(seq);
        if (sentAt !== undefined && sentAt >= since && (first === null || at < first)) first = at;
      }
      if (first !== null) return first;
      if (Date.now() > deadline) throw new Error(`no ${direction} datagram within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, this.o.intervalMs));
    }
  }

  /** The cut of a direction, once concluded (see above): the first lost datagram's send time. */
  async cut(direction: Direction, quietMs: number, timeoutMs: number): Promise<number> {
    const flow = this.flows[direction];
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (flow.arrived.size > 0) {
        const last = Math.max(...flow.arrived.keys());
        const firstLost = flow.sent.get(last + 1);
        if (firstLost !== undefined && Date.now() - firstLost >= quietMs) return firstLost;
      }
      if (Date.now() > deadline) throw new Error(`no ${direction} cut within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, this.o.intervalMs));
    }
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.client?.kill('SIGKILL');
    this.socket?.close();
  }
}
