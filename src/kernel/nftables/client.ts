/**
 * nf_tables over NETLINK_NETFILTER: one batch writer for changes, typed reads for state.
 *
 * Changes go in transactions (google/nftables' model): an NftBatch queues typed messages, and
 * `commit` sends them in one datagram between NFNL_MSG_BATCH_BEGIN and NFNL_MSG_BATCH_END. The
 * kernel applies all of them or none; every message asks for an ACK, and a failure is reported
 * against the sequence number of the failing message, which NetlinkSocket.batch turns back into
 * that message's name ("NFT_MSG_NEWOBJ ip wg_peerd_wg0 quota q_10_8_0_2: ENOENT ...") with the
 * kernel's extended-ACK text.
 *
 * Reads are plain GET requests (a single object, or a dump filtered by table). nf_tables answers
 * ENOENT for a missing table/chain/set/object; the readers return null for it.
 */
import {
  AttributeWriter,
  type Attributes,
  NETLINK_NETFILTER,
  NLM_F_ACK,
  NLM_F_APPEND,
  NLM_F_CREATE,
  NLM_F_REQUEST,
  type NetlinkMessage,
  NetlinkProtocolError,
  NetlinkSocket,
  type Schema,
  type TransportFactory,
  decodeAttributes,
  encodeAttributes,
  isNetlinkError,
  writeAttributes,
} from '../../netlink';
import type { BatchMessage } from '../../netlink';
import { FacilityUnavailableError } from '../errors';
import {
  NFNETLINK_V0,
  NFNL_MSG_BATCH_BEGIN,
  NFNL_MSG_BATCH_END,
  NFNL_SUBSYS_NFTABLES,
  NFPROTO_INET,
  NFPROTO_IPV4,
  NFPROTO_IPV6,
  NFPROTO_UNSPEC,
  NFT_MSG_DELCHAIN,
  NFT_MSG_DELOBJ,
  NFT_MSG_DELRULE,
  NFT_MSG_DELSET,
  NFT_MSG_DELSETELEM,
  NFT_MSG_DELTABLE,
  NFT_MSG_GETCHAIN,
  NFT_MSG_GETGEN,
  NFT_MSG_GETOBJ,
  NFT_MSG_GETOBJ_RESET,
  NFT_MSG_GETRULE,
  NFT_MSG_GETSET,
  NFT_MSG_GETSETELEM,
  NFT_MSG_GETTABLE,
  NFT_MSG_NAMES,
  NFT_MSG_NEWCHAIN,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWRULE,
  NFT_MSG_NEWSET,
  NFT_MSG_NEWSETELEM,
  NFT_MSG_NEWTABLE,
  nfgenmsg,
  nftMessageType,
} from './constants';
import {
  chainAttributes,
  generationAttributes,
  objectAttributes,
  ruleAttributes,
  setAttributes,
  setElementAttributes,
  setElementListAttributes,
  tableAttributes,
} from './schema';

export type TableAttributes = Attributes<typeof tableAttributes>;
export type ChainAttributes = Attributes<typeof chainAttributes>;
export type RuleAttributes = Attributes<typeof ruleAttributes>;
export type SetAttributes = Attributes<typeof setAttributes>;
export type SetElementAttributes = Attributes<typeof setElementAttributes>;
export type SetElementListAttributes = Attributes<typeof setElementListAttributes>;
export type ObjectAttributes = Attributes<typeof objectAttributes>;

/** How nft names a family: "ip", "inet", ... (for messages and operation names). */
export function familyName(family: number): string {
  switch (family) {
    case NFPROTO_IPV4:
      return 'ip';
    case NFPROTO_INET:
      return 'inet';
    case NFPROTO_IPV6:
      return 'ip6';
    default:
      return `family ${family}`;
  }
}

function header(family: number, resId = 0): Buffer {
  return nfgenmsg.encode({ family, version: NFNETLINK_V0, resId });
}

/** The attributes after a message's nfgenmsg, decoded with `table`. */
export function decodeNftMessage<S extends Schema>(
  table: S,
  message: NetlinkMessage,
  where: string,
): Attributes<S> {
  return decodeAttributes(table, message.payload.subarray(nfgenmsg.size), where);
}

/**
 * A transaction being written. Builders queue messages in order; nothing reaches the kernel
 * before `NfTables.commit`. Names of objects created in the same batch may be referenced by id
 * (NFTA_SET_ID) as well as by name.
 */
export class NftBatch {
  private readonly queued: BatchMessage[];
  /** Every message's payload is written here, one after the other (a restore's 100,000). */
  private readonly writer: AttributeWriter;

  constructor(
    readonly family: number,
    queue: BatchMessage[] = [],
    writer = new AttributeWriter(4096),
  ) {
    this.queued = queue;
    this.writer = writer;
  }

  /**
   * The same transaction, whose messages queued through the returned batch are of `family`:
   * each message carries its own nfgenmsg family, so tables of several families change in one
   * transaction (as `nft -f` commits a file naming an ip and an ip6 table).
   */
  inFamily(family: number): NftBatch {
    return new NftBatch(family, this.queued, this.writer);
  }

  get length(): number {
    return this.queued.length;
  }

  /** The operation names of the queued messages, in order (for logs and tests). */
  get operations(): string[] {
    return this.queued.map((message) => message.operation);
  }

  private push<S extends Schema>(
    msg: number,
    flags: number,
    table: S,
    values: Attributes<S>,
    what: string,
  ): this {
    const writer = this.writer;
    const start = writer.length;
    nfgenmsg.write(writer, { family: this.family, version: NFNETLINK_V0, resId: 0 });
    writeAttributes(writer, table, values);
    this.queued.push({
      type: nftMessageType(msg),
      // NLM_F_ACK goes on the last message only (toMessages), as nft does.
      flags: NLM_F_REQUEST | flags,
      payload: writer.from(start),
      ack: false,
      operation: `${NFT_MSG_NAMES[msg]} ${familyName(this.family)} ${what}`,
    });
    return this;
  }

  /** NEWTABLE without EXCL: creates, or updates the flags of an existing table. */
  newTable(values: TableAttributes): this {
    return this.push(NFT_MSG_NEWTABLE, NLM_F_CREATE, tableAttributes, values, `${values.name}`);
  }

  deleteTable(name: string): this {
    return this.push(NFT_MSG_DELTABLE, 0, tableAttributes, { name }, name);
  }

  /** NEWCHAIN without EXCL: creates, or updates the policy of an existing chain (same hook). */
  newChain(values: ChainAttributes): this {
    return this.push(
      NFT_MSG_NEWCHAIN,
      NLM_F_CREATE,
      chainAttributes,
      values,
      `${values.table} ${values.name}`,
    );
  }

  /** DELCHAIN deletes the chain with its rules (a chain something jumps to is EBUSY). */
  deleteChain(table: string, name: string): this {
    return this.push(NFT_MSG_DELCHAIN, 0, chainAttributes, { table, name }, `${table} ${name}`);
  }

  /** NEWRULE with APPEND: adds the rule at the end of its chain. */
  newRule(values: RuleAttributes): this {
    return this.push(
      NFT_MSG_NEWRULE,
      NLM_F_CREATE | NLM_F_APPEND,
      ruleAttributes,
      values,
      `${values.table} ${values.chain}`,
    );
  }

  /** DELRULE with a handle deletes that rule; without one it flushes the chain. */
  deleteRules(table: string, chain: string, handle?: bigint): this {
    return this.push(
      NFT_MSG_DELRULE,
      0,
      ruleAttributes,
      { table, chain, handle },
      `${table} ${chain}${handle === undefined ? '' : ` handle ${handle}`}`,
    );
  }

  newSet(values: SetAttributes): this {
    return this.push(
      NFT_MSG_NEWSET,
      NLM_F_CREATE,
      setAttributes,
      values,
      `${values.table} ${values.name}`,
    );
  }

  deleteSet(table: string, name: string): this {
    return this.push(NFT_MSG_DELSET, 0, setAttributes, { table, name }, `${table} ${name}`);
  }

  /** NEWSETELEM without EXCL: an element that exists with the same data is no error. */
  newSetElements(values: SetElementListAttributes, what: string): this {
    return this.push(
      NFT_MSG_NEWSETELEM,
      NLM_F_CREATE,
      setElementListAttributes,
      values,
      `${values.table} ${values.set} ${what}`,
    );
  }

  deleteSetElements(values: SetElementListAttributes, what: string): this {
    return this.push(
      NFT_MSG_DELSETELEM,
      0,
      setElementListAttributes,
      values,
      `${values.table} ${values.set} ${what}`,
    );
  }

  /**
   * NEWOBJ without EXCL or REPLACE: creates the object, or (Linux 5.4+, d62d0ba97b58) updates
   * an existing one in place through its type's update hook, which for a quota sets bytes and
   * flags and keeps what was consumed. NLM_F_REPLACE would be EOPNOTSUPP.
   */
  newObject(values: ObjectAttributes, what: string): this {
    return this.push(
      NFT_MSG_NEWOBJ,
      NLM_F_CREATE,
      objectAttributes,
      values,
      `${values.table} ${what} ${values.name}`,
    );
  }

  /** DELOBJ; an object a set element or rule still refers to is EBUSY. */
  deleteObject(table: string, type: number, name: string, what: string): this {
    return this.push(
      NFT_MSG_DELOBJ,
      0,
      objectAttributes,
      { table, name, type },
      `${table} ${what} ${name}`,
    );
  }

  /** The datagram's messages: BATCH_BEGIN, the queued messages, BATCH_END. */
  /**
   * The transaction as sent. Only its last message asks for an ACK: the kernel runs the whole
   * batch inside our sendmsg and answers a failed message whether or not it asked
   * (nfnetlink_rcv_batch: errors are queued and delivered in order once the batch is done), so
   * every error comes before the last message's answer, which ends the exchange. An ACK per
   * message overflowed the receive buffer at 10,000 caps (ENOBUFS: each ACK is an skb of its
   * own) and made a restore of that many fail; google/nftables stopped asking for them too
   * (PR 336), and nft never did.
   */
  toMessages(): BatchMessage[] {
    // BEGIN/END carry nfgenmsg {AF_UNSPEC, NFNETLINK_V0, res_id = htons(NFNL_SUBSYS_NFTABLES)}:
    // res_id selects the subsystem that runs the transaction. They ask for no ACK.
    const delimiter = (type: number, name: string): BatchMessage => ({
      type,
      flags: NLM_F_REQUEST,
      payload: header(NFPROTO_UNSPEC, NFNL_SUBSYS_NFTABLES),
      ack: false,
      operation: name,
    });
    const last = this.queued.length - 1;
    return [
      delimiter(NFNL_MSG_BATCH_BEGIN, 'NFNL_MSG_BATCH_BEGIN'),
      ...this.queued.map((message, index) =>
        index === last ? { ...message, flags: message.flags | NLM_F_ACK, ack: true } : message,
      ),
      delimiter(NFNL_MSG_BATCH_END, 'NFNL_MSG_BATCH_END'),
    ];
  }
}

const EPROTONOSUPPORT_CODES = new Set(['EPROTONOSUPPORT', 'EAFNOSUPPORT']);

/** A socket on NETLINK_NETFILTER, opened on first use, carrying nf_tables requests. */
export class NfTables {
  private opened: NetlinkSocket | undefined;

  constructor(private readonly open: TransportFactory) {}

  /**
   * Opening is deferred so that a kernel without nfnetlink fails the calls that need it (with a
   * FacilityUnavailableError) instead of the daemon's start.
   */
  private get socket(): NetlinkSocket {
    if (!this.opened) {
      try {
        this.opened = new NetlinkSocket(this.open(NETLINK_NETFILTER));
      } catch (error) {
        const code = (error as { code?: unknown }).code;
        if (typeof code === 'string' && EPROTONOSUPPORT_CODES.has(code)) {
          throw new FacilityUnavailableError(
            'nfnetlink (NETLINK_NETFILTER sockets)',
            'load the kernel modules: modprobe nfnetlink nf_tables',
            { cause: error },
          );
        }
        throw error;
      }
    }
    return this.opened;
  }

  /** Sends the batch as one transaction; nothing is sent for an empty batch. */
  async commit(batch: NftBatch, operation: string): Promise<void> {
    if (batch.length === 0) return;
    await this.socket.batch(batch.toMessages(), { operation });
  }

  /** A GET of one thing; null when the kernel answers ENOENT. */
  async get(
    msg: number,
    family: number,
    payload: Buffer,
    operation: string,
  ): Promise<NetlinkMessage | null> {
    try {
      const replies = await this.socket.request(
        nftMessageType(msg),
        Buffer.concat([header(family), payload]),
        { operation },
      );
      return replies[0] ?? null;
    } catch (error) {
      if (isNetlinkError(error, 'ENOENT')) return null;
      throw error;
    }
  }

  /** A GET dump; an empty list when the kernel answers ENOENT (no such table or set). */
  async dump(
    msg: number,
    family: number,
    payload: Buffer,
    operation: string,
  ): Promise<NetlinkMessage[]> {
    try {
      return await this.socket.dump(nftMessageType(msg), Buffer.concat([header(family), payload]), {
        operation,
      });
    } catch (error) {
      if (isNetlinkError(error, 'ENOENT')) return [];
      throw error;
    }
  }

  /**
   * The ruleset generation (NFT_MSG_GETGEN, NFTA_GEN_ID): every committed transaction of this
   * network namespace, of any table and any process, advances it, and nothing else does (a
   * quota counting or a data-path notification does not). Two reads with the same generation
   * saw the same tables, chains, sets, elements and objects; only counters moved between them.
   * nft keys its own cache on it the same way.
   */
  async getGeneration(): Promise<number> {
    const reply = await this.get(NFT_MSG_GETGEN, NFPROTO_UNSPEC, Buffer.alloc(0), 'NFT_MSG_GETGEN');
    const id = reply && decodeNftMessage(generationAttributes, reply, 'generation').id;
    if (id === undefined || id === null) {
      throw new NetlinkProtocolError('NFT_MSG_GETGEN answered without NFTA_GEN_ID');
    }
    return id;
  }

  async getTable(family: number, name: string): Promise<TableAttributes | null> {
    const reply = await this.get(
      NFT_MSG_GETTABLE,
      family,
      encodeAttributes(tableAttributes, { name }),
      `NFT_MSG_GETTABLE ${familyName(family)} ${name}`,
    );
    return reply && decodeNftMessage(tableAttributes, reply, 'table');
  }

  async getChain(family: number, table: string, name: string): Promise<ChainAttributes | null> {
    const reply = await this.get(
      NFT_MSG_GETCHAIN,
      family,
      encodeAttributes(chainAttributes, { table, name }),
      `NFT_MSG_GETCHAIN ${familyName(family)} ${table} ${name}`,
    );
    return reply && decodeNftMessage(chainAttributes, reply, 'chain');
  }

  async getSet(family: number, table: string, name: string): Promise<SetAttributes | null> {
    const reply = await this.get(
      NFT_MSG_GETSET,
      family,
      encodeAttributes(setAttributes, { table, name }),
      `NFT_MSG_GETSET ${familyName(family)} ${table} ${name}`,
    );
    return reply && decodeNftMessage(setAttributes, reply, 'set');
  }

  /** The rules of one chain, in order (the kernel filters the dump by table and chain). */
  async listRules(family: number, table: string, chain: string): Promise<RuleAttributes[]> {
    const replies = await this.dump(
      NFT_MSG_GETRULE,
      family,
      encodeAttributes(ruleAttributes, { table, chain }),
      `NFT_MSG_GETRULE ${familyName(family)} ${table} ${chain}`,
    );
    return replies
      .map((reply) => decodeNftMessage(ruleAttributes, reply, 'rule'))
      .filter((rule) => rule.table === table && rule.chain === chain);
  }

  /**
   * The objects of one type in one table: the kernel filters the dump by NFTA_OBJ_TABLE and
   * NFTA_OBJ_TYPE (and the family in nfgenmsg). `table` decodes each; by default every attribute.
   */
  async listObjects<S extends Schema = typeof objectAttributes>(
    family: number,
    table: string,
    type: number,
    attributes: S = objectAttributes as unknown as S,
  ): Promise<Array<Attributes<S>>> {
    const replies = await this.dump(
      NFT_MSG_GETOBJ,
      family,
      encodeAttributes(objectAttributes, { table, type }),
      `NFT_MSG_GETOBJ ${familyName(family)} ${table} type ${type}`,
    );
    return replies.map((reply) => decodeNftMessage(attributes, reply, 'object'));
  }

  /**
   * NFT_MSG_GETOBJ_RESET of one object (nf_tables_getobj with reset): the kernel dumps the
   * object's values and zeroes its counters in the same step, so nothing counted is lost or
   * counted twice (nft_quota_do_dump: `consumed` as dumped is subtracted, and
   * NFT_QUOTA_F_DEPLETED cleared). Null when there is no such object.
   */
  resetObject(
    family: number,
    table: string,
    type: number,
    name: string,
  ): Promise<ObjectAttributes | null> {
    return this.oneObject(NFT_MSG_GETOBJ_RESET, family, table, type, name);
  }

  getObject(
    family: number,
    table: string,
    type: number,
    name: string,
  ): Promise<ObjectAttributes | null> {
    return this.oneObject(NFT_MSG_GETOBJ, family, table, type, name);
  }

  private async oneObject(
    msg: number,
    family: number,
    table: string,
    type: number,
    name: string,
  ): Promise<ObjectAttributes | null> {
    const reply = await this.get(
      msg,
      family,
      encodeAttributes(objectAttributes, { table, name, type }),
      `${NFT_MSG_NAMES[msg] ?? msg} ${familyName(family)} ${table} ${name}`,
    );
    return reply && decodeNftMessage(objectAttributes, reply, 'object');
  }

  /** Every element of a set (empty when the set does not exist). */
  async listSetElements(
    family: number,
    table: string,
    set: string,
  ): Promise<SetElementAttributes[]> {
    const replies = await this.dump(
      NFT_MSG_GETSETELEM,
      family,
      encodeAttributes(setElementListAttributes, { table, set }),
      `NFT_MSG_GETSETELEM ${familyName(family)} ${table} ${set}`,
    );
    return replies.flatMap(
      (reply) => decodeNftMessage(setElementListAttributes, reply, 'elements').elements ?? [],
    );
  }

  /** One element by key (`nft get element`); null when the set or the element is missing. */
  async getSetElement(
    family: number,
    table: string,
    set: string,
    key: Buffer,
    what: string,
  ): Promise<SetElementAttributes | null> {
    const reply = await this.get(
      NFT_MSG_GETSETELEM,
      family,
      encodeAttributes(setElementListAttributes, {
        table,
        set,
        elements: [{ key: { value: key } }],
      }),
      `NFT_MSG_GETSETELEM ${familyName(family)} ${table} ${set} ${what}`,
    );
    if (!reply) return null;
    return decodeNftMessage(setElementListAttributes, reply, 'elements').elements?.[0] ?? null;
  }

  close(): void {
    this.opened?.close();
  }
}
