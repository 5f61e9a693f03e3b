// Kernel timelines' host side (runtime/timeline.ts): tags, the NVRTC options, parsing a buffer of stamps
// and the arithmetic on them. The device side compiles in catalog.test.ts; it runs on the GPU only.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DeviceBlock } from '../../../src/backend/cuda/runtime/tensor.js';
import { chainTimes, KernelTimeline, kernelTag, parseTimeline, stepChains, summarizeChains, summarizeRoles, timelineOptions, timelineRequested } from '../../../src/backend/cuda/runtime/timeline.js';
import type { CudaDriver } from '../../../src/cuda/driver.js';
import { CudaError } from '../../../src/errors.js';

test('a kernel tag is a stable 31-bit hash of its name, carried by the NVRTC options', () => {
  const tag = kernelTag('gemv_bf16_m1_k2048');
  assert.equal(tag, kernelTag('gemv_bf16_m1_k2048'));
  assert.notEqual(tag, kernelTag('gemv_bf16_m1_k2049'));
  assert.ok(Number.isInteger(tag) && tag >= 0 && tag < 2 ** 31);
  assert.deepEqual(timelineOptions('gemv_bf16_m1_k2048'), ['-DFUSEFORMER_TIMELINE', `-DFUSEFORMER_KERNEL_TAG=${tag}ull`]);
  assert.equal(timelineRequested({ FUSEFORMER_TIMELINE: '1' }), true);
  assert.equal(timelineRequested({}), false);
});

/** A buffer as the device writes it: [taken, capacity, (ns, tag) × capacity]. */
function buffer(taken: number, capacity: number, pairs: [number, number][]): BigUint64Array {
  const words = new BigUint64Array(2 + 2 * capacity);
  words[0] = BigInt(taken);
  words[1] = BigInt(capacity);
  pairs.forEach(([ns, tag], i) => { words[2 + 2 * i] = BigInt(ns); words[3 + 2 * i] = BigInt(tag); });
  return words;
}

test('parseTimeline orders the stamps by time, names them by tag and counts the ones past the capacity', () => {
  const names = new Map([[kernelTag('a'), 'a'], [kernelTag('b'), 'b']]);
  // Slots are taken in arrival order, which two blocks may race for: the times decide.
  const { stamps, dropped } = parseTimeline(buffer(5, 3, [[1_000_500, kernelTag('b')], [1_000_000, kernelTag('a')], [1_002_000, 77]]), names);
  assert.deepEqual(stamps, [{ ns: 0, kernel: 'a' }, { ns: 500, kernel: 'b' }, { ns: 2000, kernel: '(unknown tag 77)' }]);
  assert.equal(dropped, 2);
  assert.deepEqual(parseTimeline(buffer(0, 4, []), names), { stamps: [], dropped: 0 });
  assert.throws(() => parseTimeline(new BigUint64Array(1), names), /at least 2 words/);
});

test('chain times, steps cut at their first kernel, and the per-kernel summary', () => {
  const at = (us: number, kernel: string) => ({ ns: us * 1000, kernel });
  // Two complete steps (embed, gemv ×2, attention), then the third step's embed and a partial one.
  const stamps = [at(0, 'embed'), at(2, 'gemv'), at(7, 'attention'), at(10, 'gemv'), at(14, 'embed'), at(15, 'gemv'), at(21, 'attention'), at(23, 'gemv'), at(30, 'embed'), at(31, 'gemv')];
  assert.deepEqual(chainTimes(stamps.slice(0, 3)), [{ kernel: 'embed', us: 2 }, { kernel: 'gemv', us: 5 }]);
  const steps = stepChains(stamps, (name) => name === 'embed');
  assert.equal(steps.length, 2, 'only steps that end at the next embed');
  assert.deepEqual(steps[0]!.map((c) => c.us), [2, 5, 3, 4]);
  assert.deepEqual(steps[1]!.map((c) => c.us), [1, 6, 2, 7]);
  const { kernels, stepUs } = summarizeChains(steps);
  assert.deepEqual(stepUs, [14, 16]);
  assert.deepEqual(kernels.map((k) => k.kernel), ['embed', 'gemv', 'attention']);
  const gemv = kernels.find((k) => k.kernel === 'gemv')!;
  assert.equal(gemv.perStep, 2);
  assert.equal(gemv.stepUs, (5 + 4 + 6 + 7) / 2);
  assert.equal(gemv.medianUs, 6, 'the median of 4, 5, 6, 7 (upper middle)');
});

test('summarizeRoles splits a kernel run twice a layer into its two products, with the LM head past the layers', () => {
  // Two layers: norm, gemm (O), norm, gemm (down) each; then the LM head on the same gemm kernel; then sampling.
  const step = (o: number, down: number, head: number) => [
    { kernel: 'embed', us: 1 },
    { kernel: 'norm', us: 2 }, { kernel: 'gemm', us: o }, { kernel: 'norm', us: 3 }, { kernel: 'gemm', us: down },
    { kernel: 'norm', us: 2 }, { kernel: 'gemm', us: o + 1 }, { kernel: 'norm', us: 3 }, { kernel: 'gemm', us: down + 1 },
    { kernel: 'gemm', us: head }, { kernel: 'sample', us: 9 },
  ];
  const roles = summarizeRoles([step(5, 10, 100), step(6, 12, 101), step(5, 11, 99)], 2);
  const of = (kernel: string, role: number | 'after') => roles.find((r) => r.kernel === kernel && r.role === role);
  assert.deepEqual(roles.map((r) => `${r.kernel}:${r.role}`), ['embed:0', 'norm:0', 'gemm:0', 'norm:1', 'gemm:1', 'gemm:after', 'sample:0']);
  assert.deepEqual([of('gemm', 0)!.perStep, of('gemm', 0)!.medianUs], [2, 6], 'O: 5, 6, 6, 7, 5, 6 → 6');
  assert.deepEqual([of('gemm', 1)!.perStep, of('gemm', 1)!.medianUs], [2, 12], 'down: 10, 11, 12, 13, 11, 12 → 12');
  assert.deepEqual([of('gemm', 'after')!.perStep, of('gemm', 'after')!.medianUs], [1, 100]);
  assert.deepEqual([of('norm', 0)!.medianUs, of('norm', 1)!.medianUs], [2, 3]);
  assert.throws(() => summarizeRoles([], 0), /layers must be a positive integer, got 0/);
});

test('KernelTimeline points every timeline module at its buffer, skips modules without the variable, and reads the stamps back', () => {
  // A fake driver: device memory as a map of addresses to bytes; modules 1 and 2 have the variable, 3 not.
  const memory = new Map<bigint, Uint8Array>();
  const variables = new Map<bigint, bigint>([[1n, 0x100n], [2n, 0x200n]]);
  const driver = {
    memcpyHostToDevice: (dst: bigint, src: Uint8Array) => { memory.set(dst, src.slice()); },
    memcpyDeviceToHost: (dst: Uint8Array, src: bigint) => { dst.set(memory.get(src)!.subarray(0, dst.byteLength)); },
    moduleGetGlobal: (module: bigint) => {
      const ptr = variables.get(module);
      if (ptr === undefined) throw new CudaError('cuModuleGetGlobal_v2', 500, 'CUDA_ERROR_NOT_FOUND');
      return { ptr, bytes: 8 };
    },
  } as unknown as CudaDriver;
  let allocations = 0;
  const timeline = new KernelTimeline(driver, (bytes) => ({ ptr: BigInt(0x1000 * ++allocations), bytes }) as unknown as DeviceBlock);
  const pointer = (variable: bigint) => new BigUint64Array(memory.get(variable)!.slice().buffer)[0];
  timeline.add(1n, 'embed', true);
  assert.equal(memory.size, 0, 'no buffer yet: nothing to point at');
  timeline.arm(4);
  assert.equal(pointer(0x100n), 0x1000n);
  assert.deepEqual([...new BigUint64Array(memory.get(0x1000n)!.slice().buffer)], [0n, 4n], 'emptied, capacity 4');
  timeline.add(3n, 'no-device-lib', true);  // NOT_FOUND: skipped
  timeline.add(2n, 'gemv', false);          // during a capture: pointed at the next arm
  assert.equal(memory.has(0x200n), false);
  timeline.arm(2);
  assert.equal(pointer(0x200n), 0x1000n, 'a smaller capacity reuses the buffer');
  // The device's stamps: 3 taken, 2 kept.
  const words = new BigUint64Array(2 + 2 * 2);
  words.set([3n, 2n, 5000n, BigInt(kernelTag('gemv')), 2000n, BigInt(kernelTag('embed'))]);
  memory.set(0x1000n, new Uint8Array(words.buffer));
  assert.deepEqual(timeline.read(), { stamps: [{ ns: 0, kernel: 'embed' }, { ns: 3000, kernel: 'gemv' }], dropped: 1 });
  const failing = { ...driver, moduleGetGlobal: () => { throw new CudaError('cuModuleGetGlobal_v2', 201, 'CUDA_ERROR_INVALID_CONTEXT'); } } as unknown as CudaDriver;
  const broken = new KernelTimeline(failing, (bytes) => ({ ptr: 0x9000n, bytes }) as unknown as DeviceBlock);
  broken.add(1n, 'embed', true);
  assert.throws(() => broken.arm(1), /CUDA_ERROR_INVALID_CONTEXT/, 'other driver errors are not swallowed');
});
