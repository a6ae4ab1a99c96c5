/**
 * Runs one program of the crash-model test (./program.ts) against the real daemon (./daemon.ts)
 * and returns its history, the state after the reboot, and the rules it broke (./history.ts). A
 * program of several rounds crashes once per round: each round after the first runs on the daemon
 * the crash before it restored, checked from what that restore showed.
 *
 * The case's time is turns of the event loop (one setImmediate each; every fake kernel call and
 * every disk call takes one): steps are invoked after their gaps, several in flight at once; at
 * the crash turn the disk's crash image is taken (./disk.ts `crashImage`), and for a restart the
 * kernel's state too (./daemon.ts `frozenKernel`), and nothing more is invoked; the old daemon then runs to its end on its own disk (only to learn the keys of creates
 * that were in flight, which the image does not see); then a reboot (or a restart) on the image, and the check.
 */
import { StateWriteError } from '../../../../src/peers';
import type { Daemon } from './daemon';
import {
  FIRST_BOOT,
  PERIOD_START,
  frozenKernel,
  reboot,
  restart,
  seededRandom,
  start,
} from './daemon';
import { ModelDisk, crashImage } from './disk';
import { History, type Op, type Restored, type RestoredPeer } from './history';
import type { Command, Program, RoundProgram } from './program';
import type { RandomSource } from '../../../../src/peers/keys';
import { FakeKernel } from '../../support/fake-kernel';

/** A case that has not settled after this many turns hangs. */
const MAX_TURNS = 20_000;

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export interface CaseResult {
  history: History;
  restored: Restored | null;
  violations: string[];
  /** The disk faults that fired, for the trace. */
  faults: string[];
  /** Which round of several broke the rules ("round 2 of 2"); absent with one round. */
  round?: string;
}

/** The rebooted kernel's peers, with their limits, caps and suspensions. */
function readRestored(daemon: Daemon): Restored {
  const { kernel } = daemon;
  const limits = kernel.limits.get('wg0');
  const caps = kernel.caps.get('wg0');
  const suspended = kernel.suspended.get('wg0');
  const peers = new Map<string, RestoredPeer>();
  for (const peer of kernel.peers()) {
    const ip = peer.allowedIps.find((p) => p.family === 4 && p.cidr === 32)?.address ?? null;
    const limit = ip === null ? undefined : limits?.get(ip);
    const cap = ip === null ? undefined : caps?.get(ip);
    const mine = cap !== undefined && cap.publicKey === peer.publicKey ? cap : undefined;
    peers.set(peer.publicKey, {
      allowedIps: peer.allowedIps.map((p) => `${p.address}/${p.cidr}`),
      limit:
        limit !== undefined && limit.publicKey === peer.publicKey ? limit.bytesPerSecond : null,
      quota: mine?.quotaBytes ?? null,
      plan: mine?.plan?.period ?? null,
      usedBytes: mine?.usedBytes ?? null,
      suspended: ip !== null && suspended?.get(ip) === peer.publicKey,
      expires: expiryOf(kernel, ip, peer.publicKey),
    });
  }
  const journal = new Map<string, string[]>();
  for (const [key, peer] of daemon.store.state.peers) journal.set(key, [...peer.allowedIps]);
  return { peers, journal };
}

/** Expiries the model sets: far ahead of its clock (PERIOD_START), never passing in a case. */
const EXPIRY_BASE = Date.parse('2100-01-01T00:00:00Z');

/** The expiry the kernel's sets hold for the peer at `ip` (its own), or null (issue 31). */
function expiryOf(kernel: FakeKernel, ip: string | null, key: string): number | null {
  const held = ip === null ? undefined : kernel.expiries.get('wg0')?.get(ip);
  return held !== undefined && held.publicKey === key ? held.expiresAt : null;
}

/** The address a fake kernel gives a peer now, or null. */
function addressOf(kernel: FakeKernel, key: string): string | null {
  const peer = kernel.peers().find((p) => p.publicKey === key);
  return peer?.allowedIps.find((p) => p.family === 4 && p.cidr === 32)?.address ?? null;
}

/** Invokes one command on the running daemon, recorded in the history; null when it names no peer yet. */
function invoke(history: History, daemon: Daemon, command: Command): Op | null {
  const { service, kernel } = daemon;
  if (command.kind === 'create') {
    return history.invoke('create', 'create', null, createWrites, () => service.createPeer());
  }
  if (command.kind === 'flushRuleset') {
    // `systemctl reload nftables`: the ruleset starts with `flush ruleset`, taking the daemon's
    // table (every cap and suspension) with it; tc (limits) and WireGuard keep theirs.
    kernel.loseAllCaps();
    kernel.suspended.get('wg0')?.clear();
    kernel.expiries.get('wg0')?.clear(); // and the expiry tables (issue 31)
    return history.invoke('flushRuleset', 'nft flush ruleset', null, {}, () => Promise.resolve());
  }
  const known = history.known();
  if (known.length === 0) return null;
  const key = known[command.peer % known.length];
  const id = history.idBase + history.ops.length;
  switch (command.kind) {
    case 'delete':
      return history.invoke('delete', 'delete', key, { exists: false }, () =>
        service.deletePeer(key),
      );
    case 'setLimit': {
      const bps = 10_000 + id;
      return history.invoke('setLimit', `setSpeedLimit ${bps}`, key, { limit: bps }, () =>
        service.setSpeedLimit(key, bps),
      );
    }
    case 'removeLimit':
      return history.invoke('removeLimit', 'removeSpeedLimit', key, { limit: null }, () =>
        service.removeSpeedLimit(key),
      );
    case 'setCap': {
      const quotaBytes = 1_000_000 + id;
      const { period } = command;
      if (period === null) {
        return history.invoke(
          'setCap',
          `setDataCap ${quotaBytes}`,
          key,
          { quota: quotaBytes },
          () => service.setDataCap(key, quotaBytes),
        );
      }
      return history.invoke(
        'setCap',
        `setDataCap ${quotaBytes} ${period}`,
        key,
        { quota: quotaBytes, plan: period },
        () => service.setDataCap(key, { quotaBytes, period, periodStart: PERIOD_START }),
      );
    }
    case 'removeCap':
      return history.invoke('removeCap', 'removeDataCap', key, { quota: null, plan: null }, () =>
        service.removeDataCap(key),
      );
    case 'resetCap':
      return history.invoke('resetCap', 'resetDataCap', key, {}, () => service.resetDataCap(key));
    case 'suspend':
      return history.invoke(
        'suspend',
        `setSuspension ${command.suspended}`,
        key,
        { suspended: command.suspended },
        () => service.setSuspension(key, command.suspended),
      );
    case 'setExpiry': {
      // Far ahead and unique per command, so a restored value names its one write.
      const at = command.clear ? null : EXPIRY_BASE + id * 1_000;
      return history.invoke(
        'setExpiry',
        `setExpiry ${at === null ? 'null' : new Date(at).toISOString()}`,
        key,
        { expires: at },
        () => service.setExpiry(key, at === null ? null : new Date(at).toISOString()),
      );
    }
    case 'usage': {
      const ip = addressOf(kernel, key);
      const cap = ip === null ? undefined : kernel.caps.get('wg0')?.get(ip);
      const counted = cap !== undefined && cap.publicKey === key ? command.bytes : 0;
      if (counted > 0) kernel.setUsed(ip!, cap!.usedBytes + counted);
      const op = history.invoke('usage', `usage +${command.bytes}, checkpoint`, key, {}, () =>
        daemon.checkpoints.checkpoint(),
      );
      op.counted = counted;
      return op;
    }
    case 'removeBehindBack': {
      const device = kernel.devices.get('wg0')!;
      device.peers = device.peers.filter((p) => p.publicKey !== key);
      const removal = history.invoke(
        'removeBehindBack',
        'wg set wg0 peer … remove',
        key,
        {
          exists: false,
        },
        () => Promise.resolve(),
      );
      // The list that tells the daemon: one whose kernel read starts after the removal. A poll
      // that arrives while a read is in flight shares that read (DESIGN §5), which may have
      // started before the removal; so the list waits for it and then reads (window 0 here).
      // A removal the daemon says it could not record (its state dir refused the write: logged
      // as peer_forget_failed) is not told: it may come back at a reboot, as the log said.
      removal.toldBy = history.invoke('list', 'list', null, {}, async () => {
        const logged = daemon.events.length;
        await service.snapshot();
        const read = await service.snapshot();
        if (daemon.events.slice(logged).includes('peer_forget_failed')) {
          throw new StateWriteError(
            new Error('peer_forget_failed'),
            'the removal behind the back may come back at a reboot',
          );
        }
        return read;
      });
      return removal;
    }
  }
}

const createWrites = { exists: true, limit: null, quota: null, plan: null, suspended: false };

async function untilSettled(history: History, onTurn: () => void): Promise<boolean> {
  for (let turns = 0; turns < MAX_TURNS; turns++) {
    if (history.settled()) return true;
    await turn();
    onTurn();
  }
  return history.settled();
}

/** What one round left: its result, and the daemon that restored after its crash. */
interface Round {
  result: CaseResult;
  next: { daemon: Daemon; disk: ModelDisk; bootId: string } | null;
}

/**
 * One round: the steps on `daemon` (on `disk`), the crash, and the reboot or restart after it
 * (a reboot takes `nextBoot` as its boot id).
 */
async function runRound(
  history: History,
  daemon: Daemon,
  disk: ModelDisk,
  bootId: string,
  nextBoot: string,
  round: RoundProgram,
  random: RandomSource,
): Promise<Round> {
  disk.arm(round.faults);
  let turns = 0;
  let image: ReturnType<typeof crashImage> | null = null;
  let kernelAfter: FakeKernel | null = null;
  const restarts = round.crash.restart === true;
  const crash = (): void => {
    image = crashImage(disk.memory, round.crash);
    if (restarts) kernelAfter = frozenKernel(daemon.kernel);
    history.crash(restarts);
  };
  const onTurn = (): void => {
    if (image === null && turns === round.crashAt) crash();
    turns++;
  };
  for (const step of round.steps) {
    for (let i = 0; i < step.gap; i++) {
      await turn();
      onTurn();
    }
    if (image !== null) break;
    invoke(history, daemon, step.command);
  }
  const violations: string[] = [];
  if (!(await untilSettled(history, onTurn))) {
    violations.push('the daemon hangs: a change never answers');
  }
  if (image === null) crash();
  const faults = [...disk.fired];

  let restored: Restored | null = null;
  let next: Round['next'] = null;
  try {
    const after = new ModelDisk(image!);
    const started =
      kernelAfter === null
        ? await reboot(after, nextBoot, random)
        : await restart(after, kernelAfter, bootId, random);
    restored = readRestored(started);
    next = { daemon: started, disk: after, bootId: kernelAfter === null ? nextBoot : bootId };
  } catch (error) {
    violations.push(`${history.after} refused to start: ${String(error)}`);
  }
  if (restored !== null) violations.push(...history.check(restored));
  return { result: { history, restored, violations, faults }, next };
}

/**
 * Runs a program: its first round on a new daemon, then each further round on the daemon the
 * crash before it restored, with a history that starts from what that restore showed. Returns
 * the first round that broke a rule, or the last one.
 */
export async function runCase(program: Program): Promise<CaseResult> {
  // The same keys in every run of a program: a shrunk case replays exactly.
  const random = seededRandom(1);
  let history = new History();
  let disk = new ModelDisk();
  let bootId = FIRST_BOOT;
  let daemon = await start(disk, FakeKernel.withInterface(), bootId, random);
  for (let i = 0; i < program.initialPeers; i++) {
    history.invoke('create', 'create', null, createWrites, () => daemon.service.createPeer());
    if (!(await untilSettled(history, () => undefined))) throw new Error('a create hangs');
  }
  const rounds: RoundProgram[] = [program, ...(program.rounds ?? [])];
  for (let r = 0; ; r++) {
    const { result, next } = await runRound(
      history,
      daemon,
      disk,
      bootId,
      `boot-${r + 2}`,
      rounds[r],
      random,
    );
    if (rounds.length > 1) result.round = `round ${r + 1} of ${rounds.length}`;
    if (result.violations.length > 0 || next === null || r === rounds.length - 1) {
      await next?.daemon.store.close();
      return result;
    }
    ({ daemon, disk, bootId } = next);
    const before = history;
    history = History.from(result.restored!);
    history.idBase = before.idBase + before.ops.length;
  }
}
