/**
 * Caps that run out, as the kernel tells it: the quota object of a peer announces its depletion
 * once on NFNLGRP_NFTABLES when the packet that exhausts it passes (nftables/notifications.ts).
 * On 6.1 the notice arrives with the packet that makes the cut; 6.12 queues it until the next
 * nf_tables commit, so src/events/exhaustion.ts also learns exhaustion from the shared read.
 */
import { openNativeTransport, type TransportFactory } from '../../netlink';
import { NfTablesMonitor } from '../nftables/notifications';
import { QUOTA_FAMILY, addressOfObject, quotaTableName } from './naming';
import { parseQuota } from './objects';

export interface CapExhaustedNotice {
  /** The peer's tunnel address (from the object's name). */
  address: string;
  /** The owner's public key from the object's comment; null when it has none. */
  publicKey: string | null;
  quotaBytes: number;
  /** The bytes counted, as the kernel reports them (capped at the quota). */
  usedBytes: number;
}

export interface CapWatch {
  /** Settles once the subscription is in place (rejects when nf_tables cannot be reached). */
  ready: Promise<void>;
  close(): void;
}

/**
 * Watches the caps of `ifname`'s table: `onExhausted` for each of its quota objects the data
 * path exhausts; `onError` when notifications were lost (the socket's queue overflowed) or one
 * could not be read.
 */
export function watchCapExhaustion(
  ifname: string,
  onExhausted: (notice: CapExhaustedNotice) => void,
  onError: (error: Error) => void,
  open: TransportFactory = openNativeTransport,
): CapWatch {
  const table = quotaTableName(ifname);
  const monitor = new NfTablesMonitor(open, {
    object(family, object) {
      if (family !== QUOTA_FAMILY || object.table !== table) return;
      const quota = parseQuota(object);
      if (quota === null || !quota.depleted) return;
      const address = addressOfObject(quota.name);
      if (address === null) return;
      onExhausted({
        address,
        publicKey: quota.owner,
        quotaBytes: Number(quota.quotaBytes),
        usedBytes: Number(quota.usedBytes),
      });
    },
    error: onError,
  });
  return { ready: monitor.ready, close: () => monitor.close() };
}
