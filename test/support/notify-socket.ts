/**
 * A real AF_UNIX SOCK_DGRAM socket bound where `$NOTIFY_SOCKET` will point, standing in for
 * systemd's notification socket in tests (src/systemd-notify.ts). Node can bind no unix datagram
 * socket, so a small python3 process binds it (a path, or "@name" in the abstract namespace) and
 * prints each datagram it receives as a JSON line with its CLOCK_MONOTONIC arrival time.
 */
import { spawn, type ChildProcess } from 'node:child_process';

const RECEIVER = `
import json, socket, sys, time
address = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind('\\0' + address[1:] if address.startswith('@') else address)
print(json.dumps({'bound': True}), flush=True)
while True:
    data = s.recv(65536)
    print(json.dumps({'at': time.monotonic(), 'message': data.decode()}), flush=True)
`;

export interface Received {
  /** Seconds, CLOCK_MONOTONIC, when the datagram was read. */
  at: number;
  message: string;
}

export class NotifySocket {
  readonly received: Received[] = [];
  private constructor(
    readonly address: string,
    private readonly child: ChildProcess,
  ) {}

  /** Binds `address` and resolves once the socket is bound. */
  static open(address: string): Promise<NotifySocket> {
    const child = spawn('python3', ['-c', RECEIVER, address], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    return new Promise((resolve, reject) => {
      let socket: NotifySocket | null = null;
      let buffered = '';
      let errors = '';
      child.stderr!.on('data', (chunk: Buffer) => (errors += chunk.toString()));
      child.on('error', reject);
      child.on('exit', (code) => {
        if (socket === null) reject(new Error(`python3 receiver exited ${code}: ${errors}`));
      });
      child.stdout!.on('data', (chunk: Buffer) => {
        buffered += chunk.toString();
        const lines = buffered.split('\n');
        buffered = lines.pop()!;
        for (const line of lines) {
          const parsed = JSON.parse(line) as Received | { bound: true };
          if ('bound' in parsed) {
            socket = new NotifySocket(address, child);
            resolve(socket);
          } else {
            socket!.received.push(parsed);
          }
        }
      });
    });
  }

  messages(): string[] {
    return this.received.map((r) => r.message);
  }

  /** Resolves with the first datagram `test` accepts, polling what arrived. */
  async waitFor(test: (message: string) => boolean, timeoutMs = 5000): Promise<Received> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const found = this.received.find((r) => test(r.message));
      if (found !== undefined) return found;
      if (Date.now() > until) {
        throw new Error(
          `no such datagram within ${timeoutMs} ms; got ${JSON.stringify(this.messages())}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  close(): void {
    this.child.kill();
  }
}
