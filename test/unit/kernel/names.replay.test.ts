import { expect } from 'chai';
import path from 'node:path';
import { NAME_MAX_BYTES, nameElement, readNameElement } from '../../../src/kernel/names';
import {
  NFNL_SUBSYS_NFTABLES,
  NFT_MSG_DELSETELEM,
  NFT_MSG_NEWSET,
  NFT_MSG_NEWSETELEM,
  NFT_MSG_NEWTABLE,
} from '../../../src/kernel/nftables/constants';
import { parseMessages } from '../../../src/netlink';
import { TranscriptPlayer } from '../../../src/netlink/transcript';
import { FIXTURES, replay } from '../../support/transcripts';
import {
  ANA,
  LONG_NAME,
  NEWCOMER,
  SHOP,
  type NamesResult,
  peerNames,
} from '../../transcripts/names';

// Peer names kept as nf_tables set element userdata (issue 31), replayed from a transcript
// recorded as root on a host with nf_tables (kernel 6.18): every expectation is checked against
// what `nft -j list table ip wg_peerd_names_wgnm31` printed at that moment (nft shows the name
// as the element's comment and skips the owner TLV it does not know).

type NftEntry = Record<string, Record<string, unknown>>;

/** The set `names` of a listing: its key type and elements (address, comment). */
function namesSet(listing: unknown): {
  type: unknown;
  elements: Array<{ address: string; comment?: string }>;
} {
  const all = (listing as { nftables?: NftEntry[] } | null)?.nftables ?? [];
  const set = all.find((e) => e['set']?.['name'] === 'names')?.['set'];
  const elem = (set?.['elem'] ?? []) as Array<string | { elem: { val: string; comment?: string } }>;
  return {
    type: set?.['type'],
    elements: elem.map((e) =>
      typeof e === 'string' ? { address: e } : { address: e.elem.val, comment: e.elem.comment },
    ),
  };
}

/** NETLINK_NETFILTER (linux/netlink.h). */
const NETLINK_NETFILTER = 12;

/** The recorded transactions, each as the nf_tables message types of its changes. */
function recordedBatches(): number[][] {
  const { transcript } = TranscriptPlayer.load(path.join(FIXTURES, `${peerNames.name}.json`));
  const batches: number[][] = [];
  for (const socket of transcript.sockets) {
    if (socket.protocol !== NETLINK_NETFILTER) continue;
    for (const exchange of socket.exchanges) {
      const messages = parseMessages(Buffer.from(exchange.sent, 'hex'));
      if (messages.length < 3) continue;
      batches.push(
        messages.filter((m) => m.type >> 8 === NFNL_SUBSYS_NFTABLES).map((m) => m.type & 0xff),
      );
    }
  }
  return batches;
}

describe('peer names in nf_tables set element userdata, over recorded kernel exchanges (issue 31)', () => {
  let result: NamesResult;
  let oracle: Record<string, unknown>;

  before(async () => {
    ({ result, oracle } = await replay(peerNames));
  });

  it('makes the table and an ipv4_addr set with the first name, the name shown as the element comment', () => {
    expect(namesSet(oracle.set)).to.deep.equal({
      type: 'ipv4_addr',
      elements: [{ address: ANA.address, comment: 'laptop of Ana' }],
    });
    expect(result.afterSet).to.deep.equal([{ ...ANA, name: 'laptop of Ana' }]);
    expect(recordedBatches()[0]).to.deep.equal([
      NFT_MSG_NEWTABLE,
      NFT_MSG_NEWSET,
      NFT_MSG_NEWSETELEM,
    ]);
  });

  it('renames by deleting and adding the element in one transaction, so the kernel holds the new userdata; a name of 54 four-byte characters fits', () => {
    expect(namesSet(oracle.renamed).elements).to.deep.equal([
      { address: ANA.address, comment: LONG_NAME },
      { address: SHOP.address, comment: 'shop' },
    ]);
    expect(result.afterRename).to.deep.equal([
      { ...ANA, name: LONG_NAME },
      { ...SHOP, name: 'shop' },
    ]);
    expect(recordedBatches()[1]).to.deep.equal([NFT_MSG_DELSETELEM, NFT_MSG_NEWSETELEM]);
  });

  it('clears a name by deleting its element', () => {
    expect(namesSet(oracle.cleared).elements).to.deep.equal([
      { address: SHOP.address, comment: 'shop' },
    ]);
    expect(result.afterClear).to.deep.equal([{ ...SHOP, name: 'shop' }]);
    expect(recordedBatches()[2]).to.deep.equal([NFT_MSG_DELSETELEM]);
  });

  it('never gives a name to another key at the same address: ensure removes it and says so', () => {
    expect(namesSet(oracle.ensured).elements).to.deep.equal([]);
    expect(result.repairs).to.deep.equal([
      {
        address: NEWCOMER.address,
        found: `name of ${NEWCOMER.address} owned by a key no live peer on that address has`,
        done: 'removed it',
      },
    ]);
    expect(result.ensured).to.deep.equal([]);
  });

  it('puts back the names a state directory wants, and answers them by public key', () => {
    expect(namesSet(oracle.restored).elements).to.deep.equal([
      { address: ANA.address, comment: 'laptop of Ana' },
    ]);
    expect(result.restored).to.deep.equal([[ANA.publicKey, 'laptop of Ana']]);
    expect(result.afterRestore).to.deep.equal([{ ...ANA, name: 'laptop of Ana' }]);
  });

  it('removes the name at an address with a delete of its element, an address without one being no error', () => {
    expect(namesSet(oracle.removed).elements).to.deep.equal([]);
    expect(result.afterRemove).to.deep.equal([]);
    expect(recordedBatches().at(-1)).to.deep.equal([NFT_MSG_DELSETELEM]);
  });

  it('puts back 450 names of 200 bytes in one transaction of three NEWSETELEM messages (an element list is one attribute, at most 65,535 bytes), and clears the name of a live peer the state directory names not', () => {
    const elements = namesSet(oracle.many).elements;
    // Every element a 200-character name; Ana, live but not among the names wanted, lost hers.
    expect(elements).to.have.length(450);
    expect(elements.every((e) => e.comment?.length === 200)).to.equal(true);
    expect(elements.map((e) => e.address)).to.not.include(ANA.address);
    expect(result.manyListed).to.equal(450);
    const restore = recordedBatches().find((b) => b.includes(NFT_MSG_NEWSETELEM) && b.length > 3);
    expect(restore).to.deep.equal([
      NFT_MSG_DELSETELEM,
      NFT_MSG_NEWSETELEM,
      NFT_MSG_NEWSETELEM,
      NFT_MSG_NEWSETELEM,
    ]);
  });
});

describe('kernel/names: the element of a name', () => {
  it('carries the name as a NUL-terminated comment TLV (type 0) and the owner as 32 raw bytes (TLV 0xf0)', () => {
    const element = nameElement(SHOP, 'shop');
    expect(element.key?.value).to.deep.equal(Buffer.from([10, 79, 0, 3]));
    expect(element.userdata?.toString('hex')).to.equal(
      `0005${Buffer.from('shop\0').toString('hex')}f020${'02'.repeat(32)}`,
    );
    expect(readNameElement(element)).to.deep.equal({ ...SHOP, name: 'shop' });
  });

  it('bounds a name at 219 bytes, the most the 256 bytes of userdata (NFT_USERDATA_MAXLEN) leave beside the owner', () => {
    expect(NAME_MAX_BYTES).to.equal(219);
    expect(nameElement(ANA, 'x'.repeat(219)).userdata).to.have.length(256);
    expect(() => nameElement(ANA, 'x'.repeat(220))).to.throw(/at most 256/);
  });

  it('reads an element it did not write (no owner, or no terminating NUL) as no name', () => {
    const { key } = nameElement(ANA, 'x');
    expect(readNameElement({ key, userdata: Buffer.from('000278' + '00', 'hex') })).to.equal(null);
    expect(readNameElement({ key })).to.equal(null);
  });
});
