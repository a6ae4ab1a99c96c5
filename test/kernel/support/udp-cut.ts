/**
 * When a tunnel stopped passing a peer's packets, to within one send interval, for tests that
 * time what follows a cut (an event, a log line) and must not count the cost of starting a
 * process as part of it: a sender in the client's namespace (a node process, started before the
 * cut is due) sends a numbered UDP datagram every `intervalMs` to `address:port` and prints each
 * send's Date.now(), the VM's one clock; this process receives them on `address:port`. The cut is
 * the send time of the first datagram that never arrived, concluded once every datagram sent
 * after it for `quietMs` has not arrived either, and at least one arrived before it (the tunnel
 * worked). A `busybox ping` per packet, spawned through `ip netns exec`, took 0.1 to 1 s to send
 * its packet in the emulated VM: that is the error this removes.
 */
import { spawn } from 'node:child_process';
import dgram from 'node:dgram';

export interface UdpCutOptions {
  /** The namespace the sender runs in (the client's). */
  netns: string;
  /** Where it sends to: an address of this namespace, reached through the tunnel. */
  address: string;
  port: number;
  /** UDP payload bytes per datagram. */
  payloadBytes: number;
  intervalMs: number;
  /** How long no datagram may arrive before the cut is concluded. */
  quietMs: number;
  /** Give up (reject) when no cut was concluded within this time. */
  timeoutMs: number;
}

export interface UdpCut {
  /** Date.now() when the first lost datagram was sent. */
  cutAt: number;
  /** Datagrams that arrived before the cut. */
  delivered: number;
}

const SENDER = `
const socket = require('node:dgram').createSocket('udp4');
const [address, port, bytes, interval] = process.argv.slice(1);
const payload = Buffer.alloc(Number(bytes));
let seq = 0;
setInterval(() => {
  payload.writeUInt32BE(seq, 0);
  const at = Date.now();
  socket.send(payload, Number(port), address);
  process.stdout.write(seq + ' ' + at + '\\n');
  seq += 1;
}, Number(interval));
`;

export async function udpCut(options: UdpCutOptions): Promise<UdpCut> {
  const received = new Set<number>();
  const sent = new Map<number, number>();
  const receiver = dgram.createSocket('udp4');
  receiver.on('message', (message) => {
    if (message.length >= 4) received.add(message.readUInt32BE(0));
  });
  await new Promise<void>((resolve, reject) => {
    receiver.once('error', reject);
    receiver.bind(options.port, options.address, () => resolve());
  });
  const sender = spawn(
    'ip',
    [
      'netns',
      'exec',
      options.netns,
      process.execPath,
      '-e',
      SENDER,
      options.address,
      String(options.port),
      String(options.payloadBytes),
      String(options.intervalMs),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let pending = '';
  sender.stdout.setEncoding('utf8');
  sender.stdout.on('data', (chunk: string) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const [seq, at] = line.split(' ').map(Number);
      if (Number.isInteger(seq) && Number.isFinite(at)) sent.set(seq, at);
    }
  });
  let stderr = '';
  sender.stderr.setEncoding('utf8');
  sender.stderr.on('data', (chunk: string) => (stderr += chunk));
  try {
    return await new Promise<UdpCut>((resolve, reject) => {
      const deadline = Date.now() + options.timeoutMs;
      const check = setInterval(() => {
        const cut = concludedCut(sent, received, Date.now(), options.quietMs);
        if (cut !== null) {
          clearInterval(check);
          resolve(cut);
        } else if (Date.now() > deadline || sender.exitCode !== null) {
          clearInterval(check);
          reject(
            new Error(
              `no cut within ${options.timeoutMs} ms: ${sent.size} sent, ${received.size} ` +
                `received${sender.exitCode !== null ? `, sender exited: ${stderr.trim()}` : ''}`,
            ),
          );
        }
      }, options.intervalMs);
    });
  } finally {
    sender.kill('SIGKILL');
    receiver.close();
  }
}

/**
 * The cut, once it can be told: the first datagram not received that was sent after at least one
 * received, when nothing sent since has arrived and it was sent `quietMs` ago or more.
 */
function concludedCut(
  sent: ReadonlyMap<number, number>,
  received: ReadonlySet<number>,
  now: number,
  quietMs: number,
): UdpCut | null {
  if (received.size === 0) return null;
  const last = Math.max(...received);
  const firstLost = sent.get(last + 1);
  if (firstLost === undefined || now - firstLost < quietMs) return null;
  return { cutAt: firstLost, delivered: received.size };
}
