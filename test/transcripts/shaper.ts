/**
 * Speed-limit scenarios (src/kernel/shaper/): the tc skeleton built, found intact, broken by an
 * operator and repaired; limits set, replaced, removed and read back, also by a new Shaper (a
 * daemon restart); and a kernel refusing because a module cannot be loaded.
 *
 * While recording, `tc` and `ip` report what the kernel holds after each step (the oracle): tc
 * JSON for qdiscs and filters, tc's text for classes (iproute2 6.1 prints HTB classes as text
 * even with -j). Every request is also noted by message type, so the replay can check what kind
 * of requests each step made (a removal needs no dump, an intact skeleton needs no change).
 */
import { Shaper } from '../../src/kernel/shaper';
import type { LimitState } from '../../src/kernel/types';
import { DEFAULT_TICKS_PER_MICROSECOND, ticksPerMicrosecond } from '../../src/kernel/tc/htb';
import { NLM_F_DUMP, type TransportFactory, parseMessages } from '../../src/netlink';
import type { Scenario, ScenarioContext } from './scenario';

export const SHAPER_IF = 'wgshp0';
export const SHAPER_IFB = 'ifb-wgshp0';
/** A /22: third octets 0..3, so four last-octet tables (the multi-table layout). */
export const SHAPER_ADDRESS = '10.77.0.1/22';

const RTM_NAMES: Readonly<Record<number, string>> = {
  16: 'RTM_NEWLINK',
  17: 'RTM_DELLINK',
  18: 'RTM_GETLINK',
  22: 'RTM_GETADDR',
  36: 'RTM_NEWQDISC',
  37: 'RTM_DELQDISC',
  38: 'RTM_GETQDISC',
  40: 'RTM_NEWTCLASS',
  41: 'RTM_DELTCLASS',
  42: 'RTM_GETTCLASS',
  44: 'RTM_NEWTFILTER',
  45: 'RTM_DELTFILTER',
  46: 'RTM_GETTFILTER',
};

/** Message types sent during one step, e.g. "RTM_GETQDISC dump", in order. */
export type Step = string[];

/** Wraps a transport factory so every request message is noted by type. */
function noting(open: TransportFactory, sent: string[]): TransportFactory {
  return (protocol) => {
    const inner = open(protocol);
    return {
      protocol: inner.protocol,
      portId: inner.portId,
      send(datagram) {
        for (const message of parseMessages(datagram)) {
          const name = RTM_NAMES[message.type] ?? `type ${message.type}`;
          const dump = (message.flags & NLM_F_DUMP) === NLM_F_DUMP && name.includes('_GET');
          sent.push(dump ? `${name} dump` : name);
        }
        inner.send(datagram);
      },
      receive: (handler) => inner.receive(handler),
      setBusy: (busy) => inner.setBusy(busy),
      close: () => inner.close(),
    };
  };
}

/** What tc and ip say about both devices (recording only). */
export interface TcSnapshot {
  wgQdiscs: unknown;
  ifbQdiscs: unknown;
  wgFilters: unknown;
  ifbFilters: unknown;
  ingressFilters: unknown;
  /** `tc -d class show` text. */
  wgClasses: string;
  ifbClasses: string;
  ifbLink: unknown;
}

function snapshot(sh: (command: string) => string): TcSnapshot {
  const json = (command: string): unknown => {
    const out = sh(`${command} 2>/dev/null || true`).trim();
    return out === '' ? null : (JSON.parse(out) as unknown);
  };
  return {
    wgQdiscs: json(`tc -j qdisc show dev ${SHAPER_IF}`),
    ifbQdiscs: json(`tc -j qdisc show dev ${SHAPER_IFB}`),
    wgFilters: json(`tc -j filter show dev ${SHAPER_IF} parent 1:`),
    ifbFilters: json(`tc -j filter show dev ${SHAPER_IFB} parent 1:`),
    ingressFilters: json(`tc -j filter show dev ${SHAPER_IF} parent ffff:`),
    wgClasses: sh(`tc -d class show dev ${SHAPER_IF} 2>/dev/null || true`),
    ifbClasses: sh(`tc -d class show dev ${SHAPER_IFB} 2>/dev/null || true`),
    ifbLink: json(`ip -j -d link show ${SHAPER_IFB}`),
  };
}

/** Psched ticks/us of the recording kernel, kept in the oracle so the replay sends equal bytes. */
function ticks(context: ScenarioContext): number {
  if (context.recording) context.oracle.psched = context.sh('cat /proc/net/psched');
  const psched = context.oracle.psched;
  return typeof psched === 'string' ? ticksPerMicrosecond(psched) : DEFAULT_TICKS_PER_MICROSECOND;
}

function makeInterface(sh: (command: string) => string): void {
  removeInterfaces(sh);
  sh(`ip link add ${SHAPER_IF} type wireguard`);
  sh(`ip addr add ${SHAPER_ADDRESS} dev ${SHAPER_IF}`);
  sh(`ip link set ${SHAPER_IF} up`);
}

function removeInterfaces(sh: (command: string) => string): void {
  sh(`ip link del ${SHAPER_IF} 2>/dev/null || true`);
  sh(`ip link del ${SHAPER_IFB} 2>/dev/null || true`);
}

export interface CaughtError {
  name: string;
  message: string;
  /** NetlinkError fields of the cause, when the error wraps one. */
  causeCode: string | null;
  causeKernelMessage: string | null;
}

async function outcome(work: Promise<unknown>): Promise<CaughtError | null> {
  try {
    await work;
    return null;
  } catch (error) {
    const e = error as Error & { cause?: { code?: unknown; kernelMessage?: unknown } };
    return {
      name: e.name,
      message: e.message,
      causeCode: typeof e.cause?.code === 'string' ? e.cause.code : null,
      causeKernelMessage: typeof e.cause?.kernelMessage === 'string' ? e.cause.kernelMessage : null,
    };
  }
}

export interface SkeletonResult {
  steps: Record<'build' | 'intact' | 'setLimit' | 'repair' | 'refilter', Step>;
}

/** The one live peer of the skeleton scenario: the limit set there is restored, not dropped. */
const LIMITED = [{ address: '10.77.1.2', publicKey: '' }];

export const shaperSkeleton: Scenario<SkeletonResult> = {
  name: 'shaper-skeleton',
  description:
    'tc skeleton on a WireGuard interface with a /22: HTB + u32 hash tables on it and on its IFB, ingress + mirred redirect; ensure() again on an intact skeleton; repair after the operator deleted the ingress qdisc and the IFB, then the u32 filters',
  setup: makeInterface,
  async run(context) {
    const { recording, sh, oracle } = context;
    const sent: string[] = [];
    const shaper = new Shaper(noting(context.open, sent), { ticksPerUs: ticks(context) });
    const step = (): Step => sent.splice(0);
    try {
      await shaper.ensure(SHAPER_IF, []);
      const build = step();
      if (recording) oracle.built = snapshot(sh);
      await shaper.ensure(SHAPER_IF, []);
      const intact = step();
      if (recording) oracle.intact = snapshot(sh);
      await shaper.setLimit(SHAPER_IF, { address: '10.77.1.2', publicKey: '' }, 200_000);
      const setLimit = step();
      if (recording) {
        oracle.limited = snapshot(sh);
        sh(`tc qdisc del dev ${SHAPER_IF} ingress`);
        sh(`ip link del ${SHAPER_IFB}`);
        oracle.broken = snapshot(sh);
      }
      await shaper.ensure(SHAPER_IF, LIMITED);
      const repair = step();
      if (recording) {
        oracle.repaired = snapshot(sh);
        sh(`tc filter del dev ${SHAPER_IF} parent 1: prio 10`);
        oracle.unfiltered = snapshot(sh);
      }
      await shaper.ensure(SHAPER_IF, LIMITED);
      const refilter = step();
      if (recording) oracle.refiltered = snapshot(sh);
      return { steps: { build, intact, setLimit, repair, refilter } };
    } finally {
      shaper.close();
    }
  },
  teardown: removeInterfaces,
};

export interface LimitsResult {
  steps: Record<'set' | 'replace' | 'remove' | 'removeAgain' | 'restartList' | 'restartSet', Step>;
  lists: Record<
    'set' | 'replace' | 'remove' | 'restart' | 'restartSet',
    Array<[string, LimitState]>
  >;
  outside: CaughtError | null;
}

export const shaperLimits: Scenario<LimitsResult> = {
  name: 'shaper-limits',
  description:
    'per-peer limits on a /22: set two (one above 4 GiB/s, RATE64), replace one, remove it twice, read back with RTM_GETTCLASS; a new Shaper (restart) lists them and sets another',
  setup: makeInterface,
  async run(context) {
    const { recording, sh, oracle } = context;
    const sent: string[] = [];
    const open = noting(context.open, sent);
    const ticksPerUs = ticks(context);
    let shaper = new Shaper(open, { ticksPerUs });
    const step = (): Step => sent.splice(0);
    const list = async (): Promise<Array<[string, LimitState]>> =>
      [...(await shaper.listLimits(SHAPER_IF)).entries()].sort(([a], [b]) => a.localeCompare(b));
    try {
      await shaper.ensure(SHAPER_IF, []);
      step();
      await shaper.setLimit(SHAPER_IF, { address: '10.77.0.2', publicKey: '' }, 200_000);
      await shaper.setLimit(SHAPER_IF, { address: '10.77.1.5', publicKey: '' }, 5_000_000_000);
      const set = step();
      if (recording) oracle.set = snapshot(sh);
      const listSet = await list();
      step();
      await shaper.setLimit(SHAPER_IF, { address: '10.77.0.2', publicKey: '' }, 300_000);
      const replace = step();
      if (recording) oracle.replaced = snapshot(sh);
      const listReplace = await list();
      step();
      await shaper.removeLimit(SHAPER_IF, '10.77.0.2');
      const remove = step();
      if (recording) oracle.removed = snapshot(sh);
      await shaper.removeLimit(SHAPER_IF, '10.77.0.2');
      const removeAgain = step();
      const listRemove = await list();
      step();
      const outside = await outcome(
        shaper.setLimit(SHAPER_IF, { address: '10.78.0.2', publicKey: '' }, 200_000),
      );
      step();
      shaper.close();
      shaper = new Shaper(open, { ticksPerUs });
      const listRestart = await list();
      const restartList = step();
      await shaper.setLimit(SHAPER_IF, { address: '10.77.3.254', publicKey: '' }, 1_000);
      const restartSet = step();
      if (recording) oracle.restarted = snapshot(sh);
      const listRestartSet = await list();
      step();
      return {
        steps: { set, replace, remove, removeAgain, restartList, restartSet },
        lists: {
          set: listSet,
          replace: listReplace,
          remove: listRemove,
          restart: listRestart,
          restartSet: listRestartSet,
        },
        outside,
      };
    } finally {
      shaper.close();
    }
  },
  teardown: removeInterfaces,
};

/** The tc modules, in the order ensure() needs them. */
export const SHAPER_MODULES = ['ifb', 'sch_htb', 'cls_u32', 'sch_ingress', 'act_mirred'] as const;
/** Where the kernel's module helper is saved while the scenario blocks it. */
const SAVED_HELPER = '/tmp/shaper-scenario-modprobe';

export interface MissingModuleResult {
  /** ensure() outcome with only the first i modules loaded, for i = 0..5. */
  attempts: Array<CaughtError | null>;
}

export const shaperMissingModule: Scenario<MissingModuleResult> = {
  name: 'shaper-missing-module',
  description:
    'ensure() on a kernel that cannot load tc modules (its module helper is pointed at a missing file): fails naming ifb, sch_htb, cls_u32, sch_ingress, act_mirred in turn as they are loaded one by one with modprobe, then succeeds',
  setup(sh) {
    // Fresh VM: nothing of tc is loaded yet, unless an earlier scenario left it; unload it.
    sh(`rmmod ${[...SHAPER_MODULES].reverse().join(' ')} 2>/dev/null || true`);
    const loaded = sh('cat /proc/modules')
      .split('\n')
      .map((line) => line.split(' ')[0]);
    const left = SHAPER_MODULES.filter((module) => loaded.includes(module));
    if (left.length > 0) throw new Error(`cannot record: ${left.join(', ')} still loaded`);
    sh(`cat /proc/sys/kernel/modprobe > ${SAVED_HELPER}`);
    // request_module() now fails, as on a kernel built without these modules.
    sh('echo /nonexistent-modprobe > /proc/sys/kernel/modprobe');
    makeInterface(sh);
  },
  async run(context) {
    const { recording, sh, oracle } = context;
    const shaper = new Shaper(context.open, { ticksPerUs: ticks(context) });
    const attempts: Array<CaughtError | null> = [];
    const modules: string[] = [];
    try {
      for (let loaded = 0; loaded <= SHAPER_MODULES.length; loaded++) {
        if (recording) {
          // Which tc modules the kernel has at this attempt, as /proc/modules says.
          modules.push(
            sh('cat /proc/modules')
              .split('\n')
              .map((line) => line.split(' ')[0])
              .filter((name) => (SHAPER_MODULES as readonly string[]).includes(name))
              .sort()
              .join(' '),
          );
        }
        attempts.push(await outcome(shaper.ensure(SHAPER_IF, [])));
        // modprobe loads the module itself (finit_module), without the blocked helper.
        if (recording && loaded < SHAPER_MODULES.length) sh(`modprobe ${SHAPER_MODULES[loaded]}`);
      }
      if (recording) {
        oracle.modules = modules;
        oracle.finally = snapshot(sh);
      }
      return { attempts };
    } finally {
      shaper.close();
    }
  },
  teardown(sh) {
    sh(`cat ${SAVED_HELPER} > /proc/sys/kernel/modprobe 2>/dev/null || true`);
    removeInterfaces(sh);
  },
};

export const shaperScenarios: Scenario[] = [
  // First: it needs a kernel where no tc module has been loaded yet.
  shaperMissingModule as Scenario,
  shaperSkeleton as Scenario,
  shaperLimits as Scenario,
];
