/**
 * Deletions behind the daemon's back (issue 28).
 *
 * Contract. A committed peer (one the journal holds) that a fresh read of the device no longer
 * shows was removed behind the daemon's back (`wg set … remove`). `notice(device, addsAtStart)`
 * records each such deletion through the peer's pipeline turn (./pipeline.ts, kind `gone`: the
 * record first, as a DELETE's), then removes its limit, cap and suspension by address and
 * announces `peer.deleted` once (./peer-changes.ts `forgetGone`); it resolves once that is done,
 * so the list that shows a peer gone answers only after its deletion is on disk and no reboot
 * brings it back. A read during which a create reached the kernel (`adds` moved) may have missed
 * that create's peer: then each deletion is first confirmed by a read of its own. Peers gone with
 * their interface (another ifindex than the journal's) are not deletions: the interface was lost,
 * and the next start restores them as after a reboot. A deletion the state directory refuses is
 * logged (`peer_forget_failed`) and tried again by the next read. Without a state directory
 * nothing is committed and nothing happens here.
 */
import type { WireGuardDevice } from '../kernel/types';
import type { EventLogger, PeerJournal } from './contracts';
import { type KernelCalls, messageOf } from './kernel-calls';
import type { PeerChanges } from './peer-changes';
import type { ChangePipeline } from './pipeline';
import { tunnelAddressOfCidrs } from './restore-plan';

/**
 * The committed peers (public keys) that a device read does not show. Pure; costs one lookup
 * per committed peer (the device's keys in a Set only when there is something to look for).
 */
export function goneFrom(committed: Iterable<string>, device: WireGuardDevice): string[] {
  let keys: Set<string> | null = null;
  const gone: string[] = [];
  for (const key of committed) {
    keys ??= new Set(device.peers.map((p) => p.publicKey));
    if (!keys.has(key)) gone.push(key);
  }
  return gone;
}

/** Whether the device lists exactly these keys, in this order: one comparison per peer. */
function sameKeys(keys: readonly string[], device: WireGuardDevice): boolean {
  const peers = device.peers;
  if (peers.length !== keys.length) return false;
  for (let i = 0; i < peers.length; i++) if (peers[i]!.publicKey !== keys[i]) return false;
  return true;
}

export interface BehindBackOptions {
  journal: PeerJournal | null;
  pipeline: ChangePipeline;
  changes: PeerChanges;
  calls: KernelCalls;
  kernelChange<T>(task: () => Promise<T>): Promise<T>;
  /** Kernel adds of created peers so far (./creates.ts). */
  adds(): number;
  log: EventLogger;
}

export class BehindBackDeletions {
  /** Deletions being recorded, by public key: a second read joins the first's. */
  private readonly forgetting = new Map<string, Promise<void>>();
  /** The interface the journal's peers live on (as restored, else as first read). */
  private ifindex: number | null = null;
  /** The device's keys, in order, at the last read that showed every committed peer. */
  private allShown: { keys: readonly string[]; committed: number } | null = null;

  constructor(private readonly o: BehindBackOptions) {}

  /** The ifindex the journal's peers live on: as restored, else as the service first read it. */
  home(device: WireGuardDevice): number {
    this.ifindex ??= this.o.journal?.state.boot?.ifindex ?? device.ifindex;
    return this.ifindex;
  }

  async notice(device: WireGuardDevice, addsAtStart: number): Promise<void> {
    const journal = this.o.journal;
    if (journal === null || journal.state.peers.size === 0) return;
    if (device.ifindex !== this.home(device)) return;
    // Polled every window (issue 29): a device with the very peers, in the order, of the last
    // read that showed every committed peer, and as many committed, shows them all again.
    const committed = journal.state.peers.size;
    if (this.allShown?.committed === committed && sameKeys(this.allShown.keys, device)) return;
    const gone = goneFrom(journal.state.peers.keys(), device);
    this.allShown =
      gone.length === 0 ? { keys: device.peers.map((p) => p.publicKey), committed } : null;
    const raced = this.o.adds() !== addsAtStart;
    await Promise.all(gone.map((key) => this.forget(key, raced)));
  }

  private forget(key: string, confirm: boolean): Promise<void> {
    const running = this.forgetting.get(key);
    if (running !== undefined) return running;
    const { pipeline, changes, calls } = this.o;
    const address = tunnelAddressOfCidrs(this.o.journal?.state.peers.get(key)?.allowedIps ?? []);
    const stillThere = async (): Promise<boolean> =>
      (await this.o.kernelChange(() => calls.readDevice())).peers.some((p) => p.publicKey === key);
    const forgotten = pipeline
      .run(key, 'gone', async (latest) => {
        const gone = latest !== undefined && (!confirm || !(await stillThere()));
        const kernel = (): Promise<void> =>
          gone ? changes.forgetGone(key, address) : Promise.resolve();
        return { arg: gone, step: { kernel } };
      })
      .catch((error: unknown) => {
        this.o.log.warn(
          {
            event: 'peer_forget_failed',
            interface: calls.ifname,
            publicKey: key,
            error: messageOf(error),
          },
          "recording a peer removed behind wg-peerd's back failed; the next read tries again",
        );
      })
      .finally(() => this.forgetting.delete(key));
    this.forgetting.set(key, forgotten);
    return forgotten;
  }
}
