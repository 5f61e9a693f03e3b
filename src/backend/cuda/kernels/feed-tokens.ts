// feedTokens: a pipelined serving step's rows fed from the previous step's samples on the device
// (backend.ts has the contract): the host launches step i + 1 before it has read step i's tokens, so the
// rows that continue a request take their token from step i's sampleTokens output here, inside step
// i + 1's graph, ahead of the embedding.
//
// Thread mapping: one block; its threads walk the rows (a step has at most a few thousand).
// Bytes: rows × 2 int32 read (from, and sampled where fed), the fed rows' tokens written.

import type { FeedTokensArgs } from '../../backend.js';
import { checkFeedTokens } from '../../op-checks/index.js';
import { OpCheck } from '../../validate.js';
import type { KernelHost, KernelSource } from '../runtime/kernel.js';
import { arg } from '../runtime/kernel.js';
import { DEVICE_LIB } from './device-lib.js';
import { devicePtr, kernelIdentifier } from './row-kernels.js';

const THREADS = 256;
const KEY = 'feed_tokens';

export function feedTokensSource(): KernelSource {
  const name = kernelIdentifier(KEY);
  const source = String.raw`${DEVICE_LIB}
// sampled [n]; from, tokens [rows]. A row whose from is negative (or, a caller's bug, ≥ n) keeps its token.
extern "C" __global__ void __launch_bounds__(${THREADS}) ${name}(
    const int* __restrict__ sampled, const int* __restrict__ from, int* __restrict__ tokens, int n, int rows) {
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const int i = from[r];
    if (i >= 0 && i < n) tokens[r] = sampled[i];
  }
}
`;
  return { name, source };
}

export function feedTokens(host: KernelHost, args: FeedTokensArgs): void {
  const c = new OpCheck('feedTokens', 'cuda');
  const t = checkFeedTokens(c, args);
  if (t.rows === 0) return;
  const ptr = (name: string, x: typeof t.sampled) => devicePtr(c, name, x);
  host.kernel(KEY, feedTokensSource).launch({ grid: 1, block: THREADS }, [
    arg.ptr(ptr('sampled', t.sampled)), arg.ptr(ptr('from', t.from)), arg.ptr(ptr('tokens', t.tokens)), arg.i32(t.n), arg.i32(t.rows),
  ]);
}

export function catalog(): KernelSource[] {
  return [feedTokensSource()];
}
