/**
 * Caps that run out, as the kernel tells it: the quota object of a peer announces its depletion
 * once on NFNLGRP_NFTABLES when the packet that exhausts it passes (nftables/notifications.ts).
 * On 6.1 the notice arrives with the packet that makes the cut; 6.12 queues it until the next
 * nf_tables commit, so src/events/exhaustion.ts also learns exhaustion from the shared read.
 * A notice's nfgen_family is the family of the packet that exhausted the quota, not the
 * table's (net/netfilter/nft_quota.c: nft_obj_notify(..., nft_pf(pkt), ...)): IPv4 or IPv6 for
 * the `inet` table of a dual-stack interface (./dual-stack.ts), so the table's name, the same
 * in both families, tells ours.
 */
import { openNativeTransport, type TransportFactory } from '../../netlink';
import { NfTablesMonitor } from '../nftables/notifications';
import { NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6 } from '../nftables/constants';
import { addressOfObject, quotaTableName } from './naming';
import { parseQuota } from './objects';
import { suspensionTableName } from '../suspension';

/** The families a notice of our table can carry: the packet's (and the table's, inet). */
const NOTICE_FAMILIES: ReadonlySet<number> = new Set([NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_INET]);

export interface CapExhaustedNotice {
  /** The peer's tunnel address (from the object's name). */
  address: string;
  /** The owner's public key from the object's comment; null when it has none. */
  publicKey: string | null;
  quotaBytes: number;
  /** The bytes counted, as the kernel reports them (capped at the quota). */
  usedBytes: number;
  /** From the object's record: the rate the peer is throttled to from now; absent: cut off. */
  throttleBytesPerSecond?: number;
}

export interface CapWatch {
  /** Settles once the subscription is in place (rejects when nf_tables cannot be reached). */
  ready: Promise<void>;
  close(): void;
}

/**
 * Watches the caps of `ifname`'s table (either family): `onExhausted` for each of its quota objects the data
 * path exhausts; `onError` when notifications were lost (the socket's queue overflowed) or one
 * could not be read; `onTablesChanged` for each message of a transaction (any program's, this
 * daemon's too) on the interface's caps table or suspension table.
 */
export function watchCapExhaustion(
  ifname: string,
  onExhausted: (notice: CapExhaustedNotice) => void,
  onError: (error: Error) => void,
  open: TransportFactory = openNativeTransport,
  onTablesChanged: () => void = () => undefined,
): CapWatch {
  const table = quotaTableName(ifname);
  const ours: ReadonlySet<string> = new Set([table, suspensionTableName(ifname)]);
  const monitor = new NfTablesMonitor(open, {
    commit(named) {
      if (ours.has(named)) onTablesChanged();
    },
    object(family, object) {
      if (!NOTICE_FAMILIES.has(family) || object.table !== table) return;
      const quota = parseQuota(object);
      if (quota === null || !quota.depleted) return;
      const address = addressOfObject(quota.name);
      if (address === null) return;
      onExhausted({
        address,
        publicKey: quota.owner,
        quotaBytes: Number(quota.quotaBytes),
        usedBytes: Number(quota.usedBytes),
        ...(quota.throttleBytesPerSecond === null
          ? {}
          : { throttleBytesPerSecond: quota.throttleBytesPerSecond }),
      });
    },
    error: onError,
  });
  return { ready: monitor.ready, close: () => monitor.close() };
}
