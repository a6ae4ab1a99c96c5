/**
 * Every decoder of the project, as one table: name, layout of its input (for structure-aware
 * mutations), seeds taken from the recorded transcripts, and the decode function. Adding a
 * decoder is one line here (e.g. `attributes('wireguard.dump', table, seeds)` or
 * `throughClient(...)` for a parser reachable only through a kernel client).
 */
import {
  GENL_ID_CTRL,
  GenericNetlink,
  NETLINK_GENERIC,
  NETLINK_NETFILTER,
  NETLINK_ROUTE,
  NLMSG_DONE,
  NLMSG_ERROR,
  NetlinkError,
  NetlinkProtocolError,
  NetlinkSocket,
  type Schema,
  type StructCodec,
  type StructLayout,
  type TransportFactory,
  decodeAttributes,
  genlmsghdr,
  list,
  nested,
  nlmsghdr,
  parseDonePayload,
  parseErrorPayload,
  parseMessages,
} from '../../src/netlink';
import { KernelError } from '../../src/kernel/errors';
import { Links } from '../../src/kernel/link';
import {
  chainAttributes,
  hookAttributes,
  objectAttributes,
  quotaAttributes,
  quotaListing,
  ruleAttributes,
  setAttributes,
  setElementAttributes,
  setElementListAttributes,
  tableAttributes,
} from '../../src/kernel/nftables/schema';
import {
  dataAttributes,
  expressionCodec,
  verdictAttributes,
} from '../../src/kernel/nftables/expressions';
import {
  NFTA_CMP_DATA,
  NFTA_DATA_VERDICT,
  NFTA_IMMEDIATE_DATA,
  NFTA_CHAIN_HOOK,
  NFTA_CHAIN_USERDATA,
  NFTA_EXPR_DATA,
  NFTA_LIST_ELEM,
  NFTA_OBJ_DATA,
  NFTA_OBJ_USERDATA,
  NFTA_RULE_EXPRESSIONS,
  NFTA_RULE_USERDATA,
  NFTA_SET_ELEM_LIST_ELEMENTS,
  NFTA_SET_USERDATA,
  NFTA_TABLE_USERDATA,
  NFT_MSG_GETCHAIN,
  NFT_MSG_GETOBJ,
  NFT_MSG_GETRULE,
  NFT_MSG_GETSET,
  NFT_MSG_GETSETELEM,
  NFT_MSG_GETTABLE,
  NFT_MSG_NEWCHAIN,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWRULE,
  NFT_MSG_NEWSET,
  NFT_MSG_NEWSETELEM,
  NFT_MSG_NEWTABLE,
  nfgenmsg,
  nftMessageType,
} from '../../src/kernel/nftables/constants';
import { commentOf, decodeUserdata } from '../../src/kernel/nftables/userdata';
import { Quota } from '../../src/kernel/quota';
import {
  RTM_GETADDR,
  RTM_GETLINK,
  RTM_GETQDISC,
  RTM_GETROUTE,
  RTM_GETTCLASS,
  RTM_GETTFILTER,
  RTM_NEWQDISC,
  RTM_NEWTCLASS,
  RTM_NEWTFILTER,
  ifaddrmsg,
  ifinfomsg,
  rtmsg,
  tcmsg,
} from '../../src/kernel/rtnetlink';
import { Shaper } from '../../src/kernel/shaper';
import {
  TCA_HTB_PARMS,
  htbClassOptions,
  htbQdiscOptions,
  tcHtbGlob,
  tcHtbOpt,
  tcRatespec,
} from '../../src/kernel/tc/htb';
import {
  TCA_ACT_OPTIONS,
  actionEntry,
  mirredActions,
  mirredOptions,
  tcMirred,
} from '../../src/kernel/tc/mirred';
import { TCA_OPTIONS, decodeTc } from '../../src/kernel/tc/tc';
import {
  TCA_U32_ACT,
  TCA_U32_SEL,
  tcU32Key,
  tcU32SelHeader,
  u32Options,
  u32Selector,
} from '../../src/kernel/tc/u32';
import { WireGuard } from '../../src/kernel/wireguard';
import { parseDevice } from '../support/wg-table-decode';
import { decodeDeviceDump } from '../../src/kernel/wireguard/dump';
import { takePrivateKey } from '../../src/kernel/wireguard/private-key';
import {
  WGDEVICE_A_PEERS,
  WGPEER_A_ALLOWEDIPS,
  allowedIpAttributes,
  deviceReadAttributes,
  peerAttributes,
} from '../../src/kernel/wireguard/schema';
import { type Corpus, attributePayloads, distinct, listEntries } from './corpus';
import type { Layout } from './mutate';
import { FuzzStage } from './transport';

type ErrorClass = abstract new (...args: never[]) => Error;

export interface DecoderEntry {
  name: string;
  layout: Layout;
  seeds: Buffer[];
  /** Decodes one input; kernel-level parsers are async (they run through a transport). */
  decode(input: Buffer): unknown;
  /** The errors that are the decoder's own typed answer to bad input. */
  typedErrors: ErrorClass[];
  /** For parsers behind a client: whether the last decode reached the fuzzed request. */
  reachedTarget?(): boolean;
}

/** The codec's own error: the only one a decoder may throw on bad bytes. */
const CODEC_ERRORS: ErrorClass[] = [NetlinkProtocolError];
/**
 * Behind a client, a mutated reply may also be a kernel error (an NLMSG_ERROR with an errno),
 * which the client reports, at the kernel boundary, as one of the typed kernel errors
 * (KernelError: interface missing, facility missing, a call the kernel refused...), or a
 * well-formed state the client refuses to work with (a u32 table with 12,032 buckets in our
 * priority: SetupConflictError, the shaper's answer to a foreign setup). Below the kernel
 * layer (genl's family lookup) the kernel's answer is the netlink layer's own NetlinkError.
 */
const CLIENT_ERRORS: ErrorClass[] = [NetlinkProtocolError, NetlinkError, KernelError];

function attributes(name: string, table: Schema, seeds: Buffer[]): DecoderEntry {
  return {
    name,
    layout: 'attributes',
    seeds: distinct(seeds),
    decode: (input) => decodeAttributes(table, input, name),
    typedErrors: CODEC_ERRORS,
  };
}

function structure(codec: StructCodec<StructLayout>, seeds: Buffer[]): DecoderEntry {
  return {
    name: `struct ${codec.name}`,
    layout: 'bytes',
    seeds: distinct(
      seeds.map((seed) => seed.subarray(0, codec.size + 4)),
      16,
    ),
    decode: (input) => codec.decode(input),
    typedErrors: CODEC_ERRORS,
  };
}

function messages(name: string, seeds: Buffer[], decode: (input: Buffer) => unknown): DecoderEntry {
  return { name, layout: 'messages', seeds: distinct(seeds), decode, typedErrors: CODEC_ERRORS };
}

/**
 * A parser reachable only through a client method: `call` runs against the fuzz transport,
 * which answers the first `requestType` request with the input and the others as recorded in
 * `transcript`.
 */
function throughClient(
  name: string,
  corpus: Corpus,
  transcript: string,
  target: { protocol: number; requestType: number },
  call: (open: TransportFactory) => Promise<unknown>,
): DecoderEntry {
  const stage = new FuzzStage(corpus, transcript, target);
  let reached = false;
  return {
    name,
    layout: 'messages',
    seeds: distinct(corpus.answersTo(target.protocol, target.requestType), 32),
    async decode(input) {
      const session = stage.session(input);
      try {
        return await call(session.open);
      } finally {
        reached = session.reachedTarget;
      }
    },
    typedErrors: CLIENT_ERRORS,
    reachedTarget: () => reached,
  };
}

const isNft = (message: number) => (type: number) => type === nftMessageType(message);
const is = (wanted: number) => (type: number) => type === wanted;
const TICKS_PER_US = 15.625;
/** The reads of Quota.ensure, each fuzzed in turn. */
const QUOTA_READS = {
  table: NFT_MSG_GETTABLE,
  chain: NFT_MSG_GETCHAIN,
  set: NFT_MSG_GETSET,
  rules: NFT_MSG_GETRULE,
  elements: NFT_MSG_GETSETELEM,
};

export function decoders(corpus: Corpus): DecoderEntry[] {
  const datagrams = corpus.answers.flatMap((answer) => answer.datagrams);
  const any = corpus.messages.map((m) => m.payload);
  const wgFamily =
    corpus.messagesOf(NETLINK_GENERIC, (t) => t > GENL_ID_CTRL)[0]?.type ?? GENL_ID_CTRL + 1;
  const wg = corpus.bodies(NETLINK_GENERIC, is(wgFamily), genlmsghdr.size);
  const peers = listEntries(attributePayloads(wg, WGDEVICE_A_PEERS));
  const allowedIps = listEntries(attributePayloads(peers, WGPEER_A_ALLOWEDIPS));
  const tcBodies = (type: number) => corpus.bodies(NETLINK_ROUTE, is(type), tcmsg.size);
  const qdiscOptions = attributePayloads(tcBodies(RTM_NEWQDISC), TCA_OPTIONS);
  const classOptions = attributePayloads(tcBodies(RTM_NEWTCLASS), TCA_OPTIONS);
  const filterOptions = attributePayloads(tcBodies(RTM_NEWTFILTER), TCA_OPTIONS);
  const actions = listEntries(attributePayloads(filterOptions, TCA_U32_ACT));
  const nft = (message: number) => corpus.bodies(NETLINK_NETFILTER, isNft(message), nfgenmsg.size);
  const rules = nft(NFT_MSG_NEWRULE);
  const expressionLists = attributePayloads(rules, NFTA_RULE_EXPRESSIONS);
  const expressions = listEntries(expressionLists);
  const expressionData = attributePayloads(expressions, NFTA_EXPR_DATA);
  const data = [
    ...attributePayloads(expressionData, NFTA_CMP_DATA),
    ...attributePayloads(expressionData, NFTA_IMMEDIATE_DATA),
  ];
  const elements = listEntries(
    attributePayloads(nft(NFT_MSG_NEWSETELEM), NFTA_SET_ELEM_LIST_ELEMENTS),
  );
  const objects = nft(NFT_MSG_NEWOBJ);
  const userdata = [
    ...attributePayloads(nft(NFT_MSG_NEWTABLE), NFTA_TABLE_USERDATA),
    ...attributePayloads(nft(NFT_MSG_NEWCHAIN), NFTA_CHAIN_USERDATA),
    ...attributePayloads(rules, NFTA_RULE_USERDATA),
    ...attributePayloads(nft(NFT_MSG_NEWSET), NFTA_SET_USERDATA),
    ...attributePayloads(objects, NFTA_OBJ_USERDATA),
  ];

  return [
    // Message framing and the kernel's error/done reports (netlink/message.ts).
    messages('netlink.parseMessages', datagrams, parseMessages),
    messages(
      'netlink.parseErrorPayload',
      corpus.messages.filter((m) => m.type === NLMSG_ERROR).map((m) => m.bytes),
      (input) => parseMessages(input).map((m) => m.type === NLMSG_ERROR && parseErrorPayload(m)),
    ),
    messages(
      'netlink.parseDonePayload',
      corpus.messages.filter((m) => m.type === NLMSG_DONE).map((m) => m.bytes),
      (input) => parseMessages(input).map((m) => m.type === NLMSG_DONE && parseDonePayload(m)),
    ),

    // Structs (netlink/struct.ts) with every layout the project declares.
    ...[nlmsghdr, genlmsghdr, ifinfomsg, ifaddrmsg, rtmsg, tcmsg, nfgenmsg].map((codec) =>
      structure(codec as unknown as StructCodec<StructLayout>, any),
    ),
    ...[tcRatespec, tcHtbOpt, tcHtbGlob, tcU32Key, tcU32SelHeader, tcMirred].map((codec) =>
      structure(codec as unknown as StructCodec<StructLayout>, [
        ...attributePayloads(classOptions, TCA_HTB_PARMS),
        ...attributePayloads(filterOptions, TCA_U32_SEL),
      ]),
    ),

    // WireGuard (generic netlink) attribute tables.
    attributes('wireguard.device', deviceReadAttributes, wg),
    attributes('wireguard.peer', peerAttributes, peers),
    attributes('wireguard.allowedIp', allowedIpAttributes, allowedIps),
    {
      name: 'wireguard.parseDevice',
      layout: 'attributes',
      seeds: distinct(wg),
      decode: (input) => parseDevice('wg0', [{ cmd: 0, version: 1, attributes: input }]),
      typedErrors: CODEC_ERRORS,
    },
    {
      // The private key of an interface being adopted (issue 28); it zeroes its input, a copy.
      name: 'wireguard.takePrivateKey',
      layout: 'attributes',
      seeds: distinct(wg),
      decode: (input) => takePrivateKey(Buffer.from(input))?.fill(0),
      typedErrors: CODEC_ERRORS,
    },
    {
      // The daemon's dump decoder (src/kernel/wireguard/dump.ts), held equal to parseDevice.
      name: 'wireguard.decodeDeviceDump',
      layout: 'attributes',
      seeds: distinct(wg),
      decode: (input) => decodeDeviceDump('wg0', [input]),
      typedErrors: CODEC_ERRORS,
    },

    // tc: the common header and attributes, HTB, u32 (selector, actions) and mirred.
    messages(
      'tc.decodeTc',
      corpus
        .messagesOf(NETLINK_ROUTE, (t) => t >= RTM_NEWQDISC && t <= RTM_GETTFILTER)
        .map((m) => m.bytes),
      (input) => parseMessages(input).map(decodeTc),
    ),
    attributes('tc.htb.qdisc', htbQdiscOptions, qdiscOptions),
    attributes('tc.htb.class', htbClassOptions, classOptions),
    attributes('tc.u32.options', u32Options, filterOptions),
    {
      name: 'tc.u32.selector',
      layout: 'bytes',
      seeds: distinct(attributePayloads(filterOptions, TCA_U32_SEL)),
      decode: (input) => u32Selector.decode(input, 'selector'),
      typedErrors: CODEC_ERRORS,
    },
    {
      name: 'tc.u32.actions',
      layout: 'attributes',
      seeds: distinct(attributePayloads(filterOptions, TCA_U32_ACT)),
      decode: (input) => mirredActions(list(nested(actionEntry)).decode(input, 'actions')),
      typedErrors: CODEC_ERRORS,
    },
    attributes('tc.mirred', mirredOptions, attributePayloads(actions, TCA_ACT_OPTIONS)),

    // nf_tables: every object kind, expressions, data, userdata.
    attributes('nft.table', tableAttributes, nft(NFT_MSG_NEWTABLE)),
    attributes('nft.chain', chainAttributes, nft(NFT_MSG_NEWCHAIN)),
    attributes(
      'nft.hook',
      hookAttributes,
      attributePayloads(nft(NFT_MSG_NEWCHAIN), NFTA_CHAIN_HOOK),
    ),
    attributes('nft.rule', ruleAttributes, rules),
    {
      name: 'nft.expressions',
      layout: 'attributes',
      seeds: distinct(expressionLists),
      decode: (input) => list(expressionCodec, NFTA_LIST_ELEM).decode(input, 'expressions'),
      typedErrors: CODEC_ERRORS,
    },
    attributes('nft.data', dataAttributes, data),
    attributes('nft.verdict', verdictAttributes, attributePayloads(data, NFTA_DATA_VERDICT)),
    attributes('nft.set', setAttributes, nft(NFT_MSG_NEWSET)),
    attributes('nft.setElementList', setElementListAttributes, nft(NFT_MSG_NEWSETELEM)),
    attributes('nft.setElement', setElementAttributes, elements),
    attributes('nft.object', objectAttributes, objects),
    attributes('nft.quotaListing', quotaListing, objects),
    attributes('nft.quota', quotaAttributes, attributePayloads(objects, NFTA_OBJ_DATA)),
    {
      name: 'nft.userdata',
      layout: 'bytes',
      seeds: distinct(userdata),
      decode: (input) => ({ tlvs: decodeUserdata(input), comment: commentOf(input) }),
      typedErrors: CODEC_ERRORS,
    },

    // Kernel-level parsers, through their clients and the fuzz transport.
    throughClient(
      'genl.family (ctrl)',
      corpus,
      'wireguard-device',
      { protocol: NETLINK_GENERIC, requestType: GENL_ID_CTRL },
      (open) => new GenericNetlink(new NetlinkSocket(open(NETLINK_GENERIC))).family('wireguard'),
    ),
    throughClient(
      'wireguard.getDevice',
      corpus,
      'wireguard-device',
      { protocol: NETLINK_GENERIC, requestType: wgFamily },
      (open) => new WireGuard(open).getDevice('wgrec0'),
    ),
    throughClient(
      'links.getLink',
      corpus,
      'link-lifecycle',
      { protocol: NETLINK_ROUTE, requestType: RTM_GETLINK },
      (open) => new Links(open).getLink('wgrec1'),
    ),
    throughClient(
      'links.getIpv4Addresses',
      corpus,
      'api-peers',
      { protocol: NETLINK_ROUTE, requestType: RTM_GETADDR },
      async (open) => {
        const links = new Links(open);
        return links.getIpv4Addresses((await links.getLink('wgapi0')).index);
      },
    ),
    throughClient(
      'links.primaryIpv4 (routes)',
      corpus,
      'link-lifecycle',
      { protocol: NETLINK_ROUTE, requestType: RTM_GETROUTE },
      (open) => new Links(open).primaryIpv4(),
    ),
    throughClient(
      'shaper.listLimits (classes)',
      corpus,
      'shaper-limits',
      { protocol: NETLINK_ROUTE, requestType: RTM_GETTCLASS },
      (open) => new Shaper(open, { ticksPerUs: TICKS_PER_US }).listLimits('wgshp0'),
    ),
    throughClient(
      'shaper.ensure (qdiscs)',
      corpus,
      'shaper-limits',
      { protocol: NETLINK_ROUTE, requestType: RTM_GETQDISC },
      (open) => new Shaper(open, { ticksPerUs: TICKS_PER_US }).ensure('wgshp0', []),
    ),
    throughClient(
      'shaper.ensure (filters)',
      corpus,
      'shaper-limits',
      { protocol: NETLINK_ROUTE, requestType: RTM_GETTFILTER },
      (open) => new Shaper(open, { ticksPerUs: TICKS_PER_US }).ensure('wgshp0', []),
    ),
    throughClient(
      'quota.listCaps (objects)',
      corpus,
      'quota-caps',
      { protocol: NETLINK_NETFILTER, requestType: nftMessageType(NFT_MSG_GETOBJ) },
      (open) => new Quota(open).listCaps('wgrq1'),
    ),
    ...Object.entries(QUOTA_READS).map(([what, message]) =>
      throughClient(
        `quota.ensure (${what})`,
        corpus,
        'quota-caps',
        { protocol: NETLINK_NETFILTER, requestType: nftMessageType(message) },
        (open) => new Quota(open).ensure('wgrq1', []),
      ),
    ),
  ];
}
