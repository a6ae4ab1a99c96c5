/**
 * Netlink messages: struct nlmsghdr (linux/netlink.h) and the NLMSG_ERROR payload with its
 * extended-ACK TLVs.
 */
import { decodeAttributes, schema, string, u32 } from './attributes';
import {
  NLMSGERR_ATTR_MISS_NEST,
  NLMSGERR_ATTR_MISS_TYPE,
  NLMSGERR_ATTR_MSG,
  NLMSGERR_ATTR_OFFS,
  NLMSG_HDRLEN,
  NLM_F_ACK_TLVS,
  NLM_F_CAPPED,
  align,
} from './constants';
import { NetlinkProtocolError } from './errors';
import { struct } from './struct';

export const nlmsghdr = struct('nlmsghdr', {
  len: 'u32',
  type: 'u16',
  flags: 'u16',
  seq: 'u32',
  pid: 'u32',
});

export interface NetlinkMessage {
  type: number;
  flags: number;
  seq: number;
  pid: number;
  /** Everything after the 16-byte header: family header, then attributes. */
  payload: Buffer;
}

export function encodeMessage(message: NetlinkMessage): Buffer {
  return encodeMessages([message]);
}

/**
 * Several messages as one datagram, written into one buffer: each header, its payload, then
 * zeros to the 4-byte boundary (what encodeMessage gives for each, concatenated).
 */
export function encodeMessages(messages: readonly NetlinkMessage[]): Buffer {
  let total = 0;
  for (const message of messages) total += align(NLMSG_HDRLEN + message.payload.length);
  const buffer = Buffer.allocUnsafe(total);
  let offset = 0;
  for (const message of messages) {
    const length = NLMSG_HDRLEN + message.payload.length;
    buffer.writeUInt32LE(length, offset);
    buffer.writeUInt16LE(message.type, offset + 4);
    buffer.writeUInt16LE(message.flags, offset + 6);
    buffer.writeUInt32LE(message.seq >>> 0, offset + 8);
    buffer.writeUInt32LE(message.pid >>> 0, offset + 12);
    message.payload.copy(buffer, offset + NLMSG_HDRLEN);
    const end = offset + align(length);
    buffer.fill(0, offset + length, end);
    offset = end;
  }
  return buffer;
}

/** Splits one received datagram into its messages; a truncated or short header is an error. */
export function parseMessages(datagram: Buffer): NetlinkMessage[] {
  const messages: NetlinkMessage[] = [];
  let offset = 0;
  while (offset < datagram.length) {
    const remaining = datagram.length - offset;
    if (remaining < NLMSG_HDRLEN) {
      throw new NetlinkProtocolError(`${remaining} bytes left after the last message`);
    }
    // nlmsghdr's fields read in place (as nlmsghdr.readFrom would, without a record per
    // message: a dump of 10,000 quota objects is 10,000 messages).
    const len = datagram.readUInt32LE(offset);
    if (len < NLMSG_HDRLEN || len > remaining) {
      throw new NetlinkProtocolError(
        `message at offset ${offset} has length ${len}, ${remaining} bytes remain`,
      );
    }
    messages.push({
      type: datagram.readUInt16LE(offset + 4),
      flags: datagram.readUInt16LE(offset + 6),
      seq: datagram.readUInt32LE(offset + 8),
      pid: datagram.readUInt32LE(offset + 12),
      payload: datagram.subarray(offset + NLMSG_HDRLEN, offset + len),
    });
    offset += align(len);
  }
  return messages;
}

const extAck = schema({
  message: { type: NLMSGERR_ATTR_MSG, codec: string },
  offset: { type: NLMSGERR_ATTR_OFFS, codec: u32 },
  missingType: { type: NLMSGERR_ATTR_MISS_TYPE, codec: u32 },
  missingNest: { type: NLMSGERR_ATTR_MISS_NEST, codec: u32 },
});

export interface ErrorReport {
  /** Positive errno; 0 for a plain ACK. */
  errno: number;
  /** Sequence number of the request this answers (from the echoed header). */
  requestSeq: number;
  kernelMessage?: string | undefined;
  offset?: number | undefined;
  missingType?: number | undefined;
}

/**
 * Parses the payload of NLMSG_ERROR (and of NLMSG_DONE, which carries the dump's int error): a
 * negative errno, the request's header (and body unless NLM_F_CAPPED), then the ext-ack TLVs when
 * NLM_F_ACK_TLVS is set. The TLVs start after the echoed request, aligned.
 */
export function parseErrorPayload(message: NetlinkMessage): ErrorReport {
  const { payload, flags } = message;
  if (payload.length < 4) throw new NetlinkProtocolError('NLMSG_ERROR shorter than its errno');
  const errno = -payload.readInt32LE(0);
  let requestSeq = message.seq;
  let tlvStart = payload.length;
  if (payload.length >= 4 + NLMSG_HDRLEN) {
    const echoed = nlmsghdr.readFrom(payload, 4);
    requestSeq = echoed.seq;
    tlvStart = 4 + (flags & NLM_F_CAPPED ? NLMSG_HDRLEN : align(echoed.len));
  }
  const report: ErrorReport = { errno, requestSeq };
  if (flags & NLM_F_ACK_TLVS && tlvStart < payload.length) {
    const tlvs = decodeAttributes(extAck, payload.subarray(tlvStart), 'extended ACK');
    report.kernelMessage = tlvs.message;
    report.offset = tlvs.offset;
    report.missingType = tlvs.missingType;
  }
  return report;
}

/** NLMSG_DONE carries an int (the dump's error, normally 0) and, since 4.20, ext-ack TLVs. */
export function parseDonePayload(message: NetlinkMessage): ErrorReport {
  const { payload, flags } = message;
  if (payload.length < 4) return { errno: 0, requestSeq: message.seq };
  const report: ErrorReport = { errno: -payload.readInt32LE(0), requestSeq: message.seq };
  if (flags & NLM_F_ACK_TLVS && payload.length > 4) {
    const tlvs = decodeAttributes(extAck, payload.subarray(4), 'extended ACK');
    report.kernelMessage = tlvs.message;
    report.offset = tlvs.offset;
  }
  return report;
}
