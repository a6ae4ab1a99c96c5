/**
 * sd_notify(3) for wg-peerd under systemd's `Type=notify` (issue 32, contrib/systemd): the
 * daemon tells systemd when it is ready, what it is doing while it starts, that its event loop
 * still turns, and that it is stopping.
 *
 * - Without `$NOTIFY_SOCKET` (not under systemd, or a unit that is not Type=notify) every call
 *   does nothing, and nothing else changes.
 * - `$NOTIFY_SOCKET` is a path or an abstract name written `@name` (systemd uses the path
 *   /run/systemd/notify); each message is ONE datagram on an AF_UNIX SOCK_DGRAM socket, sent by
 *   the native addon (native/netlink.c `sendUnixDatagram`): Node's dgram knows UDP only and its
 *   net module stream sockets only. The send never blocks (a full queue fails with EAGAIN).
 * - `ready(status)` sends `READY=1` with a STATUS line, once; main.ts calls it when the
 *   interface, its peers, limits and caps are back (the restore settled) and the API listens.
 *   `status(text)` sends a STATUS line (systemctl status shows the last one); `status(text,
 *   extendMs)` also asks for `extendMs` more of start time (EXTEND_TIMEOUT_USEC), which
 *   `statusWhile` sends every few seconds during a restore: a long restore whose event loop
 *   turns is not killed by TimeoutStartSec=, a start whose loop hangs still is.
 * - With `$WATCHDOG_USEC` (the unit's WatchdogSec=), and `$WATCHDOG_PID` absent or this process,
 *   a timer of the event loop sends `WATCHDOG=1` every half interval (sd_watchdog_enabled(3)'s
 *   advice). systemd arms its watchdog once the start completed (READY=1); pings before are
 *   harmless. A loop that stops turning stops the pings; systemd then kills the daemon
 *   (SIGABRT) and Restart= starts it again. The timer is unref'd: it keeps no process alive.
 * - `stopping()` sends `STOPPING=1` once and stops the watchdog; `close()` stops the watchdog.
 * - A message that cannot be sent is reported once to `onError` (main.ts logs it at warn) and
 *   never thrown: the daemon serves whether or not systemd hears it.
 */
import { sendUnixDatagram } from './netlink/native';

/** The environment variables systemd sets for the service (systemd.exec(5)). */
export interface NotifyEnvironment {
  NOTIFY_SOCKET?: string | undefined;
  WATCHDOG_USEC?: string | undefined;
  WATCHDOG_PID?: string | undefined;
}

export interface NotifierOptions {
  /** process.env when absent. */
  env?: NotifyEnvironment;
  /** This process's id (process.pid when absent), matched against WATCHDOG_PID. */
  pid?: number;
  /** Sends one datagram; the native addon's when absent (tests may give another). */
  send?: (address: string, datagram: Buffer) => void;
  /** Hears the first message that could not be sent. */
  onError?: (error: Error) => void;
}

/** STATUS is one line: systemd cuts a message at its newlines into assignments. */
function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ');
}

export class SystemdNotifier {
  /** The notification socket, or null when there is none (every call does nothing). */
  readonly address: string | null;
  /** Milliseconds between two WATCHDOG=1, or null when systemd set no watchdog for us. */
  readonly watchdogIntervalMs: number | null;
  private readonly send: (address: string, datagram: Buffer) => void;
  private readonly onError: (error: Error) => void;
  private watchdog: NodeJS.Timeout | null = null;
  private readied = false;
  private stopped = false;
  private failed = false;

  constructor(options: NotifierOptions = {}) {
    const env = options.env ?? (process.env as NotifyEnvironment);
    const socket = env.NOTIFY_SOCKET;
    this.address = socket === undefined || socket === '' ? null : socket;
    this.send = options.send ?? sendUnixDatagram;
    this.onError = options.onError ?? (() => undefined);
    this.watchdogIntervalMs = this.address === null ? null : watchdogInterval(env, options.pid);
    if (this.watchdogIntervalMs !== null) {
      this.watchdog = setInterval(() => this.notify('WATCHDOG=1'), this.watchdogIntervalMs);
      this.watchdog.unref();
    }
  }

  /** A STATUS line, while starting or at any time; `extendMs`: that much more start time. */
  status(text: string, extendMs?: number): void {
    const extend =
      extendMs === undefined ? '' : `\nEXTEND_TIMEOUT_USEC=${Math.round(extendMs) * 1000}`;
    this.notify(`STATUS=${oneLine(text)}${extend}`);
  }

  /** READY=1 with its STATUS line; only the first call sends. */
  ready(status: string): void {
    if (this.readied) return;
    this.readied = true;
    this.notify(`READY=1\nSTATUS=${oneLine(status)}`);
  }

  /** STOPPING=1, once; the watchdog stops. */
  stopping(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.close();
    this.notify('STOPPING=1');
  }

  /** Stops the watchdog's pings. */
  close(): void {
    if (this.watchdog !== null) clearInterval(this.watchdog);
    this.watchdog = null;
  }

  private notify(message: string): void {
    if (this.address === null) return;
    try {
      this.send(this.address, Buffer.from(message, 'utf8'));
    } catch (error) {
      if (this.failed) return;
      this.failed = true;
      this.onError(error instanceof Error ? error : new Error(String(error)));
    }
  }
}

/**
 * Half of WATCHDOG_USEC in milliseconds, or null: no watchdog, a malformed or zero value, or a
 * WATCHDOG_PID naming another process (the variable was inherited, not meant for us).
 */
function watchdogInterval(env: NotifyEnvironment, pid: number = process.pid): number | null {
  const usec = env.WATCHDOG_USEC;
  if (usec === undefined || !/^\d+$/.test(usec) || Number(usec) === 0) return null;
  const owner = env.WATCHDOG_PID;
  if (owner !== undefined && owner !== '' && Number(owner) !== pid) return null;
  return Math.max(1, Math.floor(Number(usec) / 2000));
}

/** What startDaemon tells systemd (main.ts); a SystemdNotifier, or a test's recorder. */
export type StartNotices = Pick<SystemdNotifier, 'status' | 'ready' | 'stopping'>;

/**
 * Sends `describe(seconds)` as a STATUS line now and every `everyMs` until `work` settles, so
 * `systemctl status` says what a long start is doing (a restore of 10,000 capped peers took
 * 40 s in the VM) and for how long; each line extends the start timeout by three intervals.
 */
export function statusWhile(
  notices: Pick<StartNotices, 'status'>,
  work: Promise<unknown>,
  describe: (seconds: number) => string,
  everyMs = 5000,
): void {
  const started = Date.now();
  const say = (): void =>
    notices.status(describe(Math.round((Date.now() - started) / 1000)), 3 * everyMs);
  say();
  const timer = setInterval(say, everyMs);
  timer.unref();
  const stop = (): void => clearInterval(timer);
  work.then(stop, stop);
}
