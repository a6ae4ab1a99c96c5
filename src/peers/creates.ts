/**
 * Creates: a new peer's address, keys and client config, and its way into the kernel and the
 * journal.
 *
 * Contract. No two peers ever get one address: creates are planned inside the kernel's change
 * queue from one read of the interface, and an address is free only when no peer of the device
 * has it in its allowed IPs, no create in flight reserved it, and (with a state directory) no
 * peer the journal still holds has it (a peer removed behind the daemon's back keeps its address
 * until its deletion is recorded). With a state directory creates come in batches: every create
 * that arrives while one batch is planned joins the next, its intent saved before the kernel
 * change, its commit after it; a peer is answered, logged and announced (`peer.created`) only
 * once its commit is on disk, and one whose commit could not be saved is removed from the
 * kernel again (nobody could ever use it). Without one, a create is one kernel change.
 */
import type { IpPrefix, Ipv6Address } from '../kernel/types';
import { networkCidr } from '../kernel/ipv4';
import { networkCidr6 } from '../kernel/ipv6';
import { allocateAddress, allocateAddress6 } from './allocator';
import { DUAL_STACK_CLIENT_ALLOWED_IPS, formatEndpoint, renderClientConfig } from './client-config';
import { InterfaceNotReadyError, InterfaceNotWireGuardError, PoolExhaustedError } from './errors';
import type { PeerChangeSink } from './event-sink';
import type { KernelCalls } from './kernel-calls';
import { KEY_LENGTH, defaultRandom, generateKeyPair, type RandomSource } from './keys';
import type { ChangePipeline, PeerJournal } from './pipeline';
import type { CreatedPeer, EventLogger } from './contracts';
import { allInOrder } from './settled';
import { prefixOf } from './cidrs';
import type { ClientChoices, ClientDefaults, CreateOptions } from './client-options';
import { clientChoices } from './client-options';
import type { PeerNames } from './names';
import type { ExpiryTracker } from './expiry';

/** What a create decided before the kernel change. */
interface CreatePlan {
  ip: string;
  ip6: string | null;
  keys: { publicKey: string; privateKey: string };
  serverPublicKey: string;
  endpoint: string;
  clientAllowedIps: string;
  /** The client's config lines this create asked for (or the daemon's defaults). */
  client: ClientChoices;
  /** 32 random bytes when the peer gets a preshared key (issue 31); never logged. */
  presharedKey: Buffer | null;
  /** The name the create gave it (issue 31); null: none. */
  name: string | null;
  /** Its expiry (issue 31), ms since the epoch; null: none. */
  expiresAt: number | null;
}

interface CreateWaiter {
  options: CreateOptions;
  resolve: (created: CreatedPeer) => void;
  reject: (error: unknown) => void;
}

/** The allowed IPs a new peer gets: `<ip>/32`, and `<ip6>/128` on a dual-stack interface. */
function allowedIpsOf(plan: Pick<CreatePlan, 'ip' | 'ip6'>): IpPrefix[] {
  const v4: IpPrefix = { family: 4, address: plan.ip, cidr: 32 };
  return plan.ip6 === null ? [v4] : [v4, { family: 6, address: plan.ip6, cidr: 128 }];
}

const cidrTexts = (prefixes: readonly IpPrefix[]): string[] =>
  prefixes.map((p) => `${p.address}/${p.cidr}`);

function planned(outcome: CreatePlan | PoolExhaustedError): CreatePlan {
  if (outcome instanceof Error) throw outcome;
  return outcome;
}

function createdPeer(plan: CreatePlan): CreatedPeer {
  const { ip, ip6, keys, serverPublicKey, endpoint, clientAllowedIps, client } = plan;
  const presharedKey = plan.presharedKey?.toString('base64') ?? null;
  return {
    presharedKey,
    ip,
    ipv6: ip6,
    privateKey: keys.privateKey,
    publicKey: keys.publicKey,
    serverPublicKey,
    endpoint,
    clientAllowedIps,
    clientConfig: renderClientConfig({
      privateKey: keys.privateKey,
      address: ip,
      address6: ip6,
      serverPublicKey,
      endpoint,
      allowedIps: clientAllowedIps,
      dns: client.dns,
      mtu: client.mtu,
      persistentKeepalive: client.persistentKeepalive,
      presharedKey,
    }),
  };
}

export interface CreatesOptions {
  calls: KernelCalls;
  pipeline: ChangePipeline;
  journal: PeerJournal | null;
  kernelChange<T>(task: () => Promise<T>): Promise<T>;
  log: EventLogger;
  events: PeerChangeSink | undefined;
  random: RandomSource | undefined;
  addresses6: readonly Ipv6Address[];
  /** The daemon-wide defaults of a create's client config (./client-options.ts). */
  clientDefaults: ClientDefaults;
  /** Where a created peer's name goes once it is made (./names.ts). */
  names: PeerNames;
  /** Where a created peer's expiry goes once it is made (./expiry.ts). */
  expiry: ExpiryTracker;
}

export class Creates {
  /** Addresses (both families) of creates between their saved intent and the kernel change. */
  private readonly reserved = new Set<string>();
  /** Kernel adds of created peers so far: a read during which it moved may have missed one. */
  adds = 0;
  /** Creates waiting for the next batch (with a state directory); null when none is forming. */
  private forming: CreateWaiter[] | null = null;

  constructor(private readonly o: CreatesOptions) {}

  /** `options` are checked (./client-options.ts checkCreateOptions) by the caller. */
  create(options: CreateOptions = {}): Promise<CreatedPeer> {
    const journal = this.o.journal;
    if (journal === null) {
      return this.o.kernelChange(async () => {
        const plan = planned((await this.plan([options]))[0]);
        await this.addPeers([plan]);
        this.name(plan);
        this.announce(plan);
        return createdPeer(plan);
      });
    }
    return new Promise<CreatedPeer>((resolve, reject) => {
      const waiter = { options, resolve, reject };
      if (this.forming !== null) {
        this.forming.push(waiter);
        return;
      }
      this.forming = [waiter];
      void this.batch(journal);
    });
  }

  /**
   * One batch of creates with a state directory: planned from one read, intents in one flush,
   * the peers in one WireGuard call, commits in one more flush; answered once committed.
   */
  private async batch(journal: PeerJournal): Promise<void> {
    // Every create that arrives until the plan's turn in the change queue joins this batch.
    let pending: CreateWaiter[] = [];
    let taken = false;
    const take = (): CreateOptions[] => {
      pending = this.forming ?? [];
      this.forming = null;
      taken = true;
      return pending.map((waiter) => waiter.options);
    };
    let plans: CreatePlan[] = [];
    try {
      const outcomes = await this.o.kernelChange(() => this.plan(take()));
      const waiters = pending;
      outcomes.forEach((outcome, i) => {
        if (outcome instanceof Error) waiters[i].reject(outcome);
      });
      pending = waiters.filter((_, i) => !(outcomes[i] instanceof Error));
      plans = outcomes.filter((o): o is CreatePlan => !(o instanceof Error));
      if (plans.length === 0) return;
      await this.commit(journal, plans);
      for (const plan of plans) this.name(plan);
      for (const plan of plans) this.announce(plan);
      plans.forEach((plan, i) => pending[i].resolve(createdPeer(plan)));
    } catch (error) {
      if (!taken) take(); // the plan never ran (the start failed): these creates fail with it
      for (const waiter of pending) waiter.reject(error);
    } finally {
      this.release(plans);
    }
  }

  /** Intent on disk, the kernel change, commit on disk; the kernel change undone if it fails. */
  private async commit(journal: PeerJournal, plans: readonly CreatePlan[]): Promise<void> {
    const { pipeline } = this.o;
    const records = plans.map((p) => ({
      publicKey: p.keys.publicKey,
      allowedIps: cidrTexts(allowedIpsOf(p)),
      // Issue 31: kept so a reboot puts it back (the commit only: an intent never needs it).
      ...(p.presharedKey === null ? {} : { presharedKey: p.presharedKey.toString('base64') }),
      ...(p.name === null ? {} : { name: p.name }),
      ...(p.expiresAt === null ? {} : { expiresAt: p.expiresAt }),
    }));
    await pipeline.durable(journal.intendCreates(records), 'nothing was created');
    try {
      await this.o.kernelChange(() => this.addPeers(plans));
    } catch (error) {
      await journal.abortCreates(plans.map((p) => p.keys.publicKey)).catch(() => undefined);
      throw error;
    } finally {
      this.release(plans);
    }
    try {
      await journal.commitCreates(records);
    } catch (error) {
      // Undo the kernel change: a peer nobody can be told about must not hold an address.
      const { calls } = this.o;
      const keys = plans.map((p) => p.keys.publicKey);
      const undone = await this.o
        .kernelChange(() =>
          calls.call('wireguard', () => calls.kernel.wireguard.removePeers(calls.ifname, keys)),
        )
        .then(
          () => 'the peer was removed again',
          () => 'removing the peer again failed too: the next start removes it',
        );
      throw pipeline.notSaved(error, undone);
    }
  }

  /** Gives the addresses of these creates back to the pool's reservations. */
  private release(plans: readonly CreatePlan[]): void {
    for (const plan of plans) {
      this.reserved.delete(plan.ip);
      if (plan.ip6 !== null) this.reserved.delete(plan.ip6);
    }
  }

  /** Every address no create may take: the device's peers', the journal's, the reserved ones. */
  private taken(devicePrefixes: readonly IpPrefix[]): IpPrefix[] {
    const taken: IpPrefix[] = [...devicePrefixes];
    for (const peer of this.o.journal?.state.peers.values() ?? []) {
      for (const cidr of peer.allowedIps) taken.push(prefixOf(cidr));
    }
    for (const address of this.reserved) {
      taken.push(
        address.includes(':')
          ? { family: 6, address, cidr: 128 }
          : { family: 4, address, cidr: 32 },
      );
    }
    return taken;
  }

  /**
   * Checks the interface, then chooses an address, keys and the endpoint for each create (one
   * per entry of `asked`, its options) from one read of it: a PoolExhaustedError for a create
   * that found no address left. With a state directory the addresses stay reserved until the
   * kernel has the peers.
   */
  private async plan(
    asked: readonly CreateOptions[],
  ): Promise<(CreatePlan | PoolExhaustedError)[]> {
    const { calls } = this.o;
    const ifname = calls.ifname;
    const link = await calls.call('link', () => calls.kernel.link.getLink(ifname));
    if (link.kind !== 'wireguard') throw new InterfaceNotWireGuardError(ifname, link.kind);
    const [addresses, device] = await allInOrder([
      calls.call('link', () => calls.kernel.link.getIpv4Addresses(link.index)),
      calls.readDevice(),
    ]);
    const subnet = addresses[0];
    if (subnet === undefined) throw new InterfaceNotReadyError(ifname, 'address');
    const serverPublicKey = device.publicKey;
    if (serverPublicKey === null) throw new InterfaceNotReadyError(ifname, 'key');
    const prefix6 = this.o.addresses6[0] ?? null;
    const interfaceAllowedIps =
      prefix6 === null
        ? networkCidr(subnet.address, subnet.prefixLength)
        : DUAL_STACK_CLIENT_ALLOWED_IPS;
    const allowedIps = this.taken(device.peers.flatMap((p) => p.allowedIps));
    const plans: (CreatePlan | PoolExhaustedError)[] = [];
    let endpoint: string | null = null;
    for (const options of asked) {
      const ip = allocateAddress({ subnet, serverAddresses: addresses, allowedIps });
      const pool = networkCidr(subnet.address, subnet.prefixLength);
      if (ip === null) {
        plans.push(new PoolExhaustedError(ifname, pool));
        continue;
      }
      let ip6: string | null = null;
      if (prefix6 !== null) {
        // Chosen with the IPv4 address, in the same change: concurrent creates share neither.
        ip6 = allocateAddress6({ prefix: prefix6, serverAddresses: this.o.addresses6, allowedIps });
        if (ip6 === null) {
          plans.push(
            new PoolExhaustedError(ifname, networkCidr6(prefix6.address, prefix6.prefixLength)),
          );
          continue;
        }
      }
      const chosen = { ip, ip6 };
      allowedIps.push(...allowedIpsOf(chosen));
      endpoint ??= formatEndpoint(await calls.serverHost(), device.listenPort);
      if (this.o.journal !== null) {
        this.reserved.add(ip);
        if (ip6 !== null) this.reserved.add(ip6);
      }
      const keys = generateKeyPair(this.o.random);
      const client = clientChoices(options, this.o.clientDefaults);
      const clientAllowedIps = client.allowedIps?.join(', ') ?? interfaceAllowedIps;
      const presharedKey = client.presharedKey
        ? Buffer.from((this.o.random ?? defaultRandom)(KEY_LENGTH))
        : null;
      plans.push({
        ...chosen,
        keys,
        serverPublicKey,
        endpoint,
        clientAllowedIps,
        client,
        presharedKey,
        name: options.name ?? null,
        // Checked by the service (parseExpiresAt): ISO 8601 with an offset, in the future.
        expiresAt: options.expiresAt === undefined ? null : Date.parse(options.expiresAt),
      });
    }
    return plans;
  }

  private async addPeers(plans: readonly CreatePlan[]): Promise<void> {
    const { calls } = this.o;
    // A limit or cap left behind for these addresses (a delete whose clean-up failed) must not
    // fall to the new peers.
    await calls.removeLimitsAndCaps(
      plans.map((p) => (p.ip6 === null ? { address: p.ip } : { address: p.ip, address6: p.ip6 })),
    );
    this.adds++;
    await calls.call('wireguard', () =>
      calls.kernel.wireguard.addPeers(
        calls.ifname,
        plans.map((plan) => ({
          publicKey: plan.keys.publicKey,
          allowedIps: allowedIpsOf(plan),
          ...(plan.presharedKey === null ? {} : { presharedKey: plan.presharedKey }),
        })),
      ),
    );
    // The names the creates carry, into the kernel's names set (issue 31) in one transaction.
    const named = plans.flatMap((plan) =>
      plan.name === null
        ? []
        : [{ peer: { address: plan.ip, publicKey: plan.keys.publicKey }, name: plan.name }],
    );
    if (named.length > 0) {
      await calls.call('names', () => calls.kernel.names.setNames(calls.ifname, named));
    }
    // Their expiries, into the kernel's expiry sets (issue 31).
    for (const plan of plans) {
      if (plan.expiresAt === null) continue;
      const peer = {
        address: plan.ip,
        publicKey: plan.keys.publicKey,
        ...(plan.ip6 === null ? {} : { address6: plan.ip6 }),
      };
      const at = plan.expiresAt;
      await calls.call('expiry', () => calls.kernel.expiry.setExpiry(calls.ifname, peer, at));
    }
  }

  /** A created peer's name and expiry, served from now on. */
  private name(plan: CreatePlan): void {
    if (plan.name !== null) this.o.names.set(plan.keys.publicKey, plan.name);
    this.o.expiry.created(plan.keys.publicKey, plan.expiresAt);
  }

  /** The log line and `peer.created` of a create, once it is durable (or made, without a journal). */
  private announce(plan: CreatePlan): void {
    const { ip, ip6, keys } = plan;
    this.o.log.info(
      {
        event: 'peer_created',
        interface: this.o.calls.ifname,
        publicKey: keys.publicKey,
        ip,
        ...(ip6 === null ? {} : { ipv6: ip6 }),
      },
      'peer created',
    );
    this.o.events?.publish({ type: 'peer.created', publicKey: keys.publicKey, ipAddress: ip });
  }
}
