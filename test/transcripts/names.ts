/**
 * Peer names in the kernel (issue 31, src/kernel/names): recorded as root on a host with
 * nf_tables (no WireGuard is needed: the names table has no chain and names no interface that
 * must exist). The oracle is `nft -j list table ip wg_peerd_names_wgnm31` after each step.
 */
import { KernelNames } from '../../src/kernel/names';
import type { NamedPeer, PeerRef, Repair } from '../../src/kernel/types';
import type { Scenario } from './scenario';

export const NAMES_IF = 'wgnm31';
export const NAMES_TABLE = `wg_peerd_names_${NAMES_IF}`;
export const ANA: PeerRef = {
  address: '10.79.0.2',
  publicKey: 'AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=',
};
export const SHOP: PeerRef = {
  address: '10.79.0.3',
  publicKey: 'AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=',
};
/** Another key on the shop's address (as after a delete and a create behind the daemon). */
export const NEWCOMER: PeerRef = {
  address: '10.79.0.3',
  publicKey: 'AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=',
};
/** 54 four-byte characters: 216 bytes, within the 219-byte bound. */
export const LONG_NAME = '😀'.repeat(54);

export interface NamesResult {
  afterSet: NamedPeer[];
  afterRename: NamedPeer[];
  afterClear: NamedPeer[];
  repairs: Repair[];
  ensured: Array<[string, string]>;
  restored: Array<[string, string]>;
  afterRestore: NamedPeer[];
  afterRemove: NamedPeer[];
  manyListed: number;
}

function table(sh: (command: string) => string): unknown {
  try {
    return JSON.parse(sh(`nft -j list table ip ${NAMES_TABLE}`)) as unknown;
  } catch {
    return null;
  }
}

function remove(sh: (command: string) => string): void {
  sh(`nft delete table ip ${NAMES_TABLE} 2>/dev/null || true`);
}

const byAddress = (names: NamedPeer[]): NamedPeer[] =>
  [...names].sort((a, b) => a.address.localeCompare(b.address));
const sorted = (map: Map<string, string>): Array<[string, string]> =>
  [...map.entries()].sort(([a], [b]) => a.localeCompare(b));

export const peerNames: Scenario<NamesResult> = {
  name: 'names',
  description:
    'peer names as nf_tables set element userdata (issue 31): the first name makes the table and set with its element, a rename and a second name in one transaction (the renamed element deleted and added), a clear deletes the element, ensure drops an element whose address a new key holds and, given the names wanted, puts one back, and removeNames deletes the element of an address (none at another address is no error)',
  setup: remove,
  async run(context) {
    const { recording, sh, oracle } = context;
    const names = new KernelNames(context.open);
    try {
      await names.setNames(NAMES_IF, [{ peer: ANA, name: 'laptop of Ana' }]);
      if (recording) oracle.set = table(sh);
      const afterSet = byAddress(await names.listNames(NAMES_IF));
      await names.setNames(NAMES_IF, [
        { peer: ANA, name: LONG_NAME },
        { peer: SHOP, name: 'shop' },
      ]);
      if (recording) oracle.renamed = table(sh);
      const afterRename = byAddress(await names.listNames(NAMES_IF));
      await names.setNames(NAMES_IF, [{ peer: ANA, name: null }]);
      if (recording) oracle.cleared = table(sh);
      const afterClear = byAddress(await names.listNames(NAMES_IF));
      const { names: ensured, repairs } = await names.ensure(NAMES_IF, [ANA, NEWCOMER]);
      if (recording) oracle.ensured = table(sh);
      const { names: restored } = await names.ensure(
        NAMES_IF,
        [ANA, NEWCOMER],
        new Map([[ANA.publicKey, 'laptop of Ana']]),
      );
      if (recording) oracle.restored = table(sh);
      const afterRestore = byAddress(await names.listNames(NAMES_IF));
      // A restore of many names (450, of 200 characters each): in one transaction, in messages
      // whose element list stays below the u16 length of an attribute.
      const many = Array.from({ length: 450 }, (_, i) => ({
        address: `10.79.${1 + Math.floor(i / 250)}.${1 + (i % 250)}`,
        publicKey: Buffer.alloc(32, i % 256)
          .fill(0x80 | (i >> 8), 0, 1)
          .toString('base64'),
      }));
      await names.ensure(
        NAMES_IF,
        [ANA, ...many],
        new Map(many.map((p, i) => [p.publicKey, `${i}`.padStart(200, 'n')])),
      );
      if (recording) oracle.many = table(sh);
      const manyListed = (await names.listNames(NAMES_IF)).length;
      await names.ensure(NAMES_IF, [ANA], new Map([[ANA.publicKey, 'laptop of Ana']]));
      // A delete's clean-up: the name at the address goes; an address without one is no error.
      await names.removeNames(NAMES_IF, [ANA.address, '10.79.0.9']);
      if (recording) oracle.removed = table(sh);
      const afterRemove = await names.listNames(NAMES_IF);
      return {
        afterSet,
        afterRename,
        afterClear,
        repairs,
        ensured: sorted(ensured),
        restored: sorted(restored),
        afterRestore,
        afterRemove,
        manyListed,
      };
    } finally {
      names.close();
    }
  },
  teardown: remove,
};
