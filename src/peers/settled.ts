/**
 * Promise.all whose failure does not depend on timing: every read runs to its end, and the
 * error thrown is that of the first failed read in argument order. Callers put the read that
 * decides the answer first (the WireGuard device: with the interface gone every read fails,
 * and the answer must be INTERFACE_MISSING whichever failure arrived first).
 */
export async function allInOrder<T extends readonly unknown[]>(reads: {
  readonly [K in keyof T]: Promise<T[K]>;
}): Promise<T> {
  const results = await Promise.allSettled(reads);
  const values: unknown[] = [];
  for (const result of results) {
    if (result.status === 'rejected') throw result.reason;
    values.push(result.value);
  }
  return values as unknown as T;
}
