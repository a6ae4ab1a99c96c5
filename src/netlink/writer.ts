/**
 * The one attribute encoder: netlink attributes (struct nlattr, linux/netlink.h: {nla_len u16,
 * nla_type u16}, the payload, zero padding to 4 bytes) written in place into one growing buffer,
 * as the kernel's own nla_put / nla_nest_start / nla_nest_end do into an skb. A nested
 * attribute's header is written first with its length left open (`begin`) and patched once its
 * content is written (`end`), so nothing is encoded twice, no Buffer is made per attribute and no
 * concat per nesting level; several messages (a whole nf_tables batch) may share one writer, each
 * payload a view of its bytes (`from`). Small buffers come from Node's pool (allocUnsafe): the
 * bytes `reserve` hands out and the padding are zeroed as they are reached, so padding and the
 * bytes a fixed-width value leaves unset are zero, as the kernel expects. An attribute longer
 * than nla_len's 16 bits throws NetlinkProtocolError (the request must be split). The bytes are
 * those the codecs of ./attributes.ts describe; the transcript replay tests hold them to what
 * real kernels were sent and answered.
 */
import { NLA_F_NESTED, NLA_HDRLEN, NLA_TYPE_MASK } from './constants';
import { NetlinkProtocolError } from './errors';

const MIN_CAPACITY = 64;

export class AttributeWriter {
  /** The bytes so far are buffer[0..length); a reserve() may replace the buffer with a larger one. */
  buffer: Buffer;
  private offset = 0;

  constructor(capacity = MIN_CAPACITY) {
    this.buffer = Buffer.allocUnsafe(Math.max(capacity, NLA_HDRLEN));
  }

  /** Bytes written so far. */
  get length(): number {
    return this.offset;
  }

  /**
   * Makes room for `size` more bytes and returns where they start; the caller writes them into
   * `buffer` (read after this call: growing replaces it). They are zero until written.
   */
  reserve(size: number): number {
    const at = this.skip(size);
    const buffer = this.buffer;
    if (size > 16) buffer.fill(0, at, at + size);
    else for (let i = at; i < at + size; i++) buffer[i] = 0;
    return at;
  }

  /** Appends raw bytes (a payload, or a family header made elsewhere). */
  bytes(data: Buffer): this {
    const at = this.skip(data.length);
    data.copy(this.buffer, at);
    return this;
  }

  /** Makes room for `size` more bytes, left as they are, and returns where they start. */
  private skip(size: number): number {
    const at = this.offset;
    const needed = at + size;
    if (needed > this.buffer.length) {
      const grown = Buffer.allocUnsafe(Math.max(needed, this.buffer.length * 2));
      this.buffer.copy(grown, 0, 0, at);
      this.buffer = grown;
    }
    this.offset = needed;
    return at;
  }

  /**
   * Starts an attribute of `type` (`flags` may hold NLA_F_NESTED / NLA_F_NET_BYTEORDER) whose
   * payload is written next; returns the handle `end` takes.
   */
  begin(type: number, flags = 0): number {
    const at = this.skip(NLA_HDRLEN); // all four bytes written here and by end()
    const raw = (type & NLA_TYPE_MASK) | flags;
    this.buffer[at + 2] = raw & 0xff;
    this.buffer[at + 3] = raw >>> 8;
    return at;
  }

  /** Ends the attribute `begin` started at `start`: its nla_len, then padding to 4 bytes. */
  end(start: number): this {
    const length = this.offset - start;
    if (length > 0xffff) {
      const type = (this.buffer[start + 2]! | (this.buffer[start + 3]! << 8)) & NLA_TYPE_MASK;
      throw new NetlinkProtocolError(
        `attribute ${type} is ${length} bytes; nla_len is 16 bits (split the request)`,
      );
    }
    this.buffer[start] = length & 0xff;
    this.buffer[start + 1] = length >>> 8;
    const padding = ((length + 3) & ~3) - length;
    if (padding > 0) this.reserve(padding);
    return this;
  }

  /** Appends one attribute whose payload is `data`. */
  put(type: number, data: Buffer, flags = 0): this {
    const start = this.begin(type, flags);
    this.bytes(data);
    return this.end(start);
  }

  /** Appends a nested attribute (with NLA_F_NESTED) whose content `build` writes. */
  nested(type: number, build: (writer: AttributeWriter) => void): this {
    const start = this.begin(type, NLA_F_NESTED);
    build(this);
    return this.end(start);
  }

  /** Forgets what was written from `length` on. */
  truncate(length: number): this {
    if (length < this.offset) this.offset = length;
    return this;
  }

  /** buffer[start..length) as a view (no copy): one message's payload of a shared writer. */
  from(start: number): Buffer {
    return this.buffer.subarray(start, this.offset);
  }

  /** Everything written, as a view of the buffer (no copy). */
  toBuffer(): Buffer {
    return this.buffer.subarray(0, this.offset);
  }
}
