/**
 * Readiness (issue 9, GET /readyz): can this daemon do its job right now? The interface exists
 * and is WireGuard, and the three kernel facilities answer: generic netlink WireGuard, tc and
 * nf_tables. Only cheap kernel reads (Kernel.probe, one link lookup), never a WireGuard dump:
 * a probe costs the same at 50,000 peers as at none, and it says nothing about peers.
 */
import type { Kernel } from '../kernel/types';
import {
  DomainError,
  InterfaceNotWireGuardError,
  RestoringError,
  UnavailableError,
  translateKernelError,
  type Facility,
} from './errors';

export type CheckName = 'interface' | 'wireguard' | 'tc' | 'nftables';

/** "ok", or why the check failed (the domain error's sentence). */
export type Checks = Record<CheckName, string>;

export interface Readiness {
  ready: boolean;
  checks: Checks;
  /** The first failing check's error in the order of `Checks` (what the 503 envelope names). */
  error: DomainError | Error | null;
}

export interface ReadinessApi {
  check(): Promise<Readiness>;
}

export const OK = 'ok';

/** The domain error for a failed kernel call of `facility` (as every route would answer). */
function failure(error: unknown, facility: Facility, ifname: string): DomainError | Error {
  const translated = translateKernelError(error, facility, ifname);
  return translated instanceof Error ? translated : new Error(String(translated));
}

/** The state directory takes no writes (issue 28: its file system is read-only): not ready. */
export class StateReadOnlyUnreadyError extends UnavailableError {
  constructor(reason: string) {
    super(
      'STATE_READ_ONLY',
      `The state directory is read-only (${reason}): the saved state was restored and lists ` +
        'work, every change answers 507; repair its file system and restart wg-peerd',
    );
  }
}

export class ReadinessCheck implements ReadinessApi {
  constructor(
    private readonly kernel: Pick<Kernel, 'link' | 'probe'>,
    private readonly ifname: string,
    /** True while a start with --state-dir puts the saved state back: not ready. */
    private readonly restoring: () => boolean = () => false,
    /** Why the state directory takes no writes (read-only), or null: not ready while it is not. */
    private readonly stateReadOnly: () => string | null = () => null,
  ) {}

  async check(): Promise<Readiness> {
    const readiness = await this.checkKernel();
    const readOnly = this.stateReadOnly();
    if (!this.restoring() && readOnly === null) return readiness;
    return {
      ...readiness,
      ready: false,
      error:
        readiness.error ??
        (this.restoring()
          ? new RestoringError(this.ifname)
          : new StateReadOnlyUnreadyError(readOnly!)),
    };
  }

  private async checkKernel(): Promise<Readiness> {
    const { link, probe } = this.kernel;
    const ifname = this.ifname;
    const interfaceCheck = link.getLink(ifname).then(
      (info) => {
        if (info.kind !== 'wireguard') throw new InterfaceNotWireGuardError(ifname, info.kind);
        return info.index;
      },
      (error: unknown) => {
        throw failure(error, 'link', ifname);
      },
    );
    // Every check runs whatever the others find, so the answer names each missing piece.
    const [iface, wireguard, tc, nftables] = await Promise.allSettled([
      interfaceCheck,
      probe.genlFamily('wireguard').catch((error: unknown) => {
        throw failure(error, 'wireguard', ifname);
      }),
      // tc answers for the interface's qdiscs; without the interface, for the host's.
      interfaceCheck
        .catch(() => 0)
        .then((index) => probe.qdiscCount(index))
        .catch((error: unknown) => {
          throw failure(error, 'shaper', ifname);
        }),
      probe.nftGeneration().catch((error: unknown) => {
        throw failure(error, 'quota', ifname);
      }),
    ]);
    const results = { interface: iface, wireguard, tc, nftables };
    const checks = {} as Checks;
    let first: DomainError | Error | null = null;
    for (const name of ['interface', 'wireguard', 'tc', 'nftables'] as const) {
      const result = results[name];
      if (result.status === 'fulfilled') {
        checks[name] = OK;
      } else {
        const error =
          result.reason instanceof Error ? result.reason : new Error(String(result.reason));
        checks[name] = error.message;
        first ??= error;
      }
    }
    return { ready: first === null, checks, error: first };
  }
}
