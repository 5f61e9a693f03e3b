// Arena checks, shared by the backends: the arena's size, and each view's byte offset (aligned),
// shape and dtype, which must fit inside the arena.

import type { DType } from '../../dtype.js';
import { byteSize, DTYPES } from '../../dtype.js';
import { ArgumentError, DTypeError, ShapeError } from '../../errors.js';
import { formatShape, shapeNumel } from '../../tensor.js';
import { ARENA_ALIGNMENT } from '../backend.js';

/** A non-negative safe integer number of bytes. */
export function checkArenaBytes(bytes: number): number {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new ArgumentError(`createArena: 'bytes' must be a non-negative integer, got ${bytes}`);
  return bytes;
}

/** The view's size in bytes, after checking that it is aligned and fits in an arena of `arenaBytes`. */
export function checkArenaView(arenaBytes: number, freed: boolean, byteOffset: number, shape: readonly number[], dtype: DType): number {
  if (freed) throw new ArgumentError(`arena.view: the arena (${arenaBytes} bytes) was freed`);
  if (!DTYPES.includes(dtype)) throw new DTypeError(`arena.view: unknown dtype '${String(dtype)}': expected one of ${DTYPES.join(', ')}`);
  if (!Number.isSafeInteger(byteOffset) || byteOffset < 0 || byteOffset % ARENA_ALIGNMENT !== 0) {
    throw new ArgumentError(`arena.view: 'byteOffset' must be a non-negative multiple of ${ARENA_ALIGNMENT}, got ${byteOffset}`);
  }
  if (!Array.isArray(shape) || shape.some((d) => !Number.isSafeInteger(d) || d < 0)) {
    throw new ShapeError(`arena.view: 'shape' ${formatShape(shape)} must have non-negative integer dimensions`);
  }
  const bytes = shapeNumel(shape) * byteSize(dtype);
  if (byteOffset + bytes > arenaBytes) {
    throw new ShapeError(`arena.view: 'shape' ${formatShape(shape)} ${dtype} (${bytes} bytes) at byte offset ${byteOffset} ends at ${byteOffset + bytes}, past the arena's ${arenaBytes} bytes`);
  }
  return bytes;
}
