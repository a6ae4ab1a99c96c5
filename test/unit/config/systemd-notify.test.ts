/**
 * systemd's Type=notify (issue 32) over a REAL unix datagram socket bound where $NOTIFY_SOCKET
 * points (test/support/notify-socket.ts): each message one datagram, to a path or an abstract
 * name; WATCHDOG=1 at half of WATCHDOG_USEC from the event loop (none while the loop is
 * blocked); READY=1 from the daemon only once its restore settled and the API listens, STATUS
 * lines while it restores; STOPPING=1 at shutdown. The same under a real systemd manager, with
 * the watchdog killing a stopped daemon: test/kernel/systemd.test.ts (in the VM).
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { startDaemon } from '../../../src/main';
import { SystemdNotifier } from '../../../src/systemd-notify';
import { NotifySocket } from '../../support/notify-socket';
import { httpCall } from '../../support/http-call';
import { FakeKernel } from '../support/fake-kernel';
import { testConfig } from '../support/config';
import { captureLog } from '../support/log-capture';

describe('systemd notifications over a real unix datagram socket (issue 32)', function () {
  // python3 starts the receiving socket; a loaded machine needs more than mocha's default.
  this.timeout(30_000);
  let dir: string;
  const sockets: NotifySocket[] = [];
  const notifiers: SystemdNotifier[] = [];
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'wg-peerd-notify-'));
  });
  afterEach(() => {
    for (const notifier of notifiers.splice(0)) notifier.close();
    for (const socket of sockets.splice(0)) socket.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function bind(address: string): Promise<NotifySocket> {
    const socket = await NotifySocket.open(address);
    sockets.push(socket);
    return socket;
  }
  function notifier(env: Record<string, string>, onError?: (error: Error) => void) {
    const made = new SystemdNotifier(onError === undefined ? { env } : { env, onError });
    notifiers.push(made);
    return made;
  }

  it('sends each message as one datagram to a socket path: STATUS on one line, READY=1 once, STOPPING=1', async () => {
    const socket = await bind(path.join(dir, 'notify'));
    const notify = notifier({ NOTIFY_SOCKET: socket.address });
    notify.status('restoring 3 saved peers\nof wg0');
    notify.ready('serving wg0 on 127.0.0.1:8080');
    notify.ready('again');
    notify.stopping();
    await socket.waitFor((m) => m === 'STOPPING=1');
    expect(socket.messages()).to.deep.equal([
      'STATUS=restoring 3 saved peers of wg0',
      'READY=1\nSTATUS=serving wg0 on 127.0.0.1:8080',
      'STOPPING=1',
    ]);
  });

  it('sends to an abstract socket name written @name', async () => {
    const socket = await bind(`@wg-peerd-test-${randomBytes(6).toString('hex')}`);
    notifier({ NOTIFY_SOCKET: socket.address }).ready('up');
    await socket.waitFor((m) => m.startsWith('READY=1'));
    expect(socket.messages()).to.deep.equal(['READY=1\nSTATUS=up']);
  });

  it('does nothing without NOTIFY_SOCKET, not even a watchdog', () => {
    const sent: string[] = [];
    const notify = new SystemdNotifier({
      env: { WATCHDOG_USEC: '1000' },
      send: (_address, datagram) => sent.push(datagram.toString()),
    });
    notifiers.push(notify);
    notify.status('x');
    notify.ready('y');
    notify.stopping();
    expect(sent).to.deep.equal([]);
    expect(notify.watchdogIntervalMs).to.equal(null);
  });

  it('sends WATCHDOG=1 every half of WATCHDOG_USEC, and none while the event loop is blocked', async () => {
    const socket = await bind(path.join(dir, 'notify'));
    const notify = notifier({ NOTIFY_SOCKET: socket.address, WATCHDOG_USEC: '200000' });
    expect(notify.watchdogIntervalMs).to.equal(100);
    const pings = () => socket.received.filter((r) => r.message === 'WATCHDOG=1');
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    while (pings().length < 6) await sleep(20);
    // The mean interval: one ping read late by the receiver moves two gaps, not the mean.
    const times = pings().map((r) => r.at);
    const mean = (times[5]! - times[0]!) / 5;
    // Timers run late on a loaded machine, never early.
    expect(mean).to.be.within(0.09, 0.25);
    // A hung event loop sends nothing: systemd's watchdog then kills and restarts the daemon.
    const blockedUntil = Date.now() + 1000;
    while (Date.now() < blockedUntil) {
      // busy: no timer can run
    }
    const after = pings().length;
    await sleep(300);
    expect(pings().length, 'pings again once the loop turns').to.be.above(after);
    const all = pings().map((r) => r.at);
    const longest = Math.max(...all.slice(1).map((at, i) => at - all[i]!));
    expect(longest).to.be.above(0.8);
  });

  it('sends no WATCHDOG=1 when WATCHDOG_PID names another process (an inherited variable)', () => {
    const notify = notifier({
      NOTIFY_SOCKET: path.join(dir, 'notify'),
      WATCHDOG_USEC: '200000',
      WATCHDOG_PID: String(process.pid + 1),
    });
    expect(notify.watchdogIntervalMs).to.equal(null);
    const mine = notifier({
      NOTIFY_SOCKET: path.join(dir, 'notify'),
      WATCHDOG_USEC: '30000000',
      WATCHDOG_PID: String(process.pid),
    });
    expect(mine.watchdogIntervalMs).to.equal(15_000);
  });

  it('reports a socket that is not there once, with the errno, and never throws', () => {
    const errors: Error[] = [];
    const notify = notifier({ NOTIFY_SOCKET: path.join(dir, 'nobody-listens') }, (error) =>
      errors.push(error),
    );
    notify.status('a');
    notify.ready('b');
    expect(errors).to.have.length(1);
    expect((errors[0] as Error & { code?: string }).code).to.equal('ENOENT');
    expect(errors[0]!.message).to.contain('sendto');
  });

  it('gets READY=1 from the daemon only after the restore settled and the API listens, STATUS lines before', async () => {
    const stateDir = path.join(dir, 'state');
    // A first boot leaves three peers, one of them capped, in the state directory.
    const first = await startDaemon(testConfig({ stateDir }), {
      openKernel: async () => new FakeKernel(),
      logger: captureLog().logger,
      readBootId: async () => 'boot-1',
    });
    for (let i = 0; i < 3; i += 1) {
      expect((await httpCall(first.address.port, 'POST', '/api/peer')).status).to.equal(201);
    }
    await first.shutdown();

    // The reboot: a new kernel, whose adding of the peers is held.
    const socket = await bind(path.join(dir, 'notify'));
    const notify = notifier({ NOTIFY_SOCKET: socket.address });
    const kernel = new FakeKernel();
    const release = kernel.hold('addPeers');
    const starting = startDaemon(testConfig({ stateDir }), {
      openKernel: async () => kernel,
      logger: captureLog().logger,
      readBootId: async () => 'boot-2',
      notify,
    });
    const line = await socket.waitFor((m) => m.startsWith('STATUS=restoring 3 saved peers of wg0'));
    // Each restoring line asks for three intervals (15 s) more of start time.
    expect(line.message).to.match(
      /^STATUS=restoring 3 saved peers of wg0 \(\d+ s\)\nEXTEND_TIMEOUT_USEC=15000000$/,
    );
    while (kernel.count('addPeers') === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(socket.messages().filter((m) => m.startsWith('READY=1'))).to.deep.equal([]);
    release();
    const daemon = await starting;
    try {
      const ready = await socket.waitFor((m) => m.startsWith('READY=1'));
      expect(ready.message).to.equal(
        `READY=1\nSTATUS=serving wg0 on 127.0.0.1:${daemon.address.port}`,
      );
      // By then the peers are in the kernel and the API answers ready.
      expect(kernel.peers()).to.have.length(3);
      expect((await httpCall(daemon.address.port, 'GET', '/readyz')).status).to.equal(200);
      const restoring = socket.received.filter((r) => r.message.startsWith('STATUS=restoring'));
      expect(restoring.length).to.be.at.least(1);
      expect(restoring.every((r) => r.at <= ready.at)).to.equal(true);
    } finally {
      await daemon.shutdown();
    }
    await socket.waitFor((m) => m === 'STOPPING=1');
    expect(socket.messages().filter((m) => m.startsWith('READY=1'))).to.have.length(1);
  });
});
