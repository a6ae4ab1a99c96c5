/**
 * nf_tables tables, chains, rules, sets, set elements and stateful objects as attribute tables.
 * Every message carries struct nfgenmsg (family, version, res_id) before these attributes.
 * Numbers: /usr/include/linux/netfilter/nf_tables.h (see constants.ts); all integers big-endian.
 * Attributes are listed in the order nft (libnftnl) writes them, so that a message of ours can be
 * compared byte for byte with the one nft sends for the same command.
 */
import { type Codec, be32, be64, bytes, list, nested, schema, string } from '../../netlink';
import {
  NFTA_CHAIN_FLAGS,
  NFTA_GEN_ID,
  NFTA_CHAIN_HANDLE,
  NFTA_CHAIN_HOOK,
  NFTA_CHAIN_NAME,
  NFTA_CHAIN_POLICY,
  NFTA_CHAIN_TABLE,
  NFTA_CHAIN_TYPE,
  NFTA_CHAIN_USE,
  NFTA_CHAIN_USERDATA,
  NFTA_HOOK_HOOKNUM,
  NFTA_HOOK_PRIORITY,
  NFTA_LIST_ELEM,
  NFTA_OBJ_DATA,
  NFTA_OBJ_HANDLE,
  NFTA_OBJ_NAME,
  NFTA_OBJ_TABLE,
  NFTA_OBJ_TYPE,
  NFTA_OBJ_USE,
  NFTA_OBJ_USERDATA,
  NFTA_LIMIT_BURST,
  NFTA_LIMIT_FLAGS,
  NFTA_LIMIT_RATE,
  NFTA_LIMIT_TYPE,
  NFTA_LIMIT_UNIT,
  NFTA_QUOTA_BYTES,
  NFTA_QUOTA_CONSUMED,
  NFTA_QUOTA_FLAGS,
  NFTA_RULE_CHAIN,
  NFTA_RULE_EXPRESSIONS,
  NFTA_RULE_HANDLE,
  NFTA_RULE_POSITION,
  NFTA_RULE_TABLE,
  NFTA_RULE_USERDATA,
  NFTA_SET_DATA_LEN,
  NFTA_SET_DATA_TYPE,
  NFTA_SET_ELEM_DATA,
  NFTA_SET_ELEM_EXPIRATION,
  NFTA_SET_ELEM_FLAGS,
  NFTA_SET_ELEM_TIMEOUT,
  NFTA_SET_ELEM_KEY,
  NFTA_SET_ELEM_LIST_ELEMENTS,
  NFTA_SET_ELEM_LIST_SET,
  NFTA_SET_ELEM_LIST_SET_ID,
  NFTA_SET_ELEM_LIST_TABLE,
  NFTA_SET_ELEM_OBJREF,
  NFTA_SET_ELEM_USERDATA,
  NFTA_SET_FLAGS,
  NFTA_SET_HANDLE,
  NFTA_SET_ID,
  NFTA_SET_KEY_LEN,
  NFTA_SET_KEY_TYPE,
  NFTA_SET_NAME,
  NFTA_SET_OBJ_TYPE,
  NFTA_SET_TABLE,
  NFTA_SET_USERDATA,
  NFTA_TABLE_FLAGS,
  NFTA_TABLE_HANDLE,
  NFTA_TABLE_NAME,
  NFTA_TABLE_USE,
  NFTA_TABLE_USERDATA,
} from './constants';
import { dataAttributes, expressionCodec, sbe32 } from './expressions';

/** A nested attribute kept as raw bytes (its meaning depends on a sibling, e.g. NFTA_OBJ_TYPE). */
export const rawNested: Codec<Buffer> = {
  nested: true,
  write(writer, value) {
    writer.bytes(value);
  },
  decode(data) {
    return Buffer.from(data);
  },
};

/** enum nft_table_attributes */
export const tableAttributes = schema({
  name: { type: NFTA_TABLE_NAME, codec: string },
  flags: { type: NFTA_TABLE_FLAGS, codec: be32 },
  use: { type: NFTA_TABLE_USE, codec: be32 },
  handle: { type: NFTA_TABLE_HANDLE, codec: be64 },
  userdata: { type: NFTA_TABLE_USERDATA, codec: bytes },
});

/** enum nft_hook_attributes: a base chain's hook; the priority is signed. */
export const hookAttributes = schema({
  hooknum: { type: NFTA_HOOK_HOOKNUM, codec: be32 },
  priority: { type: NFTA_HOOK_PRIORITY, codec: sbe32 },
});

/** enum nft_chain_attributes */
export const chainAttributes = schema({
  table: { type: NFTA_CHAIN_TABLE, codec: string },
  handle: { type: NFTA_CHAIN_HANDLE, codec: be64 },
  name: { type: NFTA_CHAIN_NAME, codec: string },
  type: { type: NFTA_CHAIN_TYPE, codec: string },
  policy: { type: NFTA_CHAIN_POLICY, codec: be32 },
  hook: { type: NFTA_CHAIN_HOOK, codec: nested(hookAttributes) },
  use: { type: NFTA_CHAIN_USE, codec: be32 },
  flags: { type: NFTA_CHAIN_FLAGS, codec: be32 },
  userdata: { type: NFTA_CHAIN_USERDATA, codec: bytes },
});

/** enum nft_rule_attributes */
export const ruleAttributes = schema({
  table: { type: NFTA_RULE_TABLE, codec: string },
  chain: { type: NFTA_RULE_CHAIN, codec: string },
  handle: { type: NFTA_RULE_HANDLE, codec: be64 },
  position: { type: NFTA_RULE_POSITION, codec: be64 },
  expressions: { type: NFTA_RULE_EXPRESSIONS, codec: list(expressionCodec, NFTA_LIST_ELEM) },
  userdata: { type: NFTA_RULE_USERDATA, codec: bytes },
});

/** enum nft_set_attributes */
export const setAttributes = schema({
  table: { type: NFTA_SET_TABLE, codec: string },
  name: { type: NFTA_SET_NAME, codec: string },
  handle: { type: NFTA_SET_HANDLE, codec: be64 },
  flags: { type: NFTA_SET_FLAGS, codec: be32 },
  keyType: { type: NFTA_SET_KEY_TYPE, codec: be32 },
  keyLen: { type: NFTA_SET_KEY_LEN, codec: be32 },
  dataType: { type: NFTA_SET_DATA_TYPE, codec: be32 },
  dataLen: { type: NFTA_SET_DATA_LEN, codec: be32 },
  objType: { type: NFTA_SET_OBJ_TYPE, codec: be32 },
  id: { type: NFTA_SET_ID, codec: be32 },
  userdata: { type: NFTA_SET_USERDATA, codec: bytes },
});

/** enum nft_set_elem_attributes */
export const setElementAttributes = schema({
  key: { type: NFTA_SET_ELEM_KEY, codec: nested(dataAttributes) },
  data: { type: NFTA_SET_ELEM_DATA, codec: nested(dataAttributes) },
  flags: { type: NFTA_SET_ELEM_FLAGS, codec: be32 },
  /** ms; only in a set with NFT_SET_TIMEOUT. */
  timeout: { type: NFTA_SET_ELEM_TIMEOUT, codec: be64 },
  /** ms left, as the kernel dumps an element with a timeout. */
  expiration: { type: NFTA_SET_ELEM_EXPIRATION, codec: be64 },
  objref: { type: NFTA_SET_ELEM_OBJREF, codec: string },
  userdata: { type: NFTA_SET_ELEM_USERDATA, codec: bytes },
});

/** enum nft_set_elem_list_attributes: the body of NEWSETELEM / DELSETELEM / GETSETELEM. */
export const setElementListAttributes = schema({
  table: { type: NFTA_SET_ELEM_LIST_TABLE, codec: string },
  set: { type: NFTA_SET_ELEM_LIST_SET, codec: string },
  setId: { type: NFTA_SET_ELEM_LIST_SET_ID, codec: be32 },
  elements: {
    type: NFTA_SET_ELEM_LIST_ELEMENTS,
    codec: list(nested(setElementAttributes), NFTA_LIST_ELEM),
  },
});

/** enum nft_object_attributes; `data` is decoded by the table of its NFTA_OBJ_TYPE. */
export const objectAttributes = schema({
  table: { type: NFTA_OBJ_TABLE, codec: string },
  name: { type: NFTA_OBJ_NAME, codec: string },
  type: { type: NFTA_OBJ_TYPE, codec: be32 },
  userdata: { type: NFTA_OBJ_USERDATA, codec: bytes },
  data: { type: NFTA_OBJ_DATA, codec: rawNested },
  use: { type: NFTA_OBJ_USE, codec: be32 },
  handle: { type: NFTA_OBJ_HANDLE, codec: be64 },
});

/**
 * A nested attribute decoded as a view into the received datagram, not a copy: only for data
 * decoded further at once and never kept (the listing of thousands of objects).
 */
export const nestedView: Codec<Buffer> = view(true);

/** A plain attribute's payload as a view into the received buffer, not a copy. */
export const bytesView: Codec<Buffer> = view(false);

function view(nested: boolean): Codec<Buffer> {
  return {
    nested,
    write(writer, value) {
      writer.bytes(value);
    },
    decode(data) {
      return data;
    },
  };
}

/**
 * What a listing of objects needs: table, name, type, data and userdata (views), nothing
 * copied.
 */
export const quotaListing = schema({
  table: { type: NFTA_OBJ_TABLE, codec: string },
  name: { type: NFTA_OBJ_NAME, codec: string },
  type: { type: NFTA_OBJ_TYPE, codec: be32 },
  data: { type: NFTA_OBJ_DATA, codec: nestedView },
  userdata: { type: NFTA_OBJ_USERDATA, codec: bytesView },
});

/** enum nft_gen_attributes: NFT_MSG_NEWGEN, the answer to NFT_MSG_GETGEN (PID and name left out). */
export const generationAttributes = schema({
  id: { type: NFTA_GEN_ID, codec: be32 },
});

/** enum nft_quota_attributes: the data of an NFT_OBJECT_QUOTA object. */
export const quotaAttributes = schema({
  bytes: { type: NFTA_QUOTA_BYTES, codec: be64 },
  consumed: { type: NFTA_QUOTA_CONSUMED, codec: be64 },
  flags: { type: NFTA_QUOTA_FLAGS, codec: be32 },
});

/**
 * enum nft_limit_attributes: the data of an NFT_OBJECT_LIMIT object, in the order libnftnl
 * writes them (obj/limit.c). RATE per UNIT seconds; for NFT_LIMIT_PKT_BYTES in bytes.
 */
export const limitAttributes = schema({
  rate: { type: NFTA_LIMIT_RATE, codec: be64 },
  unit: { type: NFTA_LIMIT_UNIT, codec: be64 },
  burst: { type: NFTA_LIMIT_BURST, codec: be32 },
  type: { type: NFTA_LIMIT_TYPE, codec: be32 },
  flags: { type: NFTA_LIMIT_FLAGS, codec: be32 },
});
