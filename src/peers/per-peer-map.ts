/**
 * One value per peer, by public key, that readers may hold while it changes: the map handed out
 * by `current` is never changed in place (a change makes a new map), so a read that took it
 * keeps a consistent picture. What the service keeps this way: names (./names.ts) and expiry
 * instants (./expiry.ts). `set(key, null)` removes the peer's value; setting the value it already
 * has makes no new map.
 */
export class PerPeerMap<V> {
  private map: ReadonlyMap<string, V> = new Map();

  /** The values now, by public key: never changed in place. */
  get current(): ReadonlyMap<string, V> {
    return this.map;
  }

  get(publicKey: string): V | null {
    return this.map.get(publicKey) ?? null;
  }

  /** Sets the peer's value (null: none). */
  set(publicKey: string, value: V | null): void {
    if ((this.map.get(publicKey) ?? null) === value) return;
    const next = new Map(this.map);
    if (value === null) next.delete(publicKey);
    else next.set(publicKey, value);
    this.map = next;
  }

  /** Replaces every value (a start loading what the journal or the kernel kept). */
  load(values: Iterable<readonly [string, V]>): void {
    this.map = new Map(values);
  }
}
