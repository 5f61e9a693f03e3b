// The cross-entropy kernel family without a GPU: spec
// keys tell specs apart, launchers reject bad arguments naming the op, and launches are one block
// per row with the ignore rule, smoothing and vector width we expect.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as ce from '../../../../src/backend/cuda/kernels/cross-entropy.js';
import { FuseformerError } from '../../../../src/errors.js';
import { argValue, deviceTensor, RecordingHost } from './launch-helpers.js';

test('catalog kernels have distinct names, each defined in its source', () => {
  const sources = ce.catalog();
  assert.equal(new Set(sources.map((s) => s.name)).size, sources.length);
  for (const s of sources) assert.match(s.source, new RegExp(`extern "C" __global__ void KERNEL_BOUNDS ${s.name}\\(`));
});

test('spec keys differ in every field', () => {
  const base: ce.CrossEntropySpec = { dtype: 'bf16', vocab: 50257, classes: 50257, vec: 8, threads: 512, smoothing: false };
  const variants: ce.CrossEntropySpec[] = [
    base, { ...base, dtype: 'f16' }, { ...base, vocab: 50304, classes: 50304 }, { ...base, vocab: 50304 }, { ...base, classes: 50000 },
    { ...base, vec: 1 }, { ...base, threads: 256 }, { ...base, smoothing: true },
  ];
  assert.equal(new Set(variants.map(ce.crossEntropyForwardKey)).size, variants.length);
  assert.equal(new Set(variants.map(ce.crossEntropyBackwardKey)).size, variants.length);
  assert.notEqual(ce.crossEntropyForwardKey(base), ce.crossEntropyBackwardKey(base));
});

test('block size grows with the vocabulary up to 512', () => {
  assert.equal(ce.crossEntropyThreads('bf16', 50257), 512);
  assert.equal(ce.crossEntropyThreads('bf16', 128256), 512);
  assert.equal(ce.crossEntropyThreads('f32', 1000), 64);
  assert.equal(ce.crossEntropyThreads('f16', 3), 64);
});

function tensors(rows: number, V: number, dtype: 'f32' | 'f16' | 'bf16' = 'bf16') {
  return { logits: deviceTensor([rows, V], dtype), targets: deviceTensor([rows], 'i32'), loss: deviceTensor([rows], 'f32'), lse: deviceTensor([rows], 'f32') };
}

test('crossEntropyForward: one block per row, smoothing and ignoreIndex passed through', () => {
  const host = new RecordingHost();
  ce.crossEntropyForward(host, { ...tensors(16384, 50257), labelSmoothing: 0.1, ignoreIndex: -100 });
  const l = host.launches[0]!;
  assert.equal(l.key, 'cross_entropy_forward.bf16.v50257.x8.t512.smooth');
  assert.equal(l.config.grid, 16384);
  assert.equal(l.config.block, 512);
  assert.ok(Math.abs((argValue(l, 4, 'f32') as number) - 0.1) < 1e-12);
  assert.equal(argValue(l, 5, 'i32'), 1);
  assert.equal(argValue(l, 6, 'i32'), -100);
  // Without ignoreIndex no row is ignored: the flag is off (no sentinel value).
  ce.crossEntropyForward(host, tensors(4, 128256));
  const plain = host.launches[1]!;
  assert.equal(plain.key, 'cross_entropy_forward.bf16.v128256.x8.t512');
  assert.equal(argValue(plain, 5, 'i32'), 0);
});

test('crossEntropyBackward: in place keeps 16-byte vectors; a differently misaligned dLogits falls back to scalars', () => {
  const host = new RecordingHost();
  const t = tensors(8, 50257, 'f16');
  ce.crossEntropyBackward(host, { logits: t.logits, targets: t.targets, lse: t.lse, dLogits: t.logits, gradScale: 0.5, ignoreIndex: -100 });
  assert.equal(host.launches[0]!.key, 'cross_entropy_backward.f16.v50257.x8.t512');
  assert.equal(argValue(host.launches[0]!, 0, 'ptr'), argValue(host.launches[0]!, 3, 'ptr'));
  assert.equal(argValue(host.launches[0]!, 4, 'f32'), 0.5);
  const shifted = deviceTensor([8, 50257], 'f16', 0x5000_0002n);
  ce.crossEntropyBackward(host, { logits: t.logits, targets: t.targets, lse: t.lse, dLogits: shifted, gradScale: 0.5 });
  assert.equal(host.launches[1]!.key, 'cross_entropy_backward.f16.v50257.x1.t512');
  const pair = deviceTensor([8, 50257], 'f16', 0x5000_0004n);
  ce.crossEntropyBackward(host, { logits: t.logits, targets: t.targets, lse: t.lse, dLogits: pair, gradScale: 0.5 });
  assert.equal(host.launches[2]!.key, 'cross_entropy_backward.f16.v50257.x2.t512');
});

test('a padded vocabulary bakes C and V into the key and the source; unpadded keys are unchanged', () => {
  const host = new RecordingHost();
  const t = tensors(8, 50304);
  ce.crossEntropyForward(host, { ...t, classes: 50257, labelSmoothing: 0.1 });
  assert.equal(host.launches[0]!.key, 'cross_entropy_forward.bf16.v50304.c50257.x8.t512.smooth');
  ce.crossEntropyBackward(host, { logits: t.logits, targets: t.targets, lse: t.lse, dLogits: t.logits, gradScale: 1, classes: 50257 });
  assert.equal(host.launches[1]!.key, 'cross_entropy_backward.bf16.v50304.c50257.x8.t512');
  ce.crossEntropyForward(host, { ...t, classes: 50304 });
  assert.equal(host.launches[2]!.key, 'cross_entropy_forward.bf16.v50304.x8.t512');
  const source = ce.crossEntropyBackwardSource(ce.planCrossEntropyForward('f32', 1024, true, 1001)).source;
  assert.match(source, /constexpr int V = 1024;/);
  assert.match(source, /constexpr int C = 1001;/);
  assert.match(source, /constexpr bool PADDED = true;/);
  assert.match(ce.crossEntropyForwardSource(ce.planCrossEntropyForward('f32', 1000, true)).source, /constexpr bool PADDED = false;/);
});

test('logits with leading dimensions count as rows; empty rows launch nothing', () => {
  const host = new RecordingHost();
  ce.crossEntropyForward(host, { logits: deviceTensor([4, 8, 1000], 'f32'), targets: deviceTensor([32], 'i32'), loss: deviceTensor([32], 'f32'), lse: deviceTensor([32], 'f32') });
  assert.equal(host.launches[0]!.config.grid, 32);
  ce.crossEntropyForward(host, tensors(0, 1000));
  assert.equal(host.launches.length, 1);
});

test('launchers reject bad arguments with messages naming the op', () => {
  const host = new RecordingHost();
  const t = tensors(8, 1000, 'f16');
  const back = { logits: t.logits, targets: t.targets, lse: t.lse, dLogits: deviceTensor([8, 1000], 'f16'), gradScale: 1 };
  const bad: [string, () => void, RegExp][] = [
    ['targets dtype', () => ce.crossEntropyForward(host, { ...t, targets: deviceTensor([8], 'f32') }), /^crossEntropyForward: 'targets' has dtype f32 but expected i32/],
    ['targets rows', () => ce.crossEntropyForward(host, { ...t, targets: deviceTensor([9], 'i32') }), /^crossEntropyForward: 'targets' has shape \[9\]/],
    ['loss dtype', () => ce.crossEntropyForward(host, { ...t, loss: deviceTensor([8], 'f16') }), /^crossEntropyForward: 'loss' has dtype f16 but expected f32/],
    ['smoothing', () => ce.crossEntropyForward(host, { ...t, labelSmoothing: 1.5 }), /^crossEntropyForward: 'labelSmoothing' must be in \[0, 1\)/],
    ['ignoreIndex', () => ce.crossEntropyForward(host, { ...t, ignoreIndex: 0.5 }), /^crossEntropyForward: 'ignoreIndex' must be an integer/],
    ['empty vocabulary', () => ce.crossEntropyForward(host, tensors(8, 0)), /^crossEntropyForward: 'logits' has no classes \(V = 0\)/],
    ['integer logits', () => ce.crossEntropyForward(host, { ...t, logits: deviceTensor([8, 1000], 'i32') }), /^crossEntropyForward: 'logits' has dtype i32/],
    ['dLogits dtype', () => ce.crossEntropyBackward(host, { ...back, dLogits: deviceTensor([8, 1000], 'bf16') }), /^crossEntropyBackward: 'dLogits' has dtype bf16/],
    ['dLogits shape', () => ce.crossEntropyBackward(host, { ...back, dLogits: deviceTensor([8, 999], 'f16') }), /^crossEntropyBackward: 'dLogits' has shape \[8, 999\]/],
    ['gradScale', () => ce.crossEntropyBackward(host, { ...back, gradScale: Infinity }), /^crossEntropyBackward: 'gradScale' must be a finite number/],
    ['lse rows', () => ce.crossEntropyBackward(host, { ...back, lse: deviceTensor([7], 'f32') }), /^crossEntropyBackward: 'lse' has shape \[7\]/],
    ['classes 0', () => ce.crossEntropyForward(host, { ...t, classes: 0 }), /^crossEntropyForward: 'classes' must be an integer >= 1, got 0/],
    ['classes fraction', () => ce.crossEntropyBackward(host, { ...back, classes: 999.5 }), /^crossEntropyBackward: 'classes' must be an integer >= 1/],
    ['classes above V', () => ce.crossEntropyBackward(host, { ...back, classes: 1001 }), /^crossEntropyBackward: 'classes' must be at most the logits' last dimension \(1000\), got 1001/],
  ];
  for (const [what, call, message] of bad) {
    assert.throws(call, (e: unknown) => e instanceof FuseformerError && message.test(e.message), what);
  }
  assert.equal(host.launches.length, 0);
});

test('crossEntropyForward with dLogits: one fused launch where the row fits in shared memory, else forward then backward', () => {
  const host = new RecordingHost();
  // GPT-2's padded vocabulary, in place: one launch, the row's classes (+ a vector) in shared memory.
  const gpt2 = tensors(16384, 50304);
  ce.crossEntropyForward(host, { ...gpt2, classes: 50257, dLogits: gpt2.logits, gradScale: 0.5 });
  assert.equal(host.launches.length, 1);
  const fused = host.launches[0]!;
  assert.equal(fused.key, 'cross_entropy_forward.bf16.v50304.c50257.x8.t512.fused');
  assert.equal(fused.config.sharedBytes, Math.ceil(((50257 + 8) * 2) / 16) * 16);
  assert.equal(argValue(fused, 7, 'ptr'), gpt2.logits.ptr);
  assert.equal(argValue(fused, 8, 'f32'), 0.5);
  assert.match(fused.source, /extern __shared__ __align__\(16\) unsigned char row_smem\[\];/);
  // Llama's 128256 classes need 250 KiB: the forward kernel, then the backward kernel.
  host.launches.length = 0;
  const llama = tensors(4, 128256);
  ce.crossEntropyForward(host, { ...llama, dLogits: llama.logits, gradScale: 1 });
  assert.deepEqual(host.launches.map((l) => l.key.split('.')[0]), ['cross_entropy_forward', 'cross_entropy_backward']);
  assert.ok(!host.launches[0]!.key.endsWith('.fused'));
  // A dLogits at another misalignment cannot share the staged vectors: the two kernels too.
  host.launches.length = 0;
  const small = tensors(8, 1000);
  ce.crossEntropyForward(host, { ...small, dLogits: deviceTensor([8, 1000], 'bf16', 0x9000_0002n), gradScale: 1 });
  assert.deepEqual(host.launches.map((l) => l.key.split('.')[0]), ['cross_entropy_forward', 'cross_entropy_backward']);
});

test('crossEntropyForward: dLogits needs gradScale, and gradScale needs dLogits', () => {
  const host = new RecordingHost();
  const t = tensors(4, 1000);
  assert.throws(() => ce.crossEntropyForward(host, { ...t, dLogits: t.logits }), /crossEntropyForward.*'dLogits' needs 'gradScale'/);
  assert.throws(() => ce.crossEntropyForward(host, { ...t, gradScale: 1 }), /crossEntropyForward.*'gradScale' was given without 'dLogits'/);
  assert.throws(() => ce.crossEntropyForward(host, { ...t, dLogits: deviceTensor([4, 999], 'bf16'), gradScale: 1 }), /crossEntropyForward.*dLogits/);
});
