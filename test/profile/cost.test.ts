import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { DType } from '../../src/dtype.js';
import {
  describeCall, FLASH_FORWARD_FLOPS, isGemmOp, NON_KERNEL_MEMBERS, OP_COSTS, opCost, opDeviceInputs, visiblePairs,
} from '../../src/profile/cost.js';
import { Tensor } from '../../src/tensor.js';
import { freshSeed, Rng } from '../../src/testing/random.js';

/** Shapes and dtypes are all the cost model reads: no storage needed. */
class ShapeOnly extends Tensor {
  constructor(shape: readonly number[], dtype: DType) { super('cpu', shape, dtype); }
}
const t = (shape: number[], dtype: DType = 'bf16') => new ShapeOnly(shape, dtype);

/** The member names of `interface Backend` as written in src/backend/backend.ts. */
function backendMembers(): string[] {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
  const source = readFileSync(join(root, 'src', 'backend', 'backend.ts'), 'utf8');
  const start = source.indexOf('export interface Backend {');
  assert.ok(start >= 0, 'backend.ts declares `export interface Backend {`');
  const end = source.indexOf('\n}', start);
  const body = source.slice(start, end).split('\n').slice(1);
  const names = body.map((line) => /^ {2}(?:readonly\s+)?([A-Za-z_]\w*)\s*[(:?]/.exec(line)?.[1]).filter((n): n is string => n !== undefined);
  assert.ok(names.length > 30, `found ${names.length} members`);
  return names;
}

test('every Backend member is either a costed op or a member that launches nothing', () => {
  const members = backendMembers();
  const costed = new Set(Object.keys(OP_COSTS)), silent = new Set<string>(NON_KERNEL_MEMBERS);
  const missing = members.filter((m) => !costed.has(m) && !silent.has(m));
  assert.deepEqual(missing, [], `ops without a cost entry in src/profile/cost.ts: ${missing.join(', ')}`);
  const stale = [...costed, ...silent].filter((m) => !members.includes(m));
  assert.deepEqual(stale, [], `cost entries for members Backend no longer has: ${stale.join(', ')}`);
  assert.deepEqual([...costed].filter((m) => silent.has(m)), []);
  // The CPU backend implements each costed op as a method.
  const cpu = new CpuBackend() as unknown as Record<string, unknown>;
  for (const op of costed) assert.equal(typeof cpu[op], 'function', op);
  assert.ok(isGemmOp('gemm') && isGemmOp('batchedGemm') && !isGemmOp('layerNormForward') && !isGemmOp('flashAttentionForward'));
});

test('GEMM by hand: 2·M·N·K plus the epilogue; operands read once, the output written once', () => {
  // [128, 64] · [256, 64]ᵀ + bias [256], bf16.
  const a = t([128, 64]), b = t([256, 64]), out = t([128, 256]), bias = t([256]);
  assert.deepEqual(opCost('gemm', [{ a, b, out, bias, transB: true, epilogue: 'bias' }]), {
    flops: 2 * 128 * 256 * 64 + 128 * 256,
    bytes: 2 * (128 * 64 + 256 * 64 + 128 * 256 + 256),
  });
  // GELU epilogue storing the pre-activation: 1 + 9 FLOPs per output, one more [M, N] written.
  const pre = t([128, 256]);
  assert.deepEqual(opCost('gemm', [{ a, b, out, bias, transB: true, epilogue: 'gelu_bias', preActivation: pre }]), {
    flops: 4_194_304 + 10 * 32_768,
    bytes: 115_200 + 65_536,
  });
  // transA (a is [K, M]) and beta ≠ 0 (out read too): K from op(a), 2·M·N more FLOPs.
  const aT = t([64, 128], 'f32'), b2 = t([64, 256], 'f32'), out2 = t([128, 256], 'f32');
  assert.deepEqual(opCost('gemm', [{ a: aT, b: b2, out: out2, transA: true, beta: 1 }]), {
    flops: 4_194_304 + 65_536,
    bytes: 4 * (8192 + 16_384 + 2 * 32_768),
  });
  // Weight gradient with the bias gradient (bgrad_a): + M·K additions, biasGrad [M] written.
  const dY = t([4096, 768]), x = t([4096, 3072]), dW = t([768, 3072]), db = t([768]);
  assert.deepEqual(opCost('gemm', [{ a: dY, b: x, out: dW, transA: true, epilogue: 'bgrad_a', biasGrad: db }]), {
    flops: 2 * 768 * 3072 * 4096 + 768 * 4096,
    bytes: 2 * (4096 * 768 + 4096 * 3072 + 768 * 3072 + 768),
  });
  // Batched: 12 products of [64, 16]·[16, 32] in f16.
  assert.deepEqual(opCost('batchedGemm', [{ a: t([12, 64, 16], 'f16'), b: t([12, 16, 32], 'f16'), out: t([12, 64, 32], 'f16') }]), {
    flops: 12 * 2 * 64 * 32 * 16,
    bytes: 2 * 12 * (64 * 16 + 16 * 32 + 64 * 32),
  });
  assert.equal(describeCall('gemm', [{ a, b, out, bias, transB: true, epilogue: 'bias' }]), 'gemm 128×256×64 bias Bᵀ');
});

test('LayerNorm by hand: 7 FLOPs an element + 3 a row; x, γ, β read, out, mean, rstd written', () => {
  const rows = 16384, H = 768, n = rows * H;
  const args = { x: t([rows, H]), gamma: t([H]), beta: t([H]), out: t([rows, H]), mean: t([rows], 'f32'), rstd: t([rows], 'f32'), eps: 1e-5 };
  assert.deepEqual(opCost('layerNormForward', [args]), { flops: 7 * n + 3 * rows, bytes: 2 * n * 2 + 2 * H * 2 + 8 * rows });
  assert.deepEqual(opCost('layerNormForward', [args]), { flops: 88_129_536, bytes: 50_465_792 });
  // Backward: dOut, x read, dX written, γ and the statistics read, dγ and dβ written (read too when accumulating).
  const back = { dOut: t([rows, H]), x: args.x, gamma: args.gamma, mean: args.mean, rstd: args.rstd, dX: t([rows, H]), dGamma: t([H]), dBeta: t([H]) };
  assert.deepEqual(opCost('layerNormBackward', [back]), { flops: 13 * n, bytes: 3 * n * 2 + H * 2 + 8 * rows + 2 * H * 2 });
  assert.deepEqual(opCost('layerNormBackward', [{ ...back, accumulate: true, dResidual: t([rows, H]) }]), {
    flops: 14 * n, bytes: 4 * n * 2 + H * 2 + 8 * rows + 4 * H * 2,
  });
});

test('decode-style attention by hand: one query against the cache, AI ≈ 2·Hq/(s·Hkv)', () => {
  // flashAttentionForward with Lq = 1 over 1000 cached keys, GQA 8 query heads on 2 kv heads, bf16.
  const B = 4, Hq = 8, Hkv = 2, Lk = 1000, d = 64;
  const args = { q: t([B, Hq, 1, d]), k: t([B, Hkv, Lk, d]), v: t([B, Hkv, Lk, d]), out: t([B, Hq, 1, d]), lse: t([B, Hq, 1], 'f32'), causal: true };
  const cost = opCost('flashAttentionForward', [args])!;
  assert.equal(cost.flops, 4 * d * B * Hq * Lk); // a decode query sees every key even when causal
  assert.equal(cost.flops, 8_192_000);
  assert.equal(cost.bytes, 2 * (B * Hq * d) * 2 + 2 * (B * Hkv * Lk * d) * 2 + B * Hq * 4);
  assert.equal(cost.bytes, 2_056_320);
  assert.ok(Math.abs(cost.flops / cost.bytes - (2 * Hq) / (2 * Hkv)) < 0.05);
  // The decode op itself: keys per sequence from the positions as the op read them, else the whole cache.
  const decode = { q: t([B, Hq, d]), kCache: t([B, Hkv, 1024, d]), vCache: t([B, Hkv, 1024, d]), positions: t([B], 'i32'), out: t([B, Hq, d]) };
  assert.deepEqual(Object.keys(opDeviceInputs('decodeAttention', [decode])), ['positions']);
  const keys = 11 + 21 + 31 + 1024;
  assert.deepEqual(opCost('decodeAttention', [decode], { positions: Int32Array.from([10, 20, 30, 1023]) }), {
    flops: FLASH_FORWARD_FLOPS * d * Hq * keys,
    bytes: B * Hq * d * 2 + B * 4 + 2 * keys * Hkv * d * 2 + B * Hq * d * 2,
  });
  assert.equal(opCost('decodeAttention', [decode])!.flops, 4 * d * Hq * B * 1024, 'upper bound without the positions');
  // With the O projection to H: its product, the weight once (INT4: packed words, scales and zeros, each weight
  // dequantized once) and the f32 accumulator read and written.
  const H = 256, K = Hq * d, positions = { positions: Int32Array.from([10, 20, 30, 1023]) };
  const base = opCost('decodeAttention', [decode], positions)!, acc = t([B, H], 'f32');
  const float = opCost('decodeAttention', [{ ...decode, project: { weight: t([H, K]), out: acc } }], positions)!;
  assert.deepEqual(float, { flops: base.flops + 2 * B * K * H, bytes: base.bytes + H * K * 2 + 2 * B * H * 4 });
  const int4 = { qweight: t([H, K / 8], 'i32'), scales: t([H, K / 128], 'f16'), zeros: t([H, K / 128], 'u8'), groupSize: 128 };
  const quantized = opCost('decodeAttention', [{ ...decode, project: { weight: int4, out: acc } }], positions)!;
  assert.deepEqual(quantized, { flops: float.flops + 2 * H * K, bytes: base.bytes + H * K / 2 + H * (K / 128) * 3 + 2 * B * H * 4 });
  assert.match(describeCall('decodeAttention', [{ ...decode, project: { weight: int4, out: acc } }]), /\+O/);
});

test('paged decode attention, fused append or not: a sequence holds up to maxBlocks · blockSize keys (not the block size), counted from the positions', () => {
  const B = 3, Hq = 8, Hkv = 2, d = 64, page = 16, maxBlocks = 40;
  const paged = { q: t([B, Hq, d]), kCache: t([100, Hkv, page, d]), vCache: t([100, Hkv, page, d]), positions: t([B], 'i32'), out: t([B, Hq, d]), blockTable: t([B, maxBlocks], 'i32') };
  const positions = { positions: Int32Array.from([383, 0, 700]) };
  const keys = 384 + 1 + 640;  // the last is capped at 40 · 16 positions
  assert.equal(opCost('decodeAttention', [paged], positions)!.flops, FLASH_FORWARD_FLOPS * d * Hq * keys);
  const append = { ...paged, qkv: t([B, (Hq + 2 * Hkv) * d]) };
  const cost = opCost('appendDecodeAttention', [append], positions)!;
  assert.equal(cost.flops, FLASH_FORWARD_FLOPS * d * Hq * keys);
  assert.equal(cost.bytes, B * (Hq + 2 * Hkv) * d * 2 + B * 4 + 2 * B * Hkv * d * 2 + 2 * keys * Hkv * d * 2 + B * Hq * d * 2);
  assert.match(describeCall('appendDecodeAttention', [append]), /cache 640 paged 16/);
});

test('visible (query, key) pairs: causal ramps and length limits, against counting', () => {
  const rng = new Rng(freshSeed());
  const count = (lq: number, lk: number, causal: boolean, limit: number) => {
    let n = 0;
    for (let i = 0; i < lq; i++) for (let j = 0; j < lk; j++) if (j < limit && (!causal || j <= i + lk - lq)) n++;
    return n;
  };
  for (let trial = 0; trial < 300; trial++) {
    const lq = 1 + Math.floor(rng.next() * 40), lk = 1 + Math.floor(rng.next() * 40), limit = Math.floor(rng.next() * 45), causal = rng.next() < 0.7;
    assert.equal(visiblePairs(lq, lk, causal, limit), count(lq, lk, causal, limit), `seed ${rng.seed}: Lq ${lq} Lk ${lk} limit ${limit} causal ${causal}`);
  }
  assert.equal(visiblePairs(1024, 1024, true), (1024 * 1025) / 2);
  // Causal softmax reads only the visible scores; padded flash attention counts the sequences' keys.
  const x = t([2, 3, 16, 16]);
  assert.deepEqual(opCost('softmaxForward', [{ x, out: x, causal: true }]), { flops: 5 * 6 * 136, bytes: 2 * 6 * 136 + 2 * 6 * 256 });
  const q = t([2, 3, 16, 8]), lengths = t([2], 'i32');
  const flash = { q, k: q, v: q, out: q, lse: t([2, 3, 16], 'f32'), keyLengths: lengths };
  assert.equal(opCost('flashAttentionForward', [flash], { keyLengths: Int32Array.from([5, 16]) })!.flops, 4 * 8 * 3 * 16 * (5 + 16));
  assert.equal(opCost('flashAttentionForward', [flash])!.flops, 4 * 8 * 3 * 16 * 32);
  assert.equal(opCost('flashAttentionBackward', [{ ...flash, dOut: q, dq: q, dk: q, dv: q }], { keyLengths: Int32Array.from([5, 16]) })!.flops, 10 * 8 * 3 * 16 * 21);
});

test('memory-bound ops count bytes per element as the kernel headers do', () => {
  const rows = 1024, H = 768, n = rows * H;
  const x = t([rows, H]), bias = t([H]), mask = t([rows, H], 'u8');
  const cost = (op: keyof Backend, args: unknown[]) => opCost(op, args)!;
  assert.equal(cost('biasDropoutResidual', [{ input: x, bias, residual: x, out: x, mask, p: 0.1, seed: 1n, offset: 0n }]).bytes, 7 * n + 2 * H);
  assert.equal(cost('biasDropoutResidualBackward', [{ dOut: x, mask, p: 0.1, dInput: x }]).bytes, 5 * n);
  assert.equal(cost('biasActivationDropout', [{ input: x, bias, out: x, mask, p: 0.1, seed: 1n, offset: 0n, activation: 'gelu_tanh' }]).bytes, 5 * n + 2 * H);
  assert.equal(cost('biasActivationDropoutBackward', [{ dOut: x, input: x, bias, mask, p: 0.1, activation: 'relu', dInput: x, dBias: bias }]).bytes, 7 * n + 4 * H);
  assert.equal(cost('permute0213', [{ x: t([2, 3, 4, 5]), out: t([2, 4, 3, 5]) }]).bytes, 4 * 120);
  assert.deepEqual(cost('fill', [t([10], 'f32'), 0]), { flops: 0, bytes: 40 });
  assert.deepEqual(cost('copy', [t([10], 'f32'), t([10], 'bf16')]), { flops: 0, bytes: 60 });
  // AdamW with fp32 master weights: bf16 params written, grads read, m, v, master read and written.
  const p = 1000;
  const adam = { params: t([p]), grads: t([p]), m: t([p], 'f32'), v: t([p], 'f32'), master: t([p], 'f32'), beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, lr: 1, step: 1 };
  assert.deepEqual(cost('adamW', [adam]), { flops: 18 * p, bytes: p * (2 + 2 + 24) });
  // Cross-entropy over padded logits reads only the real columns; its backward writes them all.
  const logits = t([8, 128]);
  assert.equal(cost('crossEntropyForward', [{ logits, targets: t([8], 'i32'), loss: t([8], 'f32'), lse: t([8], 'f32'), classes: 100 }]).bytes, 8 * 100 * 2 + 32 + 32 + 32);
  assert.equal(cost('crossEntropyBackward', [{ logits, targets: t([8], 'i32'), lse: t([8], 'f32'), dLogits: logits, gradScale: 1, classes: 100 }]).bytes, 8 * 100 * 2 + 32 + 32 + 8 * 128 * 2);
  assert.equal(describeCall('crossEntropyForward', [{ logits, targets: t([8], 'i32'), loss: t([8], 'f32'), lse: t([8], 'f32'), classes: 100 }]), 'crossEntropyForward [8, 128] C=100');
  assert.equal(describeCall('layerNormForward', [{ x, gamma: bias, beta: bias, out: x, mean: t([rows], 'f32'), rstd: t([rows], 'f32'), eps: 1e-5 }]), 'layerNormForward [1024, 768]');
});

test('quantized GEMMs: INT4 weights at half a byte, INT8 operands at one, the matrix product in the GEMM share', () => {
  const M = 4, N = 256, K = 512, G = 128;
  const int4 = { x: t([M, K]), qweight: t([N, K / 8], 'i32'), scales: t([N, K / G], 'f16'), zeros: t([N, K / G], 'u8'), groupSize: G, out: t([M, N]), bias: t([N]) };
  assert.deepEqual(opCost('int4Linear', [int4]), {
    flops: 2 * M * N * K + 2 * N * K + M * N,
    bytes: 2 * M * K + N * K / 2 + 2 * N * K / G + N * K / G + 2 * N + 2 * M * N,
  });
  assert.deepEqual(opCost('int8Gemm', [{ a: t([M, K], 'i8'), b: t([N, K], 'i8'), out: t([M, N], 'i32') }]), { flops: 2 * M * N * K, bytes: M * K + N * K + 4 * M * N });
  assert.ok(isGemmOp('int4Linear') && isGemmOp('int8Gemm') && !isGemmOp('int8Dequantize'));
  assert.equal(describeCall('int4Linear', [int4]), 'int4Linear 4×256×512 g128 bias');
});
