/**
 * Peer names kept in the kernel (issue 31), so that a daemon restart without a state directory
 * keeps them. Contract: the set `names` of the table `ip wg_peerd_names_<ifname>` holds one
 * element per named peer, keyed by its IPv4 tunnel address; the element's userdata
 * (NFTA_SET_ELEM_USERDATA, at most NFT_USERDATA_MAXLEN = 256 bytes, linux/netfilter/nf_tables.h)
 * holds two TLVs {u8 type, u8 length, value} (libnftnl's udata layout):
 *
 *   - type 0 (NFTNL_UDATA_SET_ELEM_COMMENT, libnftnl udata.h): the name in UTF-8, NUL-terminated,
 *     which `nft list` prints as the element's `comment "..."`;
 *   - type OWNER_TLV: the owner's public key, 32 raw bytes, so a name never passes to another peer
 *     that later holds the same address (nft skips TLV types it does not know:
 *     set_elem_parse_udata_cb of nftables' src/netlink.c).
 *
 * So a name takes at most 256 - (2 + 32) - (2 + 1) = NAME_MAX_BYTES = 219 bytes of UTF-8. The
 * table has no chain: nothing in the packet path looks at it. A name is set, changed or cleared
 * in one transaction: the old element deleted and the new one added (the kernel keeps an existing
 * element's userdata on a plain add: nft_add_set_elem answers an existing key with EEXIST, or
 * with NLM_F_EXCL unset leaves the element as it was). `ensure` reads the set back, drops what is
 * not owned by the live peer at its address and, given the names wanted (a state directory's),
 * makes the set hold exactly those.
 *
 * Layout, for interface wg0 (what `nft list table ip wg_peerd_names_wg0` prints):
 *
 *   table ip wg_peerd_names_wg0 {
 *     comment "wg-peerd: names of the peers of wg0; managed by wg-peerd, edits are undone"
 *     set names { type ipv4_addr; elements = { 10.8.0.2 comment "laptop of Ana" } }
 *   }
 */
import { SerialQueue, type TransportFactory, openNativeTransport } from '../../netlink';
import { atBoundary, type Translate } from '../errors';
import { bytesToIpv4, ipv4ToBytes } from '../ipv4';
import { NfTables, NftBatch, type SetElementAttributes } from '../nftables/client';
import {
  NFPROTO_IPV4,
  NFTNL_UDATA_COMMENT,
  NFTNL_UDATA_SET_KEYBYTEORDER,
  NFT_BYTEORDER_BIG_ENDIAN,
  NFT_DATATYPE_IPADDR,
  NFT_USERDATA_MAXLEN,
} from '../nftables/constants';
import { commentUserdata, decodeUserdata, encodeUserdata, u32Tlv } from '../nftables/userdata';
import { nfTablesErrors } from '../quota/facility';
import { quotaTableName } from '../quota/naming';
import type { ChangeQueue, NamedPeer, NamesApi, PeerRef, Repair } from '../types';

/** The family of the names table: peers' tunnel addresses are IPv4 (as the caps'). */
export const NAMES_FAMILY = NFPROTO_IPV4;
/** The set of named tunnel addresses. */
export const NAMES_SET = 'names';
/** NFTA_SET_ID of the set when a batch creates it. */
const NAMES_SET_ID = 1;
/**
 * The TLV type of the owner's public key in an element's userdata: above libnftnl's set element
 * types (enum nftnl_udata_set_elem_types: COMMENT 0, FLAGS 1), far from any it may add.
 */
export const OWNER_TLV = 0xf0;
/** A public key's raw length. */
const KEY_BYTES = 32;
/** The most UTF-8 bytes of a name: the userdata bound less the owner TLV and the comment's. */
export const NAME_MAX_BYTES = NFT_USERDATA_MAXLEN - (2 + KEY_BYTES) - (2 + 1);

/**
 * Elements per NEWSETELEM/DELSETELEM message: the element list is one attribute, whose length is
 * a u16 (struct nlattr), so at most 65,535 bytes; an element takes at most ~280 (its key, the
 * 256 bytes of userdata, the nests' headers), and 200 of them stay below.
 */
const ELEMENTS_PER_MESSAGE = 200;

function inMessages<T>(list: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += ELEMENTS_PER_MESSAGE) {
    out.push(list.slice(i, i + ELEMENTS_PER_MESSAGE));
  }
  return out;
}

/** `wg_peerd_names_<ifname>`. */
export function namesTableName(ifname: string): string {
  quotaTableName(ifname); // the same check of the interface name
  return `wg_peerd_names_${ifname}`;
}

/** The element of one named peer. */
export function nameElement(peer: PeerRef, name: string): SetElementAttributes {
  const owner = Buffer.from(peer.publicKey, 'base64');
  const value = Buffer.from(`${name}\0`, 'utf8');
  return {
    key: { value: ipv4ToBytes(peer.address) },
    userdata: encodeUserdata([
      { type: NFTNL_UDATA_COMMENT, value },
      { type: OWNER_TLV, value: owner },
    ]),
  };
}

/** The owner (base64) and name an element carries; null for an element not written so. */
export function readNameElement(element: SetElementAttributes): NamedPeer | null {
  const key = element.key?.value;
  if (key?.length !== 4 || element.userdata === undefined) return null;
  const tlvs = decodeUserdata(element.userdata);
  const owner = tlvs.find((t) => t.type === OWNER_TLV)?.value;
  const comment = tlvs.find((t) => t.type === NFTNL_UDATA_COMMENT)?.value;
  if (owner?.length !== KEY_BYTES || comment === undefined || comment.length < 2) return null;
  if (comment[comment.length - 1] !== 0) return null;
  return {
    address: bytesToIpv4(key),
    publicKey: owner.toString('base64'),
    name: comment.toString('utf8', 0, comment.length - 1),
  };
}

/** A refusal of nf_tables: a bare EINVAL to a GET or EOPNOTSUPP to a batch is nf_tables missing. */
const namesErrors: Translate = nfTablesErrors;

export class KernelNames implements NamesApi {
  private readonly nft: NfTables;
  private readonly changes: ChangeQueue;

  constructor(open: TransportFactory = openNativeTransport, changes?: ChangeQueue) {
    this.nft = new NfTables(open);
    this.changes = changes ?? new SerialQueue();
  }

  listNames(ifname: string): Promise<NamedPeer[]> {
    return atBoundary(() => this.read(ifname), namesErrors);
  }

  private async read(ifname: string): Promise<NamedPeer[]> {
    const listed = await this.nft.listSetElements(NAMES_FAMILY, namesTableName(ifname), NAMES_SET);
    const out: NamedPeer[] = [];
    for (const element of listed) {
      const named = readNameElement(element);
      if (named !== null) out.push(named);
    }
    return out;
  }

  setNames(
    ifname: string,
    names: ReadonlyArray<{ peer: PeerRef; name: string | null }>,
  ): Promise<void> {
    return this.changes.run(() =>
      atBoundary(async () => {
        if (names.length === 0) return;
        const table = namesTableName(ifname);
        const batch = new NftBatch(NAMES_FAMILY);
        const made = names.some((n) => n.name !== null) && (await this.prepare(batch, ifname));
        const present = made
          ? new Map<string, NamedPeer | null>()
          : await this.elementsAt(
              ifname,
              names.map((n) => n.peer.address),
            );
        this.plan(batch, table, present, names, made);
        await this.nft.commit(batch, `name ${names.map((n) => n.peer.address).join(', ')}`);
      }, namesErrors),
    );
  }

  removeNames(ifname: string, addresses: readonly string[]): Promise<void> {
    return this.changes.run(() =>
      atBoundary(async () => {
        const present = [...(await this.elementsAt(ifname, addresses)).keys()];
        if (present.length === 0) return;
        const batch = new NftBatch(NAMES_FAMILY);
        const table = namesTableName(ifname);
        for (const part of inMessages(present)) {
          batch.deleteSetElements(
            {
              table,
              set: NAMES_SET,
              elements: part.map((a) => ({ key: { value: ipv4ToBytes(a) } })),
            },
            `${part.length} name(s)`,
          );
        }
        await this.nft.commit(batch, `remove the names of ${present.join(', ')}`);
      }, namesErrors),
    );
  }

  /**
   * The elements at these addresses, one GET each (`nft get element`; none when the table, set
   * or element is missing): a change reads only what it touches, never the whole set.
   */
  private async elementsAt(
    ifname: string,
    addresses: readonly string[],
  ): Promise<Map<string, NamedPeer | null>> {
    const table = namesTableName(ifname);
    const out = new Map<string, NamedPeer | null>();
    for (const address of new Set(addresses)) {
      const key = ipv4ToBytes(address);
      const element = await this.nft.getSetElement(NAMES_FAMILY, table, NAMES_SET, key, address);
      if (element !== null) out.set(address, readNameElement(element));
    }
    return out;
  }

  /** Every element now, by address (element keys the daemon did not write count as unowned). */
  private async byAddress(ifname: string): Promise<Map<string, NamedPeer | null>> {
    const listed = await this.nft.listSetElements(NAMES_FAMILY, namesTableName(ifname), NAMES_SET);
    const out = new Map<string, NamedPeer | null>();
    for (const element of listed) {
      const key = element.key?.value;
      if (key?.length === 4) out.set(bytesToIpv4(key), readNameElement(element));
    }
    return out;
  }

  /** Queues the table and set when the set is missing; true when it did (the set is empty then). */
  private async prepare(batch: NftBatch, ifname: string): Promise<boolean> {
    const table = namesTableName(ifname);
    const set = await this.nft.getSet(NAMES_FAMILY, table, NAMES_SET);
    if (set !== null && set.keyLen === 4) return false;
    if (await this.nft.getTable(NAMES_FAMILY, table)) batch.deleteTable(table);
    batch.newTable({
      name: table,
      flags: 0,
      userdata: commentUserdata(
        `wg-peerd: names of the peers of ${ifname}; managed by wg-peerd, edits are undone`,
      ),
    });
    batch.newSet({
      table,
      name: NAMES_SET,
      keyType: NFT_DATATYPE_IPADDR,
      keyLen: 4,
      id: NAMES_SET_ID,
      // What nft stores for an ipv4_addr key, so that `nft list` prints addresses.
      userdata: encodeUserdata([u32Tlv(NFTNL_UDATA_SET_KEYBYTEORDER, NFT_BYTEORDER_BIG_ENDIAN)]),
    });
    return true;
  }

  /**
   * Queues, for each peer, the deletion of the element at its address when it is not already
   * the one wanted, and the new element (none for a null name).
   */
  private plan(
    batch: NftBatch,
    table: string,
    present: ReadonlyMap<string, NamedPeer | null>,
    names: ReadonlyArray<{ peer: PeerRef; name: string | null }>,
    made: boolean,
  ): void {
    const removed: SetElementAttributes[] = [];
    const added: SetElementAttributes[] = [];
    for (const { peer, name } of names) {
      const now = present.get(peer.address);
      if (
        now !== undefined &&
        now !== null &&
        now.publicKey === peer.publicKey &&
        now.name === name
      ) {
        continue;
      }
      if (now !== undefined) removed.push({ key: { value: ipv4ToBytes(peer.address) } });
      if (name !== null) added.push(nameElement(peer, name));
    }
    for (const part of inMessages(removed)) {
      batch.deleteSetElements({ table, set: NAMES_SET, elements: part }, `${part.length} name(s)`);
    }
    for (const part of inMessages(added)) {
      batch.newSetElements(
        { table, set: NAMES_SET, ...(made ? { setId: NAMES_SET_ID } : {}), elements: part },
        `${part.length} name(s)`,
      );
    }
  }

  ensure(
    ifname: string,
    live: readonly PeerRef[],
    wanted?: ReadonlyMap<string, string>,
  ): Promise<{ names: Map<string, string>; repairs: Repair[] }> {
    return this.changes.run(() =>
      atBoundary(async () => {
        const table = namesTableName(ifname);
        const repairs: Repair[] = [];
        const present = await this.byAddress(ifname);
        const byAddress = new Map(live.map((peer) => [peer.address, peer]));
        const names = new Map<string, string>();
        // What stays: elements owned by the live peer at their address.
        const kept = new Map<string, NamedPeer>();
        const stale: string[] = [];
        for (const [address, named] of present) {
          if (named !== null && byAddress.get(address)?.publicKey === named.publicKey) {
            kept.set(address, named);
            if (wanted === undefined) names.set(named.publicKey, named.name);
            continue;
          }
          stale.push(address);
          repairs.push({
            address,
            found: `name of ${address} ${named === null ? 'not written by wg-peerd' : 'owned by a key no live peer on that address has'}`,
            done: 'removed it',
          });
        }
        // With the names wanted (a state directory's): each live peer's name as it says.
        const changes: Array<{ peer: PeerRef; name: string | null }> = [];
        for (const peer of wanted === undefined ? [] : live) {
          const name = wanted?.get(peer.publicKey) ?? null;
          if (name !== null) names.set(peer.publicKey, name);
          if ((kept.get(peer.address)?.name ?? null) !== name) changes.push({ peer, name });
        }
        const batch = new NftBatch(NAMES_FAMILY);
        const made = changes.some((c) => c.name !== null)
          ? await this.prepare(batch, ifname)
          : false;
        const staleElements = stale.map((a) => ({ key: { value: ipv4ToBytes(a) } }));
        for (const part of inMessages(staleElements)) {
          batch.deleteSetElements(
            { table, set: NAMES_SET, elements: part },
            `${part.length} name(s)`,
          );
        }
        this.plan(batch, table, kept, changes, made);
        await this.nft.commit(batch, `repair names of ${ifname}`);
        return { names, repairs };
      }, namesErrors),
    );
  }

  close(): void {
    this.nft.close();
  }
}
