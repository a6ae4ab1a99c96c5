/**
 * nf_tables numbers. Sources, all checked against the installed UAPI headers:
 * - /usr/include/linux/netfilter/nfnetlink.h: struct nfgenmsg, NFNL_SUBSYS_NFTABLES,
 *   NFNL_MSG_BATCH_BEGIN/END, NFNETLINK_V0.
 * - /usr/include/linux/netfilter/nf_tables.h: enum nf_tables_msg_types (NFT_MSG_*), the attribute
 *   enums (NFTA_*), enum nft_registers, enum nft_verdicts, NFT_SET_OBJECT, NFT_OBJECT_QUOTA,
 *   NFT_OBJECT_LIMIT, NFT_QUOTA_F_*, enum nft_limit_type, NFT_LIMIT_F_INV, NFT_META_*, NFT_PAYLOAD_*, NFT_CMP_*, NFT_TABLE_F_*, NFT_USERDATA_MAXLEN, NFT_LOOKUP_F_INV.
 * - /usr/include/linux/netfilter.h: NF_DROP/NF_ACCEPT, enum nf_inet_hooks, NFPROTO_*.
 * - libnftnl's include/udata.h (not a kernel header): the TLV types nft stores in userdata.
 * Every attribute of nf_tables is big-endian (NLA_BE32/NLA_BE64), unlike rtnetlink or genl.
 */
import { NLMSG_MIN_TYPE, struct } from '../../netlink';

// nfnetlink.h
export const NFNL_SUBSYS_NFTABLES = 10;
export const NFNL_MSG_BATCH_BEGIN = NLMSG_MIN_TYPE;
export const NFNL_MSG_BATCH_END = NLMSG_MIN_TYPE + 1;
export const NFNETLINK_V0 = 0;

/** struct nfgenmsg (4 bytes): family, version, then res_id in network byte order. */
export const nfgenmsg = struct('nfgenmsg', { family: 'u8', version: 'u8', resId: 'be16' });

// netfilter.h: enum NFPROTO_* (the nfgenmsg family of nf_tables objects).
export const NFPROTO_UNSPEC = 0;
export const NFPROTO_INET = 1;
export const NFPROTO_IPV4 = 2;
export const NFPROTO_IPV6 = 10;

// netfilter.h: enum nf_inet_hooks.
export const NF_INET_PRE_ROUTING = 0;
export const NF_INET_LOCAL_IN = 1;
export const NF_INET_FORWARD = 2;
export const NF_INET_LOCAL_OUT = 3;
export const NF_INET_POST_ROUTING = 4;

// netfilter.h: verdicts.
export const NF_DROP = 0;
export const NF_ACCEPT = 1;

// nf_tables.h: enum nft_verdicts (share the number space with NF_*).
export const NFT_CONTINUE = -1;
export const NFT_BREAK = -2;

// nf_tables.h: enum nf_tables_msg_types.
export const NFT_MSG_NEWTABLE = 0;
export const NFT_MSG_GETTABLE = 1;
export const NFT_MSG_DELTABLE = 2;
export const NFT_MSG_NEWCHAIN = 3;
export const NFT_MSG_GETCHAIN = 4;
export const NFT_MSG_DELCHAIN = 5;
export const NFT_MSG_NEWRULE = 6;
export const NFT_MSG_GETRULE = 7;
export const NFT_MSG_DELRULE = 8;
export const NFT_MSG_NEWSET = 9;
export const NFT_MSG_GETSET = 10;
export const NFT_MSG_DELSET = 11;
export const NFT_MSG_NEWSETELEM = 12;
export const NFT_MSG_GETSETELEM = 13;
export const NFT_MSG_DELSETELEM = 14;
export const NFT_MSG_NEWGEN = 15;
export const NFT_MSG_GETGEN = 16;
export const NFT_MSG_NEWOBJ = 18;
export const NFT_MSG_GETOBJ = 19;
export const NFT_MSG_DELOBJ = 20;
export const NFT_MSG_GETOBJ_RESET = 21;

/** Names for errors and logs, indexed by NFT_MSG_* number. */
export const NFT_MSG_NAMES: Readonly<Record<number, string>> = {
  [NFT_MSG_NEWTABLE]: 'NFT_MSG_NEWTABLE',
  [NFT_MSG_GETTABLE]: 'NFT_MSG_GETTABLE',
  [NFT_MSG_DELTABLE]: 'NFT_MSG_DELTABLE',
  [NFT_MSG_NEWCHAIN]: 'NFT_MSG_NEWCHAIN',
  [NFT_MSG_GETCHAIN]: 'NFT_MSG_GETCHAIN',
  [NFT_MSG_DELCHAIN]: 'NFT_MSG_DELCHAIN',
  [NFT_MSG_NEWRULE]: 'NFT_MSG_NEWRULE',
  [NFT_MSG_GETRULE]: 'NFT_MSG_GETRULE',
  [NFT_MSG_DELRULE]: 'NFT_MSG_DELRULE',
  [NFT_MSG_NEWSET]: 'NFT_MSG_NEWSET',
  [NFT_MSG_GETSET]: 'NFT_MSG_GETSET',
  [NFT_MSG_DELSET]: 'NFT_MSG_DELSET',
  [NFT_MSG_NEWSETELEM]: 'NFT_MSG_NEWSETELEM',
  [NFT_MSG_GETSETELEM]: 'NFT_MSG_GETSETELEM',
  [NFT_MSG_DELSETELEM]: 'NFT_MSG_DELSETELEM',
  [NFT_MSG_NEWGEN]: 'NFT_MSG_NEWGEN',
  [NFT_MSG_GETGEN]: 'NFT_MSG_GETGEN',
  [NFT_MSG_NEWOBJ]: 'NFT_MSG_NEWOBJ',
  [NFT_MSG_GETOBJ]: 'NFT_MSG_GETOBJ',
  [NFT_MSG_DELOBJ]: 'NFT_MSG_DELOBJ',
  [NFT_MSG_GETOBJ_RESET]: 'NFT_MSG_GETOBJ_RESET',
};

/** The nlmsg_type of an nf_tables message: subsystem in the high byte, NFT_MSG_* in the low. */
export function nftMessageType(message: number): number {
  return (NFNL_SUBSYS_NFTABLES << 8) | message;
}

// enum nft_list_attributes
export const NFTA_LIST_ELEM = 1;

// enum nft_hook_attributes
export const NFTA_HOOK_HOOKNUM = 1;
export const NFTA_HOOK_PRIORITY = 2;

// enum nft_table_flags
export const NFT_TABLE_F_DORMANT = 0x1;
export const NFT_TABLE_F_OWNER = 0x2;

// enum nft_table_attributes
export const NFTA_TABLE_NAME = 1;
export const NFTA_TABLE_FLAGS = 2;
export const NFTA_TABLE_USE = 3;
export const NFTA_TABLE_HANDLE = 4;
export const NFTA_TABLE_USERDATA = 6;

// enum nft_chain_attributes
export const NFTA_CHAIN_TABLE = 1;
export const NFTA_CHAIN_HANDLE = 2;
export const NFTA_CHAIN_NAME = 3;
export const NFTA_CHAIN_HOOK = 4;
export const NFTA_CHAIN_POLICY = 5;
export const NFTA_CHAIN_USE = 6;
export const NFTA_CHAIN_TYPE = 7;
export const NFTA_CHAIN_FLAGS = 10;
export const NFTA_CHAIN_USERDATA = 12;

// enum nft_rule_attributes
export const NFTA_RULE_TABLE = 1;
export const NFTA_RULE_CHAIN = 2;
export const NFTA_RULE_HANDLE = 3;
export const NFTA_RULE_EXPRESSIONS = 4;
export const NFTA_RULE_POSITION = 6;
export const NFTA_RULE_USERDATA = 7;

// enum nft_set_flags
export const NFT_SET_ANONYMOUS = 0x1;
export const NFT_SET_CONSTANT = 0x2;
export const NFT_SET_INTERVAL = 0x4;
export const NFT_SET_MAP = 0x8;
export const NFT_SET_TIMEOUT = 0x10;
export const NFT_SET_EVAL = 0x20;
export const NFT_SET_OBJECT = 0x40;

// enum nft_set_attributes
export const NFTA_SET_TABLE = 1;
export const NFTA_SET_NAME = 2;
export const NFTA_SET_FLAGS = 3;
export const NFTA_SET_KEY_TYPE = 4;
export const NFTA_SET_KEY_LEN = 5;
export const NFTA_SET_DATA_TYPE = 6;
export const NFTA_SET_DATA_LEN = 7;
export const NFTA_SET_POLICY = 8;
export const NFTA_SET_DESC = 9;
export const NFTA_SET_ID = 10;
export const NFTA_SET_USERDATA = 13;
export const NFTA_SET_OBJ_TYPE = 15;
export const NFTA_SET_HANDLE = 16;

// enum nft_set_elem_attributes
export const NFTA_SET_ELEM_KEY = 1;
export const NFTA_SET_ELEM_DATA = 2;
export const NFTA_SET_ELEM_FLAGS = 3;
/** The element's timeout in ms (NLA_U64; nf_msecs_to_jiffies64 turns it into jiffies). */
export const NFTA_SET_ELEM_TIMEOUT = 4;
/** In a dump: the ms left before the element expires (NLA_U64). */
export const NFTA_SET_ELEM_EXPIRATION = 5;
export const NFTA_SET_ELEM_USERDATA = 6;
export const NFTA_SET_ELEM_OBJREF = 9;

// enum nft_set_elem_list_attributes
export const NFTA_SET_ELEM_LIST_TABLE = 1;
export const NFTA_SET_ELEM_LIST_SET = 2;
export const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
export const NFTA_SET_ELEM_LIST_SET_ID = 4;

// enum nft_data_attributes
export const NFTA_DATA_VALUE = 1;
export const NFTA_DATA_VERDICT = 2;

// enum nft_verdict_attributes
export const NFTA_VERDICT_CODE = 1;
export const NFTA_VERDICT_CHAIN = 2;

// enum nft_expr_attributes
export const NFTA_EXPR_NAME = 1;
export const NFTA_EXPR_DATA = 2;

// enum nft_registers: the verdict register and the first 16-byte data register.
export const NFT_REG_VERDICT = 0;
export const NFT_REG_1 = 1;

// enum nft_immediate_attributes
export const NFTA_IMMEDIATE_DREG = 1;
export const NFTA_IMMEDIATE_DATA = 2;

// enum nft_cmp_ops and nft_cmp_attributes
export const NFT_CMP_EQ = 0;
export const NFTA_CMP_SREG = 1;
export const NFTA_CMP_OP = 2;
export const NFTA_CMP_DATA = 3;

// enum nft_payload_bases and nft_payload_attributes
export const NFT_PAYLOAD_LL_HEADER = 0;
export const NFT_PAYLOAD_NETWORK_HEADER = 1;
export const NFT_PAYLOAD_TRANSPORT_HEADER = 2;
export const NFTA_PAYLOAD_DREG = 1;
export const NFTA_PAYLOAD_BASE = 2;
export const NFTA_PAYLOAD_OFFSET = 3;
export const NFTA_PAYLOAD_LEN = 4;

// enum nft_meta_keys (IIFNAME is 6, OIFNAME 7) and nft_meta_attributes
export const NFT_META_IIFNAME = 6;
export const NFT_META_OIFNAME = 7;
export const NFT_META_NFPROTO = 15;
export const NFTA_META_DREG = 1;
export const NFTA_META_KEY = 2;
export const NFTA_META_SREG = 3;

// enum nft_objref_attributes
export const NFTA_OBJREF_IMM_TYPE = 1;
export const NFTA_OBJREF_IMM_NAME = 2;
export const NFTA_OBJREF_SET_SREG = 3;
export const NFTA_OBJREF_SET_NAME = 4;
export const NFTA_OBJREF_SET_ID = 5;
/** enum nft_lookup_attributes: a set lookup (`ip saddr @set`). */
export const NFTA_LOOKUP_SET = 1;
export const NFTA_LOOKUP_SREG = 2;
export const NFTA_LOOKUP_SET_ID = 4;
export const NFTA_LOOKUP_FLAGS = 5;
/** enum nft_lookup_flags: the lookup matches when the key is NOT in the set (`!= @set`). */
export const NFT_LOOKUP_F_INV = 1;

// NFT_OBJECT_* (#defines)
export const NFT_OBJECT_COUNTER = 1;
export const NFT_OBJECT_QUOTA = 2;
export const NFT_OBJECT_LIMIT = 4;

// enum nft_object_attributes
export const NFTA_OBJ_TABLE = 1;
export const NFTA_OBJ_NAME = 2;
export const NFTA_OBJ_TYPE = 3;
export const NFTA_OBJ_DATA = 4;
export const NFTA_OBJ_USE = 5;
export const NFTA_OBJ_HANDLE = 6;
export const NFTA_OBJ_USERDATA = 8;

// enum nft_gen_attributes: NFTA_GEN_ID, the ruleset generation (NLA_U32, big-endian), which
// every committed transaction advances (nf_tables_commit: ++nft_net->base_seq)
export const NFTA_GEN_ID = 1;

// enum nft_quota_flags and nft_quota_attributes
export const NFT_QUOTA_F_INV = 1 << 0;
export const NFT_QUOTA_F_DEPLETED = 1 << 1;
export const NFTA_QUOTA_BYTES = 1;
export const NFTA_QUOTA_FLAGS = 2;
export const NFTA_QUOTA_CONSUMED = 4;

// enum nft_limit_type, enum nft_limit_flags and enum nft_limit_attributes
export const NFT_LIMIT_PKT_BYTES = 1;
export const NFT_LIMIT_F_INV = 1 << 0;
export const NFTA_LIMIT_RATE = 1;
export const NFTA_LIMIT_UNIT = 2;
export const NFTA_LIMIT_BURST = 3;
export const NFTA_LIMIT_TYPE = 4;
export const NFTA_LIMIT_FLAGS = 5;

/** IFNAMSIZ from linux/if.h: meta iifname/oifname load 16 bytes, NUL-padded. */
export const IFNAMSIZ = 16;
/** NFT_USERDATA_MAXLEN: the kernel rejects longer userdata. */
export const NFT_USERDATA_MAXLEN = 256;

/**
 * nft's key data types (src/datatype.h of nftables, enum datatypes), stored in NFTA_SET_KEY_TYPE
 * for display only: the kernel keeps the number and never interprets it.
 */
export const NFT_DATATYPE_IPADDR = 7;
export const NFT_DATATYPE_IP6ADDR = 8;

/** libnftnl udata.h: TLV type 0 of table, chain, rule and object userdata is the comment. */
export const NFTNL_UDATA_COMMENT = 0;
/** libnftnl udata.h enum nftnl_udata_set_types: NFTNL_UDATA_SET_KEYBYTEORDER. */
export const NFTNL_UDATA_SET_KEYBYTEORDER = 0;
/** nftables' enum byteorder: BYTEORDER_BIG_ENDIAN, what nft stores for ipv4_addr keys. */
export const NFT_BYTEORDER_BIG_ENDIAN = 2;
