import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import type { ModelConfig } from '../../src/models/registry.js';
import { presetConfig } from '../../src/models/registry.js';
import { DECODE_STEPS_ROOM, profileDecodeStep } from '../../src/profile/decode.js';

test('a decode step of the inference engine profiled on the CPU: the KV cache read at its real length', () => {
  const base = presetConfig('gpt2-tiny');
  assert.equal(base.family, 'gpt2');
  const config = { family: 'gpt2', config: { ...base.config, layers: 2 } } as ModelConfig;
  const batch = 3, context = 12, d = 128 / 4, Hq = 4;
  const p = profileDecodeStep(new CpuBackend(), config, { batch, context, dtype: 'f32', repeats: 1, roofs: false });
  const count = (op: string) => p.ops.filter((o) => o.op === op).length;
  // A layer's attention is one op from the QKV output: bias, the cache append and decode attention.
  assert.equal(count('appendDecodeAttention'), 2, 'one per layer');
  assert.equal(count('decodeAttention') + count('qkvRopeAppend'), 0);
  assert.equal(count('embedTokens'), 1);
  assert.equal(count('sampleTokens'), 1);
  // A layer's norms go with the products that read them (normLinear); the final norm is its own op.
  assert.equal(count('normLinear'), 4, 'two per layer');
  assert.equal(count('residualNorm'), 1);
  assert.ok(p.ops.filter((o) => o.gemm).every((o) => o.name.startsWith(`gemm ${batch}×`) || o.name.startsWith(`normLinear [${batch}, `)), 'every GEMM has one row per sequence');
  // Prefill leaves each sequence at position `context`; the warm-up step moves it one further, so the
  // profiled step's attention reads context + 2 keys per sequence (not the cache's context + 64).
  // Costed as the fused minimum: the QKV rows and bias read, the new keys and values written, the keys and
  // values read, out written (the query heads stay on chip); FLOPs the bias adds and attention's.
  const W = 3 * Hq * d;
  const attention = p.ops.find((o) => o.op === 'appendDecodeAttention')!;
  assert.equal(attention.flops, batch * W + 4 * d * Hq * batch * (context + 2));
  assert.equal(attention.bytes, 4 * (batch * W + W + batch + 2 * batch * Hq * d) + 2 * 4 * batch * (context + 2) * Hq * d + 4 * batch * Hq * d);
  assert.match(attention.name, new RegExp(`cache ${context + DECODE_STEPS_ROOM}`));
  assert.ok(p.stepMs > 0 && p.kernelMs > 0);
  assert.throws(() => profileDecodeStep(new CpuBackend(), config, { batch, context: 250, dtype: 'f32', roofs: false }), /must fit the model's 256 positions/);
  assert.throws(() => profileDecodeStep(new CpuBackend(), presetConfig('bert-tiny'), { batch, context, dtype: 'f32', roofs: false }), /GPT-2 and Llama/);
});

test('a decode step timed by removal on the CPU: one engine per op, the same ops as the eager profile', () => {
  const base = presetConfig('gpt2-tiny');
  const config = { family: 'gpt2', config: { ...base.config, layers: 1 } } as ModelConfig;
  const options = { batch: 2, context: 8, dtype: 'f32' as const, repeats: 1, roofs: false as const };
  const eager = profileDecodeStep(new CpuBackend(), config, options);
  const removed = profileDecodeStep(new CpuBackend(), config, { ...options, opTiming: 'removal' });
  assert.equal(eager.opTiming, 'eager');
  assert.equal(removed.opTiming, 'removal');
  assert.deepEqual(removed.ops.map((o) => o.name), eager.ops.map((o) => o.name), 'the captured step issues the eager step\'s ops');
  // Costed as the timed graph's last replay read the cache: one step further on than the eager run.
  const attention = (p: typeof eager) => p.ops.find((o) => o.op === 'appendDecodeAttention')!.flops!;
  const perKey = 4 * (128 / 4) * 4 * options.batch, biasAdds = options.batch * 3 * 128;
  assert.equal(attention(eager), biasAdds + perKey * (options.context + 2));
  assert.equal(attention(removed), biasAdds + perKey * (options.context + 3));
  const others = (p: typeof eager) => p.ops.filter((o) => o.op !== 'appendDecodeAttention').map((o) => o.flops);
  assert.deepEqual(others(removed), others(eager));
  assert.ok(removed.ops.every((o) => o.ms >= 0));
});

test('an INT8 decode step on the CPU: each layer\'s norms go with their W8A8 products (normLinear), the rest as int8Linear', () => {
  const base = presetConfig('gpt2-tiny');
  const config = { family: 'gpt2', config: { ...base.config, layers: 2 } } as ModelConfig;
  const batch = 2, context = 8, hidden = base.config.hidden;
  const p = profileDecodeStep(new CpuBackend(), config, { batch, context, dtype: 'f32', repeats: 1, roofs: false, quantize: { bits: 8, lmHead: true } });
  const named = (prefix: string) => p.ops.filter((o) => o.name.startsWith(prefix));
  // QKV and fc after the two norms of each layer; the out and down projections and the LM head on their own.
  assert.equal(p.ops.filter((o) => o.op === 'normLinear').length, 4);
  assert.ok(named('normLinear ').every((o) => / int8 /.test(o.name) && o.gemm), 'the fused ops name their W8A8 product');
  assert.equal(p.ops.filter((o) => o.op === 'int8Linear').length, 5, 'out and down per layer, and the head');
  const qkv = p.ops.find((o) => o.op === 'normLinear' && o.name.includes(`[${batch}, ${3 * hidden}]`))!;
  assert.ok(qkv.flops! >= 2 * batch * 3 * hidden * hidden, 'the product\'s MACs counted');
  assert.ok(qkv.bytes! >= 3 * hidden * hidden, 'the int8 weight read once');
});
