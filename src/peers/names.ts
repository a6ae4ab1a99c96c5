/**
 * Peer names (issue 31): what an operator calls a peer ("laptop of Ana"), shown in the list and
 * settable at create and by PATCH .../name.
 *
 * Contract. A name is 1 to 64 characters (code points) without control characters (C0, DEL,
 * C1); null is no name. The names the daemon serves are one immutable map, replaced whole at
 * each change (copy on write), so a snapshot keeps the names it was read with while a later
 * change makes a new map. The kernel keeps them too (src/kernel/names: one nf_tables set element
 * per named peer, the name in its userdata), written by the change that sets the name, in the
 * same kernel step; so a name also carries a byte bound, NAME_MAX_BYTES of UTF-8 (the userdata's
 * 256 bytes less the owner's key), which only a name of many 4-byte characters reaches. The map
 * is what the list shows: the kernel's set is read once at start (without a state directory,
 * `loadAfter`) and never by a list; every later change is the daemon's own and updates both.
 * With a state directory the journal keeps them (a `name` record and a peer record's `n`), a
 * start loads them from it, and the restore puts them back into the kernel.
 */
import { NAME_MAX_BYTES } from '../kernel/names';
import { ValidationError } from './errors';
import { PerPeerMap } from './per-peer-map';

export { NAME_MAX_BYTES };
export const NAME_MAX_LENGTH = 64;
/** For JSON schemas: no C0 controls, DEL or C1 controls (the `u` flag ajv compiles with). */
export const NAME_PATTERN = '^[^\\u0000-\\u001f\\u007f-\\u009f]+$';
const NAME_RE = new RegExp(NAME_PATTERN, 'u');

/** Throws ValidationError (400, `details` naming `field`) unless `name` is a valid name. */
export function checkName(name: string | null, field = 'name'): void {
  if (name === null) return;
  const length = typeof name === 'string' ? [...name].length : 0;
  if (typeof name !== 'string' || length < 1 || length > NAME_MAX_LENGTH || !NAME_RE.test(name)) {
    throw new ValidationError(
      `Invalid request body: ${field} must be 1 to ${NAME_MAX_LENGTH} characters without control characters, or null`,
      [
        {
          field: `/${field}`,
          message: `must be 1 to ${NAME_MAX_LENGTH} characters without control characters`,
        },
      ],
    );
  }
  if (Buffer.byteLength(name, 'utf8') > NAME_MAX_BYTES) {
    throw new ValidationError(
      `Invalid request body: ${field} must be at most ${NAME_MAX_BYTES} bytes in UTF-8 (the kernel keeps a name with its owner's key in 256 bytes)`,
      [{ field: `/${field}`, message: `must be at most ${NAME_MAX_BYTES} bytes in UTF-8` }],
    );
  }
}

/** The names now, by public key (./per-peer-map.ts). */
export class PeerNames extends PerPeerMap<string> {
  /**
   * Settles as `ready` does, having loaded the names once it fulfilled (the restore done): the
   * journal's peers' names, or without a journal what `fromKernel` reads (the kernel's names set).
   */
  loadAfter<T>(
    ready: Promise<T>,
    journal: { state: { peers: ReadonlyMap<string, { name?: string }> } } | null,
    fromKernel: () => Promise<ReadonlyMap<string, string>>,
  ): Promise<T> {
    return ready.then(async (value) => {
      if (journal !== null) {
        const kept: Array<[string, string]> = [];
        for (const [key, peer] of journal.state.peers) {
          if (peer.name !== undefined) kept.push([key, peer.name]);
        }
        this.load(kept);
      } else {
        this.load(await fromKernel());
      }
      return value;
    });
  }
}
