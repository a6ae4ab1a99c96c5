/**
 * Quota objects and their map elements: written and read back side by side (owner comment,
 * bytes, consumed, depletion).
 */
import { decodeAttributes, encodeAttributes } from '../../netlink';
import { type ObjectAttributes, type SetElementAttributes, NftBatch } from '../nftables/client';
import { NFT_OBJECT_QUOTA, NFT_QUOTA_F_DEPLETED, NFT_QUOTA_F_INV } from '../nftables/constants';
import { quotaAttributes } from '../nftables/schema';
import { bytesToIpv4, ipv4ToBytes } from '../ipv4';
import type { CapPlan, PeerRef } from '../types';
import { type CapUserdata, decodeCapUserdata, encodeCapUserdata } from './cap-userdata';
import { CAPS_MAP, quotaObjectName } from './naming';

/** A quota object as read back from the kernel. */
export interface QuotaState {
  name: string;
  quotaBytes: bigint;
  /** Consumed as the kernel reports it: capped at quotaBytes. */
  usedBytes: bigint;
  depleted: boolean;
  /** The public key from the userdata comment, or null. */
  owner: string | null;
  /** The billing period from the userdata, or null. */
  plan: CapPlan | null;
  /** From the userdata: the rate over the cap (afterCap "throttle"), null: blocked. */
  throttleBytesPerSecond: number | null;
  /** The whole userdata as read (what a rewrite keeps). */
  userdata: CapUserdata;
}

export function parseQuota(object: ObjectAttributes): QuotaState | null {
  if (object.type !== NFT_OBJECT_QUOTA || !object.name || !object.data) return null;
  const data = decodeAttributes(quotaAttributes, object.data, `quota ${object.name}`);
  const quotaBytes = data.bytes ?? 0n;
  const usedBytes = data.consumed ?? 0n;
  const userdata = decodeCapUserdata(object.userdata);
  return {
    name: object.name,
    quotaBytes,
    usedBytes,
    depleted: ((data.flags ?? 0) & NFT_QUOTA_F_DEPLETED) !== 0 || usedBytes >= quotaBytes,
    owner: userdata.owner,
    plan: userdata.plan,
    throttleBytesPerSecond: userdata.throttleBytesPerSecond,
    userdata,
  };
}

export function checkQuotaBytes(quotaBytes: number): bigint {
  if (!Number.isSafeInteger(quotaBytes) || quotaBytes < 0) {
    throw new RangeError(`quotaBytes must be an integer from 0 to 2^53-1, got ${quotaBytes}`);
  }
  return BigInt(quotaBytes);
}

/**
 * A new quota object for the peer, `over quotaBytes` with `consumed` already used (capped at the
 * quota, as the kernel requires), owned by the peer's key, with its userdata fields
 * (./cap-userdata.ts: billing period, throttle rate, others kept); and, for a cap that blocks,
 * its element in the caps map (a throttled cap's elements are planThrottle's).
 */
export function writeNewQuota(
  batch: NftBatch,
  table: string,
  peer: PeerRef,
  quotaBytes: bigint,
  consumed: bigint,
  fields: Partial<Omit<CapUserdata, 'owner'>> = {},
): void {
  const name = quotaObjectName(peer.address);
  batch.newObject(
    {
      table,
      name,
      type: NFT_OBJECT_QUOTA,
      userdata: encodeCapUserdata({
        owner: peer.publicKey,
        plan: fields.plan ?? null,
        throttleBytesPerSecond: fields.throttleBytesPerSecond ?? null,
        others: fields.others ?? [],
      }),
      data: encodeAttributes(quotaAttributes, {
        bytes: quotaBytes,
        consumed: consumed > quotaBytes ? quotaBytes : consumed,
        flags: NFT_QUOTA_F_INV,
      }),
    },
    'quota',
  );
  if ((fields.throttleBytesPerSecond ?? null) === null)
    writeElement(batch, table, peer.address, name);
}

/**
 * NEWOBJ on the existing quota `name`: a new cap in place, keeping what it consumed and its
 * userdata (nft_quota_obj_update sets bytes and flags only; Linux 5.4+).
 */
export function writeQuotaUpdate(
  batch: NftBatch,
  table: string,
  name: string,
  quotaBytes: bigint,
): void {
  batch.newObject(
    {
      table,
      name,
      type: NFT_OBJECT_QUOTA,
      data: encodeAttributes(quotaAttributes, { bytes: quotaBytes, flags: NFT_QUOTA_F_INV }),
    },
    'quota',
  );
}

/** The map element address → quota object. */
export function writeElement(batch: NftBatch, table: string, address: string, name: string): void {
  batch.newSetElements(
    { table, set: CAPS_MAP, elements: [{ key: { value: ipv4ToBytes(address) }, objref: name }] },
    address,
  );
}

/** Where the map leads each address: address → the name of the object its element refers to. */
export function elementTargets(
  elements: readonly SetElementAttributes[],
): Map<string, string | undefined> {
  const targets = new Map<string, string | undefined>();
  for (const element of elements) {
    const key = element.key?.value;
    if (key?.length === 4) targets.set(bytesToIpv4(key), element.objref);
  }
  return targets;
}
