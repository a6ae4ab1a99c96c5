/**
 * Billing-period resets as changes of the peer (issue 19; ordering from issue 28).
 *
 * Contract. One scheduler (./period-scheduler.ts) holds the plans the kernel holds; each fresh
 * read hands it the live peers' plans (`schedule`). A reset it finds due runs through the change
 * pipeline like any change of the peer's cap: the reset cap (usage 0, the new period from `due`,
 * the last saved count as the closing estimate) is recorded BEFORE the kernel zeroes the quota,
 * so a crash in between never makes the next start close the same period a second time; the
 * kernel's exact closing figures are recorded after it, and only then is the reset logged and
 * announced (`peer.cap_reset`): at most once per boundary. A reset the kernel did not make (made
 * already, the peer or its plan gone) records the cap back as it was.
 */
import type { CapPlan, KernelDataCap, WireGuardDevice } from '../kernel/types';
import { capToKeep } from './cap-plan';
import type { EventLogger } from './contracts';
import { messageOf } from './kernel-calls';
import type { PeerChanges } from './peer-changes';
import { PeriodScheduler, type SchedulerClock } from './period-scheduler';
import type { ChangePipeline } from './pipeline';
import { tunnelAddressOf } from './view';

type Made = Awaited<ReturnType<PeerChanges['resetPeriod']>>;

export class PeriodResets {
  readonly scheduler: PeriodScheduler;
  /** The kernel side of a reset; bound once the changes exist (they use this scheduler). */
  private changes: PeerChanges | null = null;

  constructor(
    clock: SchedulerClock,
    private readonly pipeline: ChangePipeline,
    private readonly log: EventLogger,
    private readonly ifname: string,
  ) {
    this.scheduler = new PeriodScheduler({
      clock,
      reset: (key, due) => this.reset(key, due),
      failed: (key, due, error) => this.failed(key, due, error),
    });
  }

  bind(changes: PeerChanges): void {
    this.changes = changes;
  }

  /**
   * Hands the plans of a fresh read to the scheduler: each live peer's cap with a plan of its
   * own. Caps lost from the kernel keep their last seen plan (restored with it on a repair).
   */
  schedule(device: WireGuardDevice, caps: ReadonlyMap<string, KernelDataCap>): void {
    const plans = new Map<string, CapPlan>();
    for (const peer of device.peers) {
      const address = tunnelAddressOf(peer);
      const plan = address === null ? null : caps.get(address)?.plan;
      if (plan) plans.set(peer.publicKey, plan);
    }
    if (plans.size > 0 || this.scheduler.snapshot().size > 0) this.scheduler.replaceAll(plans);
  }

  private async reset(key: string, due: number): Promise<void> {
    const changes = this.changes;
    if (changes === null) throw new Error('period resets are not bound to the peer changes');
    const result = await this.pipeline.run<'cap', Made>(key, 'cap', async (latest) => ({
      // Made already, or no plan to reset: the record stays what it is.
      arg: (cap) =>
        !cap?.plan || cap.plan.periodFrom >= due
          ? cap
          : {
              ...cap,
              usedBytes: 0,
              plan: { ...cap.plan, periodFrom: due, previousUsedBytes: cap.usedBytes },
            },
      step: {
        kernel: () => changes.resetPeriod(key, due),
        after: (journal, made) => {
          if (made === null) return journal.recordCap(key, latest?.cap ?? null);
          const { closing, plan } = made.made;
          const rate = closing.throttleBytesPerSecond;
          return journal.recordCap(
            key,
            capToKeep({ ...closing, usedBytes: 0, plan, throttleBytesPerSecond: rate }),
          );
        },
      },
    }));
    if (result !== null) changes.announcePeriodReset(key, due, result.ip, result.made);
  }

  private failed(key: string, due: number, error: unknown): void {
    const at = new Date(due).toISOString();
    this.log.error(
      {
        event: 'data_cap_period_reset_failed',
        interface: this.ifname,
        publicKey: key,
        due: at,
        error: messageOf(error),
      },
      `the billing-period reset due at ${at} failed; retried in 10 s`,
    );
  }
}
