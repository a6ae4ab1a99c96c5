/**
 * Peer names (issue 31): what an operator calls a peer ("laptop of Ana"), shown in the list and
 * settable at create and by PATCH .../name.
 *
 * Contract. A name is 1 to 64 characters (code points) without control characters (C0, DEL,
 * C1); null is no name. The names the daemon serves are one immutable map, replaced whole at
 * each change (copy on write), so a snapshot keeps the names it was read with while a later
 * change makes a new map. With a state directory the journal keeps them (a `name` record and a
 * peer record's `n`), and a start loads them back from it; without one they live as long as the
 * daemon runs (a restart without a state dir forgets them: the kernel keeps no name).
 */
import { ValidationError } from './errors';

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
}

export class PeerNames {
  private map: ReadonlyMap<string, string> = new Map();

  /** The names now, by public key: never changed in place (a change makes a new map). */
  get current(): ReadonlyMap<string, string> {
    return this.map;
  }

  get(publicKey: string): string | null {
    return this.map.get(publicKey) ?? null;
  }

  /** Names the peer (null: no name). */
  set(publicKey: string, name: string | null): void {
    if ((this.map.get(publicKey) ?? null) === name) return;
    const next = new Map(this.map);
    if (name === null) next.delete(publicKey);
    else next.set(publicKey, name);
    this.map = next;
  }

  /** Replaces every name (a start loading what the journal kept). */
  load(names: Iterable<readonly [string, string]>): void {
    this.map = new Map(names);
  }

  /**
   * Settles as `ready` does, having loaded the names of the journal's peers once it fulfilled
   * (the restore done); without a journal nothing is loaded.
   */
  loadAfter<T>(
    ready: Promise<T>,
    journal: { state: { peers: ReadonlyMap<string, { name?: string }> } } | null,
  ): Promise<T> {
    return ready.then((value) => {
      if (journal !== null) {
        const kept: Array<[string, string]> = [];
        for (const [key, peer] of journal.state.peers) {
          if (peer.name !== undefined) kept.push([key, peer.name]);
        }
        this.load(kept);
      }
      return value;
    });
  }
}
