/**
 * The daemon of the crash-model test, wired as src/main.ts wires it with `--state-dir` (and as
 * test/unit/state/durable.test.ts does): StateStore, restoreFromState at start, PeerService over
 * the fake kernel, UsageCheckpoints riding on the list's reads and sharing the usage fence. A
 * start is a boot id and a kernel: `start` on a disk (the first boot, kernel and disk as given),
 * `reboot` on the image a crash left (a NEW empty fake kernel, a new boot id), `restart` on the
 * image kill -9 left and the kernel as it was then (the same boot id). No timers run:
 * the billing-period clock never fires and a checkpoint's wait for the list is one turn of the
 * event loop, so a case's time is its turns, not the wall clock's.
 */
import nacl from 'tweetnacl';
import { PeerService } from '../../../../src/peers';
import { UsageCheckpoints } from '../../../../src/peers/checkpoint';
import { restoreFromState, type RestoreSummary } from '../../../../src/peers/restore';
import { UsageFence } from '../../../../src/peers/usage-fence';
import type { RandomSource } from '../../../../src/peers/keys';
import { StateStore } from '../../../../src/state';
import type { StateFs } from '../../../../src/state/files';
import { FakeKernel } from '../../support/fake-kernel';
import type { EventLogger } from '../../../../src/peers/service';

export const STATE_DIR = '/var/lib/wg-peerd';
export const IFNAME = 'wg0';
/** The wall clock of every case: inside a day, week and month period of PERIOD_START. */
export const NOW = Date.parse('2026-03-10T12:00:00Z');
export const PERIOD_START = '2026-03-01T00:00:00Z';

export interface Daemon {
  kernel: FakeKernel;
  store: StateStore;
  service: PeerService;
  checkpoints: UsageCheckpoints;
  /** The events the daemon logged, in order (a pino logger per case would cost a third of the time). */
  events: string[];
  restored: RestoreSummary;
}

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * Memoizes X25519's base-point multiplication (tweetnacl's, in pure JavaScript: 14 ms a call
 * here) for the life of the test: the fake kernel derives the server's public key on every dump,
 * and every run of a program makes the same peer keys (seededRandom), so thousands of cases fit
 * in seconds. A pure function's cache: nothing the daemon sees changes. Returns the undo.
 */
export function memoizeX25519(): () => void {
  const original = nacl.scalarMult.base;
  const known = new Map<string, Uint8Array>();
  nacl.scalarMult.base = (n: Uint8Array): Uint8Array => {
    const hex = Buffer.from(n).toString('hex');
    let q = known.get(hex);
    if (q === undefined) {
      q = original(n);
      known.set(hex, q);
    }
    return Uint8Array.from(q);
  };
  return () => {
    nacl.scalarMult.base = original;
  };
}

/** Bytes from a seeded generator (xorshift32): the same case makes the same keys. */
export function seededRandom(seed: number): RandomSource {
  let state = seed >>> 0 || 0x9e3779b9;
  return (length) => {
    const out = new Uint8Array(length);
    for (let i = 0; i < length; i++) {
      state ^= state << 13;
      state >>>= 0;
      state ^= state >>> 17;
      state ^= state << 5;
      state >>>= 0;
      out[i] = state & 0xff;
    }
    return out;
  };
}

/** Opens the state directory on `fs`, restores into `kernel` as the boot `bootId`, and wires the daemon. */
export async function start(
  fs: StateFs,
  kernel: FakeKernel,
  bootId: string,
  random: RandomSource,
): Promise<Daemon> {
  const events: string[] = [];
  const line = (object: Record<string, unknown>): void => {
    events.push(String(object['event']));
  };
  const logger: EventLogger = { info: line, warn: line, error: line };
  const store = await StateStore.open({ dir: STATE_DIR, interfaceName: IFNAME, fs });
  const restored = await restoreFromState({
    kernel,
    store,
    interfaceName: IFNAME,
    ifindex: kernel.links.get(IFNAME)!.info.index,
    created: false,
    bootId,
    logger,
  });
  const usageFence = new UsageFence();
  const service = new PeerService({
    kernel,
    interfaceName: IFNAME,
    endpointHost: 'vpn.example.net',
    logger,
    journal: store,
    usageFence,
    random,
    now: () => NOW,
    periodClock: { now: () => NOW, setTimer: () => null, clearTimer: () => undefined },
  });
  const checkpoints = new UsageCheckpoints({
    quota: kernel.quota,
    store,
    fence: usageFence,
    listReads: service.listReads,
    interfaceName: IFNAME,
    intervalMs: 10_000,
    logger,
    now: () => NOW,
    sleep: turn,
  });
  return { kernel, store, service, checkpoints, events, restored };
}

/** The boot every case starts in. */
export const FIRST_BOOT = 'boot-1';

/**
 * The kernel as it is now, as a second fake (same interface, same ifindex): what a daemon
 * restarted after kill -9 finds, while the old one's calls in flight go on in the original.
 */
export function frozenKernel(kernel: FakeKernel): FakeKernel {
  const copy = FakeKernel.withInterface();
  copy.devices.get(IFNAME)!.peers = structuredClone(kernel.devices.get(IFNAME)!.peers);
  for (const [name, limits] of kernel.limits) copy.limits.set(name, structuredClone(limits));
  for (const [name, caps] of kernel.caps) copy.caps.set(name, structuredClone(caps));
  for (const [name, held] of kernel.suspended) copy.suspended.set(name, structuredClone(held));
  for (const [name, held] of kernel.expiries) copy.expiries.set(name, structuredClone(held));
  return copy;
}

/** A restart in the same boot after kill -9: the kernel as the crash left it, the same boot id. */
export function restart(
  image: StateFs,
  kernel: FakeKernel,
  bootId: string,
  random: RandomSource,
): Promise<Daemon> {
  return start(image, kernel, bootId, random);
}

/** A reboot after a crash: a new empty kernel with the interface (as the unit recreates it), a new boot. */
export function reboot(image: StateFs, bootId: string, random: RandomSource): Promise<Daemon> {
  return start(image, FakeKernel.withInterface(), bootId, random);
}
