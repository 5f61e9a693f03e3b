// Tensor-parallel inference (dist/tp-decoder.ts under infer/) on in-process CPU ranks against the
// single-rank decode engine: at world sizes 1, 2 and 4, Llama with grouped-query attention (with and
// without biases) and GPT-2 give the single-rank prefill logits (f32 rounding: the partial sums add in
// another order) and the same 16 greedy decode tokens; seeded sampling draws the same tokens on every
// rank. Random weights of the sharded model equal the single-rank model's; a model folder (safetensors,
// one file or two shards, f32 or bf16) loads each rank's shard alone. A world size that does not divide
// the heads is refused by name.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runInProcessRanks } from '../../src/dist/in-process.js';
import { checkDecoderTensorParallel, decoderWeightSplits, shardFileRanges } from '../../src/dist/tp-decoder.js';
import { decoderArchitecture } from '../../src/infer/architecture.js';
import { SafetensorsReader, writeSafetensors } from '../../src/io/safetensors.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import type { ModelConfig } from '../../src/models/registry.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import type { TpDecodeInput, TpDecodeOutput } from './tp-decode-fixtures.js';
import { decodeRun } from './tp-decode-fixtures.js';

const fixtures = new URL('./tp-decode-fixtures.js', import.meta.url);
const root = mkdtempSync(join(tmpdir(), 'fuseformer-tp-decode-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** Grouped-query attention that splits over 4 ranks: 8 query heads sharing 4 key/value heads. */
const GQA_LLAMA: LlamaConfig = { ...TINY_LLAMA, hidden: 64, heads: 8, kvHeads: 4, headDim: 8, ffn: 96 };
const llama = (config: LlamaConfig): ModelConfig => ({ family: 'llama', config });
const gpt2 = (config: Gpt2Config): ModelConfig => ({ family: 'gpt2', config });

// Ragged prompts: prefill pads them to the longest.
const PROMPTS = [[5, 17, 200, 3, 99, 42, 7], [256, 12, 80], [31, 31, 9, 150, 2]];
const STEPS = 16;

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

function assertMatches(outs: readonly TpDecodeOutput[], want: TpDecodeOutput, what: string): void {
  const scale = Math.max(...Array.from(want.promptLogits, Math.abs));
  outs.forEach((out, rank) => {
    assert.ok(maxDiff(out.promptLogits, want.promptLogits) <= 1e-5 * scale, `${what}, rank ${rank}: prefill logits differ by ${maxDiff(out.promptLogits, want.promptLogits)} (scale ${scale})`);
    out.firstLogits.forEach((l, b) => assert.ok(maxDiff(l, want.firstLogits[b]!) <= 1e-5 * scale, `${what}, rank ${rank}: sequence ${b}'s first-step logits`));
    assert.deepEqual(out.greedy, want.greedy, `${what}, rank ${rank}: greedy tokens`);
    assert.deepEqual(out.sampled, outs[0]!.sampled, `${what}, rank ${rank}: sampled tokens equal rank 0's`);
    assert.equal(out.cacheKvHeads * outs.length, want.cacheKvHeads, `${what}, rank ${rank}: the KV cache holds 1/${outs.length} of the key/value heads`);
  });
  assert.deepEqual(outs[0]!.sampled, want.sampled, `${what}: sampled tokens equal the single-rank model's`);
  for (const tokens of want.greedy) assert.equal(tokens.length, STEPS + 1);
  assert.ok(new Set(want.greedy.flat()).size > 3, `${what}: greedy decoding is not stuck on one token`);
}

const RANDOM_CASES: { name: string; config: ModelConfig; worlds: number[] }[] = [
  { name: 'Llama GQA (8 query / 4 key-value heads)', config: llama(GQA_LLAMA), worlds: [1, 2, 4] },
  { name: 'Llama tied, q/k/v/o and MLP biases', config: llama({ ...GQA_LLAMA, tieWordEmbeddings: true, attentionBias: true, mlpBias: true }), worlds: [2] },
  { name: 'GPT-2', config: gpt2(TINY_GPT2), worlds: [1, 2, 4] },
  // Phi-3: one fused qkv_proj (three equal sections, multi-head) and one gate_up_proj (two sections).
  { name: 'Phi-3 fused projections', config: llama({ ...GQA_LLAMA, variant: 'phi3', kvHeads: GQA_LLAMA.heads }), worlds: [2] },
  // Qwen3: q_norm / k_norm (one gamma for every head: replicated) on each rank's heads; head_dim 16 apart from hidden / heads.
  { name: 'Qwen3 per-head q/k norms', config: llama({ ...GQA_LLAMA, variant: 'qwen3', qkNorm: true, headDim: 16, tieWordEmbeddings: true }), worlds: [2] },
];

for (const c of RANDOM_CASES) {
  const input: TpDecodeInput = { model: { config: c.config, seed: 11, std: 0.2 }, prompts: PROMPTS, steps: STEPS };
  const want = decodeRun(new CpuBackend(), input);
  for (const w of c.worlds) {
    test(`tensor-parallel decode, ${c.name}, random weights, world size ${w}: prefill logits and ${STEPS} greedy tokens equal one rank; sampling agrees on every rank`, async () => {
      const outs = await runInProcessRanks<TpDecodeInput, TpDecodeOutput>(w, fixtures, 'tpDecodeRank', input);
      assertMatches(outs, want, `${c.name} at world size ${w}`);
    });
  }
}

const FOLDER_CASES: { name: string; family: 'gpt2' | 'llama'; config: Gpt2Config | LlamaConfig; options: Parameters<typeof writeModelFolder>[4] }[] = [
  { name: 'GPT-2 (Conv1D matrices stored transposed), two shard files', family: 'gpt2', config: { ...TINY_GPT2, tieWordEmbeddings: false }, options: { sharded: true } },
  { name: 'Llama GQA, bf16 file, names without the model. prefix', family: 'llama', config: { ...GQA_LLAMA, attentionBias: true }, options: { fileDType: 'BF16', stripPrefix: true } },
];

for (const c of FOLDER_CASES) {
  test(`tensor-parallel decode from a model folder, ${c.name}: each rank's shards give the single-rank results at world sizes 2 and 4`, async () => {
    const dir = join(root, c.name.replace(/\W+/g, '-'));
    writeModelFolder(dir, c.family, c.config, 5, c.options);
    const input: TpDecodeInput = { model: { dir }, prompts: PROMPTS, steps: STEPS };
    const want = decodeRun(new CpuBackend(), input);
    for (const w of [2, 4]) assertMatches(await runInProcessRanks<TpDecodeInput, TpDecodeOutput>(w, fixtures, 'tpDecodeRank', input), want, `${c.name} at world size ${w}`);
  });
}

test('a world size that does not divide the heads is refused, naming the heads', async () => {
  const arch = decoderArchitecture(llama(GQA_LLAMA));
  assert.throws(() => checkDecoderTensorParallel(arch, 3), /8 query heads and 4 key\/value heads cannot be split over 3 ranks \(the world size must divide both\)/);
  assert.throws(() => checkDecoderTensorParallel(decoderArchitecture(llama({ ...GQA_LLAMA, kvHeads: 2 })), 4), /8 query heads and 2 key\/value heads cannot be split over 4 ranks/);
  assert.throws(() => checkDecoderTensorParallel(decoderArchitecture(llama({ ...GQA_LLAMA, heads: 4, headDim: 16, ffn: 90 })), 4), /MLP width 90 cannot be split over 4 ranks/);
  assert.throws(() => checkDecoderTensorParallel(decoderArchitecture(llama({ ...GQA_LLAMA, variant: 'phi3' })), 2), /stores q, k and v as one tensor with 4 key\/value heads for 8 query heads; splitting it is not supported/);
  const input: TpDecodeInput = { model: { config: gpt2({ ...TINY_GPT2, heads: 4 }), seed: 1, std: 0.2 }, prompts: [[1, 2]], steps: 1 };
  await assert.rejects(runInProcessRanks(3, fixtures, 'tpDecodeRank', input), /4 query heads and 4 key\/value heads cannot be split over 3 ranks/);
});

test('shard file ranges: rows of a stored matrix, columns of a transposed one, sections of a fused QKV; read alone from safetensors', () => {
  const arch = decoderArchitecture(gpt2(TINY_GPT2));
  const splits = decoderWeightSplits(arch);
  const spec = (name: string) => arch.weights.find((w) => w.name === name)!;
  const cAttn = 'transformer.h.0.attn.c_attn.weight', cProj = 'transformer.h.0.attn.c_proj.weight';
  assert.deepEqual(splits.get(cAttn), { kind: 'out', sections: 3 });
  assert.deepEqual(splits.get(cProj), { kind: 'in' });
  assert.deepEqual(splits.get('transformer.h.0.attn.c_proj.bias'), { kind: 'replicated' });
  assert.deepEqual(splits.get('transformer.wte.weight'), { kind: 'replicated' });
  // c_attn's file is [C, 3C] = [32, 96]: rank 1 of 2 takes columns 16–31, 48–63, 80–95 of every row.
  const ranges = shardFileRanges(spec(cAttn), splits.get(cAttn)!, 1, 2);
  assert.equal(ranges.length, 32 * 3);
  assert.deepEqual(ranges.slice(0, 4), [[16, 32], [48, 64], [80, 96], [96 + 16, 96 + 32]]);
  // c_proj's file is [C_in, C_out]; its input rows 16–31 are one contiguous range.
  assert.deepEqual(shardFileRanges(spec(cProj), splits.get(cProj)!, 1, 2), [[16 * 32, 32 * 32]]);
  // Llama's o_proj [H, Hq·d] (not transposed): columns per row; q_proj: one block of rows.
  const la = decoderArchitecture(llama(GQA_LLAMA)), ls = decoderWeightSplits(la);
  const o = la.weights.find((w) => w.name === 'model.layers.0.self_attn.o_proj.weight')!;
  assert.deepEqual(shardFileRanges(o, ls.get(o.name)!, 3, 4).slice(0, 2), [[48, 64], [64 + 48, 64 + 64]]);
  const q = la.weights.find((w) => w.name === 'model.layers.0.self_attn.q_proj.weight')!;
  assert.deepEqual(shardFileRanges(q, ls.get(q.name)!, 1, 4), [[16 * 64, 32 * 64]]);

  const file = join(root, 'ranges.safetensors');
  const data = Float32Array.from({ length: 24 }, (_, i) => i);
  writeSafetensors(file, [{ name: 't', dtype: 'F32', shape: [4, 6], bytes: new Uint8Array(data.buffer) }]);
  const reader = SafetensorsReader.open(file);
  try {
    const bytes = reader.readElements('t', [[2, 4], [8, 10], [20, 24]]);
    assert.deepEqual(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4)), [2, 3, 8, 9, 20, 21, 22, 23]);
    assert.throws(() => reader.readElements('t', [[20, 25]]), /elements \[20, 25\) of tensor 't' are outside its 24 elements/);
  } finally {
    reader.close();
  }
});
