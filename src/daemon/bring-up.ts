/**
 * The first phases of a start, each a function that either returns what the next phase needs
 * or throws a StartupError (one line, its exit status) after closing what it opened before:
 * configuration (the webhooks file, read once and again on SIGHUP), kernel (the netlink
 * sockets), state (the state directory and its webhook outbox, checked before anything changes
 * in the kernel: a bad one refuses the start), interface (created, adopted or checked, and its
 * caps placed where IPv6 is counted too), and restore (the saved state going back into the
 * kernel in the background while the API already answers; /readyz says RESTORING until it
 * settled). Nothing here listens or serves: that is src/daemon/serve.ts.
 */
import type { Config } from '../config';
import { loadWebhooksFile, type WebhookTarget } from '../events';
import type { Kernel } from '../kernel/types';
import type { Logger } from '../log';
import { InterfaceNotWireGuardError, ensureInterface } from '../peers';
import { restoreFromState, type RestoreSummary } from '../peers/restore';
import { type Outbox, StateDirError, StateStore, readBootId } from '../state';
import { statusWhile } from '../systemd-notify';
import {
  EXIT_CONFIG,
  EXIT_FAILURE,
  StartupError,
  explains,
  fileReader,
  messageOf,
  type DaemonDeps,
} from './contract';

/** The state directory opened (null without --state-dir), and its webhook outbox. */
export interface OpenedState {
  readonly store: StateStore | null;
  readonly outbox: Outbox | null;
}

export type Iface = Awaited<ReturnType<typeof ensureInterface>>;

/** The restore under way: the API serves while it runs, lists and changes wait for it. */
export interface Restore {
  /** Settles with the summary (null without a state dir) or the restore's failure. */
  readonly restoring: Promise<RestoreSummary | null>;
  /** Resolves once the restore settled, either way; never rejects. */
  readonly settled: Promise<void>;
  /** Whether the restore settled (a failed one too). */
  done(): boolean;
  /** The summary of a restore that succeeded, else null. */
  summary(): RestoreSummary | null;
}

/** The webhooks file's targets (none without --webhooks-file); throws what is wrong with it. */
export function readWebhookTargets(config: Config, deps: DaemonDeps): WebhookTarget[] {
  return config.webhooksFile === null
    ? []
    : loadWebhooksFile(config.webhooksFile, fileReader(deps));
}

/** Phase configuration: the files the start reads besides the flags. A bad one exits 2. */
export function configurationPhase(config: Config, deps: DaemonDeps): WebhookTarget[] {
  try {
    return readWebhookTargets(config, deps);
  } catch (error) {
    throw new StartupError(messageOf(error), EXIT_CONFIG);
  }
}

/** Phase kernel: the netlink sockets (and the native addon they need). */
export async function kernelPhase(deps: DaemonDeps): Promise<Kernel> {
  try {
    return await deps.openKernel();
  } catch (error) {
    throw new StartupError(
      explains(error)
        ? messageOf(error)
        : `cannot open the kernel's netlink sockets: ${messageOf(error)}`,
      EXIT_FAILURE,
    );
  }
}

/**
 * Phase state: the state directory, checked before anything changes in the kernel: a bad one
 * (exposed, damaged, another interface's) refuses the start with one line. With webhooks,
 * their pending deliveries are an outbox beside the journal (at least once).
 */
export async function statePhase(
  config: Config,
  deps: DaemonDeps,
  kernel: Kernel,
): Promise<OpenedState> {
  if (config.stateDir === null) return { store: null, outbox: null };
  try {
    const store = await StateStore.open({
      dir: config.stateDir,
      interfaceName: config.interfaceName,
      ...(deps.stateFs === undefined ? {} : { fs: deps.stateFs }),
    });
    logStateOpened(store, deps.logger);
    const outbox = config.webhooksFile === null ? null : await openOutbox(store, deps.logger);
    return { store, outbox };
  } catch (error) {
    kernel.close();
    throw new StartupError(
      error instanceof StateDirError
        ? error.message
        : `cannot use the state directory ${config.stateDir}: ${messageOf(error)}`,
      EXIT_CONFIG,
    );
  }
}

/** Closes the outbox, then the journal, quietly: the start is failing or the daemon stopping. */
export async function closeQuietly(state: OpenedState): Promise<void> {
  await state.outbox?.close().catch(() => undefined);
  await state.store?.close().catch(() => undefined);
}

/** Phase interface: the WireGuard interface made to exist, then its caps placed. */
export async function interfacePhase(
  config: Config,
  deps: DaemonDeps,
  kernel: Kernel,
  state: OpenedState,
): Promise<Iface> {
  let iface: Iface;
  try {
    const saved = state.store;
    iface = await ensureInterface(
      kernel,
      {
        interfaceName: config.interfaceName,
        address: config.address,
        address6: config.address6,
        listenPort: config.listenPort,
        ...(saved === null
          ? {}
          : {
              saved: {
                iface: saved.state.iface,
                readServerKey: () => saved.readServerKey(),
                saveInterface: (key, settings) => saved.saveInterface(key, settings),
              },
            }),
      },
      deps.logger,
    );
  } catch (error) {
    kernel.close();
    await closeQuietly(state);
    const status =
      error instanceof InterfaceNotWireGuardError || error instanceof StateDirError
        ? EXIT_CONFIG
        : EXIT_FAILURE;
    throw new StartupError(messageOf(error), status);
  }
  await placeCaps(config, deps.logger, kernel, iface);
  return iface;
}

/**
 * A dual-stack interface keeps its caps where IPv6 is counted too (issue 18). A kernel
 * without nf_tables is not an error here: caps then fail as they always did.
 */
async function placeCaps(
  config: Config,
  logger: Logger,
  kernel: Kernel,
  iface: Iface,
): Promise<void> {
  try {
    const moved = await kernel.quota.setDualStack(
      config.interfaceName,
      iface.addresses6.length > 0,
    );
    for (const repair of moved) {
      logger.warn(
        { event: 'kernel_repaired', interface: config.interfaceName, facility: 'quota', ...repair },
        `data caps: ${repair.found}: ${repair.done}`,
      );
    }
  } catch (error) {
    logger.warn(
      { event: 'kernel_repair_failed', interface: config.interfaceName, error: messageOf(error) },
      'moving the data caps to a dual-stack (inet) table failed; the ip table still counts IPv4 alone: restart wg-peerd to move them',
    );
  }
}

/**
 * Phase restore, begun: with a state dir, the saved state goes back into the kernel while the
 * API already answers (/readyz says RESTORING, lists and changes wait for the end: never a
 * half-restored list), and systemd hears a STATUS line every few seconds until it settled.
 */
export function restorePhase(
  config: Config,
  deps: DaemonDeps,
  kernel: Kernel,
  state: OpenedState,
  iface: Iface,
): Restore {
  const store = state.store;
  const restoring: Promise<RestoreSummary | null> =
    store === null
      ? Promise.resolve(null)
      : (deps.readBootId ?? readBootId)().then((bootId) =>
          restoreFromState({
            kernel,
            store,
            interfaceName: config.interfaceName,
            ifindex: iface.ifindex,
            created: iface.created,
            adopted: iface.adopted,
            bootId,
            logger: deps.logger,
          }),
        );
  let restored: RestoreSummary | null = null;
  let done = false;
  const settled = restoring.then(
    (summary) => {
      restored = summary;
      done = true;
    },
    () => {
      done = true;
    },
  );
  if (deps.notify !== undefined && store !== null) {
    const what = `restoring ${store.state.peers.size} saved peers of ${config.interfaceName}`;
    statusWhile(deps.notify, settled, (seconds) => `${what} (${seconds} s)`);
  }
  return { restoring, settled, done: () => done, summary: () => restored };
}

/**
 * The webhook outbox of the state directory: a file that must not be used refuses the start
 * (StateDirError); one that cannot be read or written leaves delivery in memory, said at warn.
 */
async function openOutbox(store: StateStore, logger: Logger): Promise<Outbox | null> {
  try {
    const { outbox, damaged } = await store.openOutbox();
    if (damaged !== null) {
      logger.warn(
        { event: 'webhook_outbox_torn', interface: store.interfaceName, ...damaged },
        `the webhook outbox ${store.outboxPath} held ${damaged.lines} damaged lines (a write a crash cut): skipped`,
      );
    }
    return outbox;
  } catch (error) {
    if (error instanceof StateDirError) throw error;
    logger.warn(
      {
        event: 'webhook_outbox_unavailable',
        interface: store.interfaceName,
        error: messageOf(error),
      },
      `the webhook outbox ${store.outboxPath} cannot be used (${messageOf(error)}): pending webhook deliveries live in memory only, a restart loses them`,
    );
    return null;
  }
}

/** What the start says of the state directory it opened: a dropped torn tail, read-only. */
function logStateOpened(store: StateStore, logger: Logger): void {
  const torn = store.tornTail;
  if (torn !== null) {
    logger.warn(
      { event: 'state_torn_tail', interface: store.interfaceName, ...torn },
      `the journal ended in a batch a crash cut (never acknowledged): dropped ${torn.bytes} ` +
        `bytes, ${torn.records} records`,
    );
  }
  if (store.readOnly !== null) {
    logger.warn(
      { event: 'state_read_only', interface: store.interfaceName, reason: store.readOnly },
      `the state directory is read-only (${store.readOnly}): the saved state is restored, ` +
        'every change answers 507 until its file system is repaired and wg-peerd restarted',
    );
  }
}
