/**
 * Generic netlink (linux/genetlink.h): a 4-byte genlmsghdr after nlmsghdr, and families whose
 * message type is a number the kernel assigns at registration, looked up by name through the
 * "nlctrl" family (GENL_ID_CTRL) and cached.
 */
import { decodeAttributes, encodeAttributes, schema, string, u16, u32 } from './attributes';
import {
  CTRL_ATTR_FAMILY_ID,
  CTRL_ATTR_FAMILY_NAME,
  CTRL_ATTR_HDRSIZE,
  CTRL_ATTR_MAXATTR,
  CTRL_ATTR_VERSION,
  CTRL_CMD_GETFAMILY,
  GENL_HDRLEN,
  GENL_ID_CTRL,
} from './constants';
import { NetlinkError, NetlinkProtocolError, isNetlinkError } from './errors';
import type { NetlinkMessage } from './message';
import type { NetlinkSocket, RequestOptions } from './socket';
import { struct } from './struct';

export const genlmsghdr = struct('genlmsghdr', { cmd: 'u8', version: 'u8', reserved: 'u16' });

const ctrlAttributes = schema({
  familyId: { type: CTRL_ATTR_FAMILY_ID, codec: u16 },
  familyName: { type: CTRL_ATTR_FAMILY_NAME, codec: string },
  version: { type: CTRL_ATTR_VERSION, codec: u32 },
  headerSize: { type: CTRL_ATTR_HDRSIZE, codec: u32 },
  maxAttribute: { type: CTRL_ATTR_MAXATTR, codec: u32 },
});

export interface GenlFamily {
  name: string;
  id: number;
  version: number;
  maxAttribute: number;
}

export interface GenlReply {
  cmd: number;
  version: number;
  /** The attributes after the genlmsghdr. */
  attributes: Buffer;
}

export interface GenlRequestOptions extends RequestOptions {
  dump?: boolean;
}

function encodeGenl(cmd: number, version: number, attributes: Buffer): Buffer {
  return Buffer.concat([genlmsghdr.encode({ cmd, version }), attributes]);
}

function decodeGenl(message: NetlinkMessage): GenlReply {
  if (message.payload.length < GENL_HDRLEN) {
    throw new NetlinkProtocolError('generic netlink message shorter than genlmsghdr');
  }
  const header = genlmsghdr.decode(message.payload);
  return {
    cmd: header.cmd,
    version: header.version,
    attributes: message.payload.subarray(GENL_HDRLEN),
  };
}

export class GenericNetlink {
  private readonly families = new Map<string, Promise<GenlFamily>>();

  constructor(readonly socket: NetlinkSocket) {}

  /** Resolves a family by name once; ENOENT means the kernel has no such family (no module). */
  family(name: string): Promise<GenlFamily> {
    let family = this.families.get(name);
    if (!family) {
      family = this.resolve(name);
      this.families.set(name, family);
      family.catch(() => this.families.delete(name));
    }
    return family;
  }

  private async resolve(name: string): Promise<GenlFamily> {
    const payload = encodeGenl(
      CTRL_CMD_GETFAMILY,
      1,
      encodeAttributes(ctrlAttributes, { familyName: name }),
    );
    const replies = await this.socket.request(GENL_ID_CTRL, payload, {
      operation: `CTRL_CMD_GETFAMILY ${name}`,
    });
    const reply = replies[0];
    if (!reply) throw new NetlinkProtocolError(`CTRL_CMD_GETFAMILY ${name}: no reply`);
    const attributes = decodeAttributes(ctrlAttributes, decodeGenl(reply).attributes, 'nlctrl');
    if (attributes.familyId === undefined) {
      throw new NetlinkProtocolError(
        `CTRL_CMD_GETFAMILY ${name}: reply without CTRL_ATTR_FAMILY_ID`,
      );
    }
    return {
      name,
      id: attributes.familyId,
      version: attributes.version ?? 1,
      maxAttribute: attributes.maxAttribute ?? 0,
    };
  }

  /**
   * Sends a command of a family. Family ids are dynamic: if the kernel answers ENOENT (the
   * module was reloaded and the id changed) the id is looked up again and the command retried
   * once.
   */
  async request(
    familyName: string,
    cmd: number,
    attributes: Buffer,
    options: GenlRequestOptions,
  ): Promise<GenlReply[]> {
    for (let attempt = 0; ; attempt++) {
      const family = await this.family(familyName);
      const payload = encodeGenl(cmd, family.version, attributes);
      try {
        const replies = options.dump
          ? await this.socket.dump(family.id, payload, options)
          : await this.socket.request(family.id, payload, options);
        return replies.map(decodeGenl);
      } catch (error) {
        if (
          attempt === 0 &&
          isNetlinkError(error, 'ENOENT') &&
          !(error as NetlinkError).kernelMessage
        ) {
          this.families.delete(familyName);
          continue;
        }
        throw error;
      }
    }
  }
}
