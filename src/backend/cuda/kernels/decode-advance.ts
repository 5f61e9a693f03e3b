// decodeAdvance: a serving step's decode rows moved on to the next step on the device (backend.ts has
// the contract), so the serving engine replays several decode steps back to back and reads their
// tokens once (multi-step decoding: the host's per-step work — scheduling, layout, uploads, the sync —
// is paid once for k steps).
//
// Thread mapping: one block; its threads walk the rows. Every thread reads the step counter before the
// barrier, and thread 0 advances it after, so no thread sees the new value.
// Bytes: rows × 7 int32 (read sampled and the two positions, write the record, the token and the two
// positions back) + the counter.

import type { DecodeAdvanceArgs } from '../../backend.js';
import { checkDecodeAdvance } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB } from './device-lib.js';
import { devicePtr, kernelIdentifier } from './row-kernels.js';

const THREADS = 256;
const KEY = 'decode_advance';

export function decodeAdvanceSource(): KernelSource {
  const name = kernelIdentifier(KEY);
  const source = String.raw`${DEVICE_LIB}
// sampled [>= rows]; tokens, positions, cache_positions [rows]; record [steps, width]; step [1].
extern "C" __global__ void __launch_bounds__(${THREADS}) ${name}(
    const int* __restrict__ sampled, int* __restrict__ tokens, int* __restrict__ positions, int* __restrict__ cache_positions,
    int* __restrict__ record, int* __restrict__ step, int rows, int steps, int width) {
  const int idx = *step;
  __syncthreads();  // every thread has read the counter before thread 0 moves it
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const int token = sampled[r];
    if (idx >= 0 && idx < steps) record[(long long)idx * width + r] = token;
    if (cache_positions[r] >= 0) {
      tokens[r] = token;
      positions[r] += 1;
      cache_positions[r] += 1;
    }
  }
  if (threadIdx.x == 0) *step = idx + 1;
}
`;
  return { name, source };
}

export function decodeAdvance(host: KernelHost, args: DecodeAdvanceArgs): void {
  const c = new OpCheck('decodeAdvance', 'cuda');
  const t = checkDecodeAdvance(c, args);
  const ptr = (name: string, x: typeof t.sampled) => devicePtr(c, name, x);
  host.kernel(KEY, decodeAdvanceSource).launch({ grid: 1, block: THREADS }, [
    arg.ptr(ptr('sampled', t.sampled)), arg.ptr(ptr('tokens', t.tokens)), arg.ptr(ptr('positions', t.positions)), arg.ptr(ptr('cachePositions', t.cachePositions)),
    arg.ptr(ptr('record', t.record)), arg.ptr(ptr('step', t.step)),
    arg.i32(t.rows), arg.i32(t.steps), arg.i32(t.width),
  ]);
}

export function catalog(): KernelSource[] {
  return [decodeAdvanceSource()];
}
