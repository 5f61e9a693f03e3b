// A GPT-2 (and a Llama, with the projected attention alone) decoded through the CUDA backend's own kernels, run by the kernel emulator (src/testing/emulator):
// the decode step's fused forms — the MLP as one kernel into an f32 accumulator (normMlp), the O projection
// inside decode attention, the final norm inside the LM head GEMV — routed and launched as on a GPU, with the
// engine's graphs captured and replayed, against the same model on the CPU backend. The prompt's GEMMs (more
// than 4 rows) run on the CPU backend inside the emulated one (cuBLASLt's part). Skips where the emulator
// cannot compile (no g++ or CUDA headers).

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { fusedMlpOptions, headNormOptions, projectedAttentionOptions } from '../../../src/infer/forward.js';
import { generateBatch } from '../../../src/infer/generate.js';
import { loadDecoderModel } from '../../../src/infer/model.js';
import { quantizeDecoderModel } from '../../../src/infer/quantized.js';
import { emulatedCudaBackend, emulatorUnavailable } from '../../../src/testing/emulator/host.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../../infer/hf-folder.js';
import { prefillAndStepLogits, relError } from '../../infer/forward-forms.js';

const skip = emulatorUnavailable() ?? false;
const root = mkdtempSync(join(tmpdir(), 'fuseformer-emulated-gpt2-'));
after(() => rmSync(root, { recursive: true, force: true }));
const headNormSaved = headNormOptions.enabled;
afterEach(() => { fusedMlpOptions.mode = 'auto'; projectedAttentionOptions.mode = 'auto'; headNormOptions.enabled = headNormSaved; });

// Heads of 64 (the projection's shape: a head's 64 columns of W_O per block), an MLP whose blocks of 16
// features divide F, three layers (the accumulators' cycle of three with the projection, and its last two).
const GPT2 = { ...TINY_GPT2, hidden: 128, heads: 2, ffn: 512, layers: 3, vocabSize: 300 };

function emulatedFusing() {
  const { backend, runtime } = emulatedCudaBackend();
  backend.fusedMlp = true;
  backend.fusedMlpMinRows = 1;  // from one row (the default fuses from two): these tests decode at batch 1 too
  backend.fusedAttentionProjection = true;
  return { backend, runtime };
}

/** The model in `dir` on the CPU backend in f32, neither fused form: the logits every emulated run is held to. */
function cpuReference(dir: string): ReturnType<typeof prefillAndStepLogits> {
  fusedMlpOptions.mode = 'off';
  projectedAttentionOptions.mode = 'off';
  const cpu = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' });
  const reference = prefillAndStepLogits(cpu.model);
  cpu.model.free();
  return reference;
}

/** Launches of the kernels whose names match, counted by the emulator (graph replays included). */
function launched(runtime: ReturnType<typeof emulatedCudaBackend>['runtime'], pattern: RegExp): number {
  return [...runtime.stats.launches].filter(([name]) => pattern.test(name)).reduce((n, [, count]) => n + count, 0);
}

test('emulated CUDA, f32: prefill and decode logits with the fused MLP, the projected attention and the head norm match the CPU backend', { skip, timeout: 10 * 60_000 }, () => {
  const dir = join(root, 'logits');
  writeModelFolder(dir, 'gpt2', GPT2 as never, 11);
  const reference = cpuReference(dir);
  fusedMlpOptions.mode = 'auto';
  projectedAttentionOptions.mode = 'auto';
  headNormOptions.enabled = true;
  const { backend, runtime } = emulatedFusing();
  const emulated = loadDecoderModel(dir, backend, { dtype: 'f32' });
  const ours = prefillAndStepLogits(emulated.model);
  // Kernels run, counted by the emulator (graph replays included): every layer of the four decode steps.
  const ran = (pattern: RegExp) => launched(runtime, pattern);
  assert.equal(ran(/^gemv_mlp_/), 4 * GPT2.layers, 'normMlp as one kernel in every layer of the decode steps');
  assert.equal(ran(/^decode_attention_.*_proj128c16$/), 4 * GPT2.layers, 'the attention projected in every layer of the decode steps');
  assert.ok(ran(/^gemv_.*norm|^gemv_.*_1p/) > 0, 'a GEMV formed a norm in its prologue');
  assert.ok(relError(ours.prefill, reference.prefill) < 1e-5, `prefill rel err ${relError(ours.prefill, reference.prefill)}`);
  ours.steps.forEach((row, i) => assert.ok(relError(row, reference.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, reference.steps[i]!)}`));
  emulated.model.free();
});

test('emulated CUDA, f32: greedy tokens of a batch, replayed from graphs, equal the CPU backend\'s, with the products on the GEMV kernels and on the CPU\'s stand-in for cuBLASLt', { skip, timeout: 10 * 60_000 }, async () => {
  const dir = join(root, 'tokens');
  writeModelFolder(dir, 'gpt2', GPT2 as never, 12);
  const prompts = [[5, 9, 200, 17, 3], [1, 2], [299, 0, 150], [42]];
  const options = { maxNewTokens: 6, temperature: 0, stopTokenIds: [], engineOptions: { graphs: true } };
  const cpu = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' });
  const reference = await generateBatch(cpu.model, prompts, options);
  cpu.model.free();
  const { backend, runtime } = emulatedFusing();
  const emulated = loadDecoderModel(dir, backend, { dtype: 'f32' });
  assert.deepEqual(await generateBatch(emulated.model, prompts, options), reference);
  assert.ok([...runtime.stats.launches.keys()].some((name) => name.startsWith('gemv_mlp_')), 'the fused MLP ran');
  // Every product on cuBLASLt's stand-in (the CPU backend's GEMM), recorded into the graphs and replayed with them.
  backend.decodeGemv = false;
  backend.fusedMlp = false;
  assert.deepEqual(await generateBatch(emulated.model, prompts, options), reference, 'GEMMs outside our kernels, graphs replayed');
  emulated.model.free();
});

test('emulated CUDA, bf16: the decode step as on the H200 (pipelined tensor-core attention with the append and the projection, the fused MLP, the head norm) is as close to the f32 model as the usual form', { skip, timeout: 10 * 60_000 }, () => {
  const dir = join(root, 'bf16');
  writeModelFolder(dir, 'gpt2', GPT2 as never, 11);
  const reference = cpuReference(dir);
  const errors = (fused: boolean) => {
    fusedMlpOptions.mode = fused ? 'auto' : 'off';
    projectedAttentionOptions.mode = fused ? 'auto' : 'off';
    headNormOptions.enabled = fused;
    const { backend, runtime } = emulatedFusing();
    const emulated = loadDecoderModel(dir, backend, { dtype: 'bf16' });
    const ours = prefillAndStepLogits(emulated.model);
    emulated.model.free();
    const names = [...runtime.stats.launches.keys()];
    return { names, steps: ours.steps.map((row, i) => relError(row, reference.steps[i]!)) };
  };
  const usual = errors(false), fused = errors(true);
  assert.ok(fused.names.some((n) => /^decode_attention_bf16_.*_pipelined_append_bias_mma_proj128c16$/.test(n)), fused.names.join(' '));
  assert.ok(fused.names.some((n) => /^gemv_mlp_bf16_/.test(n)), fused.names.join(' '));
  assert.ok(!usual.names.some((n) => /proj128|gemv_mlp/.test(n)), 'the usual form fuses neither');
  // bf16 storage alone puts a 300-token vocabulary's logits 1–3% from the f32 model's (both forms, measured);
  // a wrong index or a lost accumulation would put them tens of percent away.
  for (const [i, e] of fused.steps.entries()) assert.ok(e < 4e-2 && e < 2 * usual.steps[i]!, `step ${i}: fused rel err ${e}, usual ${usual.steps[i]}`);
});

// A Llama (gated MLP, grouped kv heads, RoPE) takes the projected attention alone: decode attention's kernel adds
// the O product into an f32 accumulator that the gated GEMV's norm reads as y. Heads of 64 (the tensor-core
// variant with the append at 16 bit), two query heads a kv head, three layers (the last accumulation's own buffer).
const LLAMA = { ...TINY_LLAMA, hidden: 256, heads: 4, kvHeads: 2, headDim: 64, ffn: 384, layers: 3, vocabSize: 300 };

for (const dtype of ['f32', 'bf16'] as const) {
  test(`emulated CUDA, ${dtype}: a Llama's decode logits with the projected attention (in output chunks) match its usual form's`, { skip, timeout: 10 * 60_000 }, () => {
    const dir = join(root, `llama-${dtype}`);
    writeModelFolder(dir, 'llama', LLAMA as never, 13);
    const logits = (projected: boolean) => {
      projectedAttentionOptions.mode = projected ? 'auto' : 'off';
      const { backend, runtime } = emulatedCudaBackend();
      backend.fusedAttentionProjection = true;
      const emulated = loadDecoderModel(dir, backend, { dtype });
      const result = prefillAndStepLogits(emulated.model);
      emulated.model.free();
      return { result, names: [...runtime.stats.launches.keys()] };
    };
    const usual = logits(false), projected = logits(true);
    // 2 kv heads × 16 chunks of the 256 output rows at batch 1.
    assert.ok(projected.names.some((n) => /^decode_attention_.*_proj256c16$/.test(n)), projected.names.join(' '));
    assert.ok(!usual.names.some((n) => /_proj/.test(n)), 'the usual form projects nothing');
    if (dtype === 'f32') {
      projected.result.steps.forEach((row, i) => assert.ok(relError(row, usual.result.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, usual.result.steps[i]!)}`));
      return;
    }
    // bf16: the O product reaches the norm in f32 instead of rounded to bf16, so the logits move by bf16's rounding
    // (1–5% here, as bf16 storage itself puts the usual form); held to twice the usual form's distance from the f32 model on the CPU, as the GPT-2 test above.
    const reference = cpuReference(dir);
    projected.result.steps.forEach((row, i) => {
      const e = relError(row, reference.steps[i]!), u = relError(usual.result.steps[i]!, reference.steps[i]!);
      assert.ok(e < 0.1 && e < 2 * u + 1e-3, `step ${i}: projected rel err ${e}, usual ${u}`);
    });
  });
}

test('emulated CUDA, f32: an INT4 Llama\'s decode logits with the attention projected by its INT4 O weight match its usual form\'s (the INT4 O GEMV)', { skip, timeout: 10 * 60_000 }, () => {
  const dir = join(root, 'llama-int4');
  writeModelFolder(dir, 'llama', LLAMA as never, 15);
  const logits = (projected: boolean) => {
    projectedAttentionOptions.mode = projected ? 'auto' : 'off';
    const { backend, runtime } = emulatedCudaBackend();
    backend.fusedAttentionProjection = true;
    const emulated = loadDecoderModel(dir, backend, { dtype: 'f32' });
    quantizeDecoderModel(emulated.model, { method: 'rtn', bits: 4, groupSize: 64 });
    const result = prefillAndStepLogits(emulated.model);
    emulated.model.free();
    return { result, runtime };
  };
  const usual = logits(false), projected = logits(true);
  assert.equal(launched(projected.runtime, /^decode_attention_.*_proj256q4g64c16$/), 4 * LLAMA.layers, 'every layer of the four decode steps projected with the INT4 weight');
  assert.equal(launched(usual.runtime, /_proj/), 0, 'the usual form projects nothing');
  projected.result.steps.forEach((row, i) => assert.ok(relError(row, usual.result.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, usual.result.steps[i]!)}`));
});

test('emulated CUDA, f32: a GPT-2 with the projected attention alone (the MLP unfused, as at batch 1 by default) matches the CPU backend', { skip, timeout: 10 * 60_000 }, () => {
  const dir = join(root, 'gpt2-projection-alone');
  writeModelFolder(dir, 'gpt2', GPT2 as never, 14);
  const reference = cpuReference(dir);
  projectedAttentionOptions.mode = 'auto';
  const { backend, runtime } = emulatedCudaBackend();
  backend.fusedAttentionProjection = true;
  const emulated = loadDecoderModel(dir, backend, { dtype: 'f32' });
  const ours = prefillAndStepLogits(emulated.model);
  emulated.model.free();
  assert.equal(launched(runtime, /^decode_attention_.*_proj128c16$/), 4 * GPT2.layers, 'the attention projected in every layer of the decode steps');
  assert.equal(launched(runtime, /^gemv_mlp_/), 0, 'no fused MLP');
  assert.ok(relError(ours.prefill, reference.prefill) < 1e-5, `prefill rel err ${relError(ours.prefill, reference.prefill)}`);
  ours.steps.forEach((row, i) => assert.ok(relError(row, reference.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, reference.steps[i]!)}`));
});

test('CudaBackend.projectsAttention: only with FUSEFORMER_FUSED_O, 1–4 rows, where a block\'s chunk of W_O is at most 128 KB', { skip }, () => {
  const { backend } = emulatedCudaBackend();  // 132 SMs
  const gpt2 = (rows: number) => backend.projectsAttention(rows, 'bf16', 768, 12, 12, 64);
  const llama1b = (rows: number) => backend.projectsAttention(rows, 'bf16', 2048, 32, 8, 64);
  const llama8b = (rows: number) => backend.projectsAttention(rows, 'bf16', 4096, 32, 8, 128);
  backend.fusedAttentionProjection = false;
  assert.equal(gpt2(1), false, 'opt-in');
  backend.fusedAttentionProjection = true;
  assert.deepEqual([1, 2, 4, 5].map(gpt2), [true, true, true, false], 'GPT-2: 6–24 KB a block at 1–4 rows; 5 rows is past the GEMV rows');
  assert.deepEqual([1, 4].map(llama1b), [true, true], 'Llama 1B: 64 KB a block in 16 chunks at 1 row, 128 KB in 8 at 4');
  assert.deepEqual([1, 4].map(llama8b), [false, false], 'Llama 8B (d 128): 256 KB a block at best');
  const int4 = (rows: number, H: number, heads: number, kvHeads: number, d: number) => backend.projectsAttention(rows, 'bf16', H, heads, kvHeads, d, 'int4');
  assert.deepEqual([1, 4, 5].map((rows) => int4(rows, 2048, 32, 8, 64)), [true, true, false], 'INT4 Llama 1B: 16–32 KB a block');
  assert.deepEqual([1, 4].map((rows) => int4(rows, 4096, 32, 8, 128)), [true, true], 'INT4 Llama 8B: 64 KB a block at 1 row (16 chunks), 128 KB at 4 (8 chunks)');
  assert.equal(int4(1, 768, 12, 12, 16), false, 'INT4 heads of 16 columns: not whole 32-column vectors');
  assert.equal(backend.projectsAttention(1, 'i32', 768, 12, 12, 64), false, 'not a float dtype');
});
