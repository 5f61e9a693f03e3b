// The optional tensors of a call that were given, as parallel name and tensor lists, so that an
// argument left out joins no dtype or shape check.

export function present<T>(pairs: readonly (readonly [string, T | undefined])[]): [string[], T[]] {
  const given = pairs.filter((p): p is readonly [string, T] => p[1] !== undefined);
  return [given.map((p) => p[0]), given.map((p) => p[1])];
}
