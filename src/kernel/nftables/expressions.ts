/**
 * nf_tables rule expressions as typed attribute tables, one table per expression kind (the shape
 * of google/nftables' expr package: typed expressions, one encoder). An expression travels as
 * NFTA_LIST_ELEM { NFTA_EXPR_NAME "meta", NFTA_EXPR_DATA { the kind's attributes } }; the same
 * tables decode the rules the kernel dumps, so a rule read back can be compared with the rule we
 * want. Only the kinds the daemon uses are known; others decode as `unknown` with their raw data.
 * Numbers: /usr/include/linux/netfilter/nf_tables.h (see constants.ts).
 */
import {
  type Attributes,
  type Codec,
  NLA_F_NESTED,
  be32,
  bytes,
  decodeAttributes,
  fixedWidth,
  nested,
  schema,
  string,
  writeAttributes,
} from '../../netlink';
import {
  NFTA_CMP_DATA,
  NFTA_CMP_OP,
  NFTA_CMP_SREG,
  NFTA_DATA_VALUE,
  NFTA_DATA_VERDICT,
  NFTA_EXPR_DATA,
  NFTA_EXPR_NAME,
  NFTA_IMMEDIATE_DATA,
  NFTA_IMMEDIATE_DREG,
  NFTA_LOOKUP_FLAGS,
  NFTA_LOOKUP_SET,
  NFTA_LOOKUP_SET_ID,
  NFTA_LOOKUP_SREG,
  NFTA_META_DREG,
  NFTA_META_KEY,
  NFTA_META_SREG,
  NFTA_OBJREF_IMM_NAME,
  NFTA_OBJREF_IMM_TYPE,
  NFTA_OBJREF_SET_ID,
  NFTA_OBJREF_SET_NAME,
  NFTA_OBJREF_SET_SREG,
  NFTA_PAYLOAD_BASE,
  NFTA_PAYLOAD_DREG,
  NFTA_PAYLOAD_LEN,
  NFTA_PAYLOAD_OFFSET,
  NFTA_VERDICT_CHAIN,
  NFTA_VERDICT_CODE,
  NFT_CMP_EQ,
  NFT_LOOKUP_F_INV,
  NFT_REG_VERDICT,
} from './constants';

/** A signed 32-bit big-endian value: verdict codes are negative for NFT_BREAK and friends. */
export const sbe32 = fixedWidth<number>(
  4,
  (b, o, v) => b.writeInt32BE(v, o),
  (b, o) => b.readInt32BE(o),
);

/**
 * A string written without its NUL, as libnftnl writes NFTA_OBJREF_SET_NAME (mnl_attr_put_str).
 * The kernel's policy for it is NLA_STRING, which takes either form, and dumps it with a NUL;
 * writing it as nft does keeps our rules byte-identical to nft's.
 */
const bareString: Codec<string> = {
  nested: false,
  write(writer, value) {
    const at = writer.reserve(Buffer.byteLength(value, 'utf8')); // may replace writer.buffer
    writer.buffer.write(value, at, 'utf8');
  },
  decode: string.decode,
};

/** enum nft_verdict_attributes */
export const verdictAttributes = schema({
  code: { type: NFTA_VERDICT_CODE, codec: sbe32 },
  chain: { type: NFTA_VERDICT_CHAIN, codec: string },
});

/** enum nft_data_attributes: a value (set keys, cmp operands) or a verdict (immediate). */
export const dataAttributes = schema({
  value: { type: NFTA_DATA_VALUE, codec: bytes },
  verdict: { type: NFTA_DATA_VERDICT, codec: nested(verdictAttributes) },
});

/** The attribute table of each expression kind, keyed by its NFTA_EXPR_NAME. */
export const expressionTables = {
  /** enum nft_meta_attributes: load a packet meta item (iifname, oifname, ...) into dreg. */
  meta: schema({
    key: { type: NFTA_META_KEY, codec: be32 },
    dreg: { type: NFTA_META_DREG, codec: be32 },
    sreg: { type: NFTA_META_SREG, codec: be32 },
  }),
  /** enum nft_cmp_attributes: compare sreg with data; a mismatch ends the rule (NFT_BREAK). */
  cmp: schema({
    sreg: { type: NFTA_CMP_SREG, codec: be32 },
    op: { type: NFTA_CMP_OP, codec: be32 },
    data: { type: NFTA_CMP_DATA, codec: nested(dataAttributes) },
  }),
  /** enum nft_payload_attributes: load len bytes at offset from a header base into dreg. */
  payload: schema({
    dreg: { type: NFTA_PAYLOAD_DREG, codec: be32 },
    base: { type: NFTA_PAYLOAD_BASE, codec: be32 },
    offset: { type: NFTA_PAYLOAD_OFFSET, codec: be32 },
    len: { type: NFTA_PAYLOAD_LEN, codec: be32 },
  }),
  /**
   * enum nft_objref_attributes: run a stateful object, named immediately or looked up in a map
   * (a set with NFT_SET_OBJECT) by the key in sreg. A key missing from the map ends the rule.
   */
  objref: schema({
    immType: { type: NFTA_OBJREF_IMM_TYPE, codec: be32 },
    immName: { type: NFTA_OBJREF_IMM_NAME, codec: string },
    setSreg: { type: NFTA_OBJREF_SET_SREG, codec: be32 },
    setName: { type: NFTA_OBJREF_SET_NAME, codec: bareString },
    setId: { type: NFTA_OBJREF_SET_ID, codec: be32 },
  }),
  /**
   * enum nft_lookup_attributes: look the key in sreg up in a plain set; a key missing from it
   * ends the rule (NFT_BREAK).
   */
  lookup: schema({
    set: { type: NFTA_LOOKUP_SET, codec: string },
    sreg: { type: NFTA_LOOKUP_SREG, codec: be32 },
    setId: { type: NFTA_LOOKUP_SET_ID, codec: be32 },
    /** NFT_LOOKUP_F_INV: a key IN the set ends the rule instead. */
    flags: { type: NFTA_LOOKUP_FLAGS, codec: be32 },
  }),
  /** enum nft_immediate_attributes: load data (here a verdict) into dreg. */
  immediate: schema({
    dreg: { type: NFTA_IMMEDIATE_DREG, codec: be32 },
    data: { type: NFTA_IMMEDIATE_DATA, codec: nested(dataAttributes) },
  }),
};

type ExpressionTables = typeof expressionTables;
export type ExpressionName = keyof ExpressionTables;

export type KnownExpression = {
  [K in ExpressionName]: { name: K } & Attributes<ExpressionTables[K]>;
}[ExpressionName];

/** An expression of a kind this module has no table for (found in a rule someone else wrote). */
export interface UnknownExpression {
  name: 'unknown';
  kind: string;
  data: Buffer;
}

export type Expression = KnownExpression | UnknownExpression;

function isKnown(name: string): name is ExpressionName {
  return Object.prototype.hasOwnProperty.call(expressionTables, name);
}

const envelope = schema({
  name: { type: NFTA_EXPR_NAME, codec: string },
  data: { type: NFTA_EXPR_DATA, codec: bytes },
});

/** One list element of NFTA_RULE_EXPRESSIONS: {NFTA_EXPR_NAME, NFTA_EXPR_DATA}. */
export const expressionCodec: Codec<Expression> = {
  nested: true,
  write(writer, expression) {
    const named = writer.begin(NFTA_EXPR_NAME);
    if (expression.name === 'unknown') {
      string.write(writer, expression.kind);
      writer.end(named).put(NFTA_EXPR_DATA, expression.data, NLA_F_NESTED);
      return;
    }
    const { name, ...attributes } = expression;
    const table: ExpressionTables[ExpressionName] = expressionTables[name];
    string.write(writer, name);
    const data = writer.end(named).begin(NFTA_EXPR_DATA, NLA_F_NESTED);
    writeAttributes(writer, table, attributes);
    writer.end(data);
  },
  decode(data, where) {
    const { name = '', data: inner = Buffer.alloc(0) } = decodeAttributes(envelope, data, where);
    if (!isKnown(name)) return { name: 'unknown', kind: name, data: inner };
    const attributes = decodeAttributes(expressionTables[name], inner, `${where}.${name}`);
    return { name, ...attributes } as KnownExpression;
  },
};

// Builders, named after what nft prints for them.

/** `[ meta load <key> => reg <dreg> ]` */
export function metaLoad(key: number, dreg: number): Expression {
  return { name: 'meta', key, dreg };
}

/** `[ cmp eq reg <sreg> <value> ]` */
export function cmpEq(sreg: number, value: Buffer): Expression {
  return { name: 'cmp', sreg, op: NFT_CMP_EQ, data: { value } };
}

/** `[ payload load <len>b @ <base> header + <offset> => reg <dreg> ]` */
export function payloadLoad(base: number, offset: number, len: number, dreg: number): Expression {
  return { name: 'payload', dreg, base, offset, len };
}

/**
 * `[ objref sreg <sreg> set <setName> ]`. `setId` names a set created earlier in the same batch
 * (NFTA_SET_ID); the kernel resolves by name first, so it is harmless for an existing set.
 */
export function objrefMap(sreg: number, setName: string, setId?: number): Expression {
  return setId === undefined
    ? { name: 'objref', setSreg: sreg, setName }
    : { name: 'objref', setSreg: sreg, setName, setId };
}

/** `[ lookup reg <sreg> set <set> ]`; `setId` as for objrefMap. */
export function lookupSet(sreg: number, set: string, setId?: number): Expression {
  return setId === undefined ? { name: 'lookup', set, sreg } : { name: 'lookup', set, sreg, setId };
}

/** `[ lookup reg <sreg> set <set> 0x1 ]` (`!= @set`): goes on when the key is NOT in the set. */
export function lookupNotInSet(sreg: number, set: string, setId?: number): Expression {
  return setId === undefined
    ? { name: 'lookup', set, sreg, flags: NFT_LOOKUP_F_INV }
    : { name: 'lookup', set, sreg, setId, flags: NFT_LOOKUP_F_INV };
}

/** `[ immediate reg 0 <verdict> ]` */
export function verdict(code: number): Expression {
  return { name: 'immediate', dreg: NFT_REG_VERDICT, data: { verdict: { code } } };
}

/**
 * The kernel dumps an expression without what only mattered while the batch ran (objref's
 * NFTA_OBJREF_SET_ID, lookup's NFTA_LOOKUP_SET_ID), and with a lookup's flags even when 0;
 * dropping them lets a wanted rule be compared with a dumped one.
 */
function comparable(expression: Expression): Expression {
  if (expression.name === 'lookup') {
    // The kernel dumps NFTA_LOOKUP_FLAGS always, 0 when not inverted (nft_lookup_dump).
    const flags = expression.flags === 0 ? undefined : expression.flags;
    return { ...expression, setId: undefined, flags };
  }
  if (expression.name !== 'objref' || expression.setId === undefined) return expression;
  return { ...expression, setId: undefined };
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (Buffer.isBuffer(a) || Buffer.isBuffer(b)) {
    return Buffer.isBuffer(a) && Buffer.isBuffer(b) && a.equals(b);
  }
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return a === b;
  const keysA = Object.keys(a).filter((k) => (a as Record<string, unknown>)[k] !== undefined);
  const keysB = Object.keys(b).filter((k) => (b as Record<string, unknown>)[k] !== undefined);
  if (keysA.length !== keysB.length) return false;
  return keysA.every((key) =>
    deepEqual((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]),
  );
}

/** Whether a dumped rule's expressions are exactly the wanted ones, in order. */
export function sameExpressions(actual: Expression[], wanted: Expression[]): boolean {
  return (
    actual.length === wanted.length &&
    actual.every((expression, index) =>
      deepEqual(comparable(expression), comparable(wanted[index])),
    )
  );
}
