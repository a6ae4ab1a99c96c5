/**
 * Peer expiry in the kernel (issue 31, src/kernel/expiry): recorded as root on a host with
 * nf_tables, in a network namespace of its own (no WireGuard is needed: the rules match the
 * interface by name). The facility's clock is fixed at T0, so every timeout it sends is
 * `expiresAt - T0` and the replay compares the bytes; while recording, the scenario waits out a
 * 1-second timeout for real. The oracle is `nft -j list table ip|ip6 wg_peerd_expiry_wgex31`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { KernelExpiry, TIMEOUT_MAX_MS, VALID_SET, expiryTableName } from '../../src/kernel/expiry';
import { NfTables, NftBatch } from '../../src/kernel/nftables/client';
import { NFPROTO_IPV4 } from '../../src/kernel/nftables/constants';
import { ipv4ToBytes } from '../../src/kernel/ipv4';
import type { PeerExpiry, PeerRef } from '../../src/kernel/types';
import type { Scenario } from './scenario';

export const EXPIRY_IF = 'wgex31';
export const EXPIRY_TABLE = expiryTableName(EXPIRY_IF);
/** The facility's "now" throughout: 2027-01-15T08:00:00.000Z. */
export const T0 = Date.UTC(2027, 0, 15, 8);
export const ANA: PeerRef = {
  address: '10.81.0.2',
  address6: 'fd81::2',
  publicKey: 'AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=',
};
export const SHOP: PeerRef = {
  address: '10.81.0.3',
  publicKey: 'AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=',
};
export const HOUR = 3_600_000;

export interface ExpiryResult {
  afterSet: PeerExpiry[];
  validBefore: string[];
  validAfterTimeout: string[];
  validAfterRenewal: string[];
  afterClear: PeerExpiry[];
  afterRemove: PeerExpiry[];
  ensured: PeerExpiry[];
  validEnsured: string[];
  /** The kernel's answer to a timeout of TIMEOUT_MAX_MS, and of one more ms. */
  atBound: string;
  beyondBound: string;
}

function tables(sh: (command: string) => string): unknown {
  const one = (family: string): unknown => {
    try {
      return JSON.parse(sh(`nft -j list table ${family} ${EXPIRY_TABLE}`)) as unknown;
    } catch {
      return null;
    }
  };
  return { ip: one('ip'), ip6: one('ip6') };
}

function remove(sh: (command: string) => string): void {
  sh(`nft delete table ip ${EXPIRY_TABLE} 2>/dev/null || true`);
  sh(`nft delete table ip6 ${EXPIRY_TABLE} 2>/dev/null || true`);
}

const byAddress = (list: PeerExpiry[]): PeerExpiry[] =>
  [...list].sort((a, b) => a.address.localeCompare(b.address));
const sorted = (set: Set<string> | null): string[] => [...(set ?? [])].sort();

/** Adds one element with this timeout to `valid` by hand; answers "ok" or the error's code. */
async function tryTimeout(nft: NfTables, timeout: bigint): Promise<string> {
  const batch = new NftBatch(NFPROTO_IPV4).newSetElements(
    {
      table: EXPIRY_TABLE,
      set: VALID_SET,
      elements: [{ key: { value: ipv4ToBytes('10.81.0.99') }, timeout }],
    },
    `timeout ${timeout}`,
  );
  try {
    await nft.commit(batch, 'a timeout at the bound');
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
}

export const peerExpiry: Scenario<ExpiryResult> = {
  name: 'expiry',
  description:
    'peer expiry as two nf_tables sets (issue 31): the first expiry makes the ip and ip6 tables (sets expiring and valid, the drop rules), a second peer with a 1-second timeout leaves `valid` when it ends (waited out while recording), a renewal adds it back (the ended element is no longer there to delete), a clear deletes both elements, removeExpiries the rest, ensure puts back one expiry passed (no element in valid) and one to come, and the kernel takes a timeout of 18,446,744,073,708 ms and refuses one ms more (nf_msecs_to_jiffies64: ERANGE)',
  setup: remove,
  async run(context) {
    const { recording, sh, oracle } = context;
    const expiry = new KernelExpiry(context.open, undefined, () => T0);
    const nft = new NfTables(context.open);
    try {
      await expiry.setExpiry(EXPIRY_IF, ANA, T0 + HOUR);
      await expiry.setExpiry(EXPIRY_IF, SHOP, T0 + 1_000);
      if (recording) oracle.set = tables(sh);
      const afterSet = byAddress(await expiry.listExpiries(EXPIRY_IF));
      const validBefore = sorted(await expiry.listValid(EXPIRY_IF));
      if (recording) await sleep(1_500);
      const validAfterTimeout = sorted(await expiry.listValid(EXPIRY_IF));
      if (recording) oracle.timedOut = tables(sh);
      await expiry.setExpiry(EXPIRY_IF, SHOP, T0 + 2 * HOUR);
      if (recording) oracle.renewed = tables(sh);
      const validAfterRenewal = sorted(await expiry.listValid(EXPIRY_IF));
      await expiry.setExpiry(EXPIRY_IF, ANA, null);
      if (recording) oracle.cleared = tables(sh);
      const afterClear = byAddress(await expiry.listExpiries(EXPIRY_IF));
      await expiry.removeExpiries(EXPIRY_IF, [SHOP, { ...ANA, address: '10.81.0.9' }]);
      const afterRemove = await expiry.listExpiries(EXPIRY_IF);
      await expiry.ensure(
        EXPIRY_IF,
        [ANA, SHOP],
        new Map([
          [ANA.publicKey, T0 - 5_000],
          [SHOP.publicKey, T0 + 60_000],
        ]),
      );
      if (recording) oracle.ensured = tables(sh);
      const ensured = byAddress(await expiry.listExpiries(EXPIRY_IF));
      const validEnsured = sorted(await expiry.listValid(EXPIRY_IF));
      const atBound = await tryTimeout(nft, BigInt(TIMEOUT_MAX_MS));
      const beyondBound = await tryTimeout(nft, BigInt(TIMEOUT_MAX_MS) + 1n);
      return {
        afterSet,
        validBefore,
        validAfterTimeout,
        validAfterRenewal,
        afterClear,
        afterRemove,
        ensured,
        validEnsured,
        atBound,
        beyondBound,
      };
    } finally {
      expiry.close();
      nft.close();
    }
  },
  teardown: remove,
};
