// The decode forward with each GPT-2 MLP as one normMlp into an f32 accumulator that the next norm reads
// (fusedMlpOptions): on the CPU its logits match the float64 reference and the usual form's, its greedy
// tokens equal the usual form's across batch sizes and graph replays (the accumulators alternate and are
// zeroed as the contract says), and it is taken only for the models and backends it is meant for.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import type { AppendDecodeAttentionArgs, NormMlpArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { DecoderForward, fusedMlpOptions, projectedAttentionOptions } from '../../src/infer/forward.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { generateBatch } from '../../src/infer/generate.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { quantizeDecoderModel } from '../../src/infer/quantized.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from './hf-folder.js';
import { gpt2ReferenceLogits } from './reference-forward.js';
import { PROMPT, prefillAndStepLogits, qualificationForwards, relError } from './forward-forms.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-fused-mlp-'));
after(() => rmSync(root, { recursive: true, force: true }));
afterEach(() => { fusedMlpOptions.mode = 'auto'; projectedAttentionOptions.mode = 'auto'; });

const GPT2 = { ...TINY_GPT2, layers: 3 };

/** A CPU backend that counts normMlp calls and the attention ops given a projection. */
function countingBackend(): { backend: CpuBackend; counts: { normMlp: number; projected: number } } {
  const backend = new CpuBackend(), counts = { normMlp: 0, projected: 0 };
  const normMlp = backend.normMlp.bind(backend), append = backend.appendDecodeAttention.bind(backend);
  backend.normMlp = (args: NormMlpArgs) => { counts.normMlp++; normMlp(args); };
  backend.appendDecodeAttention = (args: AppendDecodeAttentionArgs) => { if (args.project) counts.projected++; append(args); };
  return { backend, counts };
}

// The MLPs alone (three accumulators), and with the attention's O product projected into them too (five:
// 2·layers accumulations a step, 4, 6 and 8 — a multiple of 3 and not).
for (const [layers, projected] of [[2, false], [3, false], [2, true], [3, true], [4, true]] as const) {
  test(`gpt2 (${layers} layers${projected ? ', attention projected' : ''}): the fused MLP gives the reference prefill logits and the usual decode logits`, () => {
    const dir = join(root, `gpt2-${layers}-${projected}`);
    const config = { ...GPT2, layers };
    const weights = writeModelFolder(dir, 'gpt2', config as never, 3);
    const { backend, counts } = countingBackend();
    const { model } = loadDecoderModel(dir, backend);
    const logits = (mode: 'on' | 'off') => {
      fusedMlpOptions.mode = mode;
      projectedAttentionOptions.mode = projected ? mode : 'off';
      return prefillAndStepLogits(model);
    };
    const off = logits('off');
    assert.equal(counts.normMlp, 0, 'the usual form runs no normMlp');
    const on = logits('on');
    assert.ok(counts.normMlp >= 5 * layers, `normMlp ran for every layer of the prefill and the steps (${counts.normMlp})`);
    assert.equal(counts.projected, projected ? 4 * layers : 0, 'the four decode steps projected every layer\'s attention');
    const reference = gpt2ReferenceLogits(config, weights, PROMPT).flatMap((row) => [...row]);
    assert.ok(relError(on.prefill, reference) < 1e-5, `prefill rel err ${relError(on.prefill, reference)}`);
    on.steps.forEach((row, i) => assert.ok(relError(row, off.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, off.steps[i]!)}`));
    model.free();
  });
}

for (const projected of [false, true]) {
  test(`gpt2: greedy tokens with the fused MLP${projected ? ' and the attention projected' : ''} equal the usual form's, batched and replayed from graphs`, async () => {
    const dir = join(root, `gpt2-tokens-${projected}`);
    writeModelFolder(dir, 'gpt2', GPT2 as never, 5);
    const { backend, counts } = countingBackend();
    const { model } = loadDecoderModel(dir, backend);
    const prompts = [PROMPT, PROMPT.slice(0, 3), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11], [4, 4, 4], [200, 100], [1]];
    const run = async (mode: 'on' | 'off', batch: readonly (readonly number[])[]) => {
      fusedMlpOptions.mode = mode;
      projectedAttentionOptions.mode = projected ? mode : 'off';
      return generateBatch(model, batch, { maxNewTokens: 9, temperature: 0, stopTokenIds: [], engineOptions: { graphs: true } });
    };
    for (const batch of [prompts, prompts.slice(0, 1), prompts.slice(1, 4)]) {
      const usual = await run('off', batch);
      const before = { ...counts };
      assert.deepEqual(await run('on', batch), usual, `${batch.length} prompts`);
      assert.ok(counts.normMlp > before.normMlp);
      assert.equal(counts.projected > before.projected, projected);
    }
    model.free();
  });
}

test('fusedMlp: only non-gated MLPs with an fc epilogue, and in auto mode where the backend fuses them; the projected attention alone for the others', () => {
  const backend = new CpuBackend();
  fusedMlpOptions.mode = 'on';
  projectedAttentionOptions.mode = 'on';
  const { llama, gpt2, free } = qualificationForwards(root, backend);
  type Views = { mlp?: unknown; attention?: unknown } | undefined;
  const views = (f: DecoderForward, b: CpuBackend, rows: number, projects = false) =>
    (f as unknown as { accumulatorViews(ops: CpuBackend, rows: number, projects: boolean): Views }).accumulatorViews(b, rows, projects);
  assert.notEqual(views(gpt2, backend, 8)?.mlp, undefined);
  assert.equal(views(gpt2, backend, 8)?.attention, undefined, 'the attention projected only for steps that ask (projects)');
  assert.notEqual(views(gpt2, backend, 8, true)?.attention, undefined);
  assert.equal(views(llama, backend, 8), undefined, 'a gated MLP: no fused MLP');
  const llamaViews = views(llama, backend, 8, true);
  assert.ok(llamaViews?.attention !== undefined && llamaViews.mlp === undefined, 'a gated MLP: the projected attention alone');
  fusedMlpOptions.mode = 'auto';
  projectedAttentionOptions.mode = 'auto';
  assert.equal(views(gpt2, backend, 1, true), undefined, 'the CPU backend fuses no MLP and projects no attention');
  const fusing = Object.assign(new CpuBackend(), { fusesMlp: (rows: number) => rows <= 4, projectsAttention: (rows: number) => rows === 1 });
  assert.notEqual(views(gpt2, fusing, 1)?.mlp, undefined);
  assert.notEqual(views(llama, fusing, 1, true)?.attention, undefined);
  assert.equal(views(llama, fusing, 2, true), undefined, 'the backend declines 2 rows');
  assert.equal(views(gpt2, fusing, 8), undefined, "past the accumulators' rows (built in 'on' mode for 32): the backend declines 8");
  fusedMlpOptions.mode = 'off';
  projectedAttentionOptions.mode = 'off';
  assert.equal(views(gpt2, backend, 1, true), undefined);
  free();
});

// A gated MLP (Llama) keeps its normLinear, whose norm reads the attention's accumulated O product as y: two
// layers and three (the last accumulation's own buffer with an odd count).
for (const layers of [2, 3]) {
  test(`llama (${layers} layers): the attention projected alone gives the usual decode logits, and greedy tokens batched and replayed from graphs`, async () => {
    const dir = join(root, `llama-${layers}-projected`);
    writeModelFolder(dir, 'llama', { ...TINY_LLAMA, layers } as never, 4);
    const { backend, counts } = countingBackend();
    const { model } = loadDecoderModel(dir, backend);
    const logits = (mode: 'on' | 'off') => {
      projectedAttentionOptions.mode = mode;
      return prefillAndStepLogits(model);
    };
    const off = logits('off');
    assert.equal(counts.projected, 0);
    const on = logits('on');
    assert.equal(counts.projected, 4 * layers, 'the four decode steps projected every layer\'s attention');
    assert.equal(counts.normMlp, 0, 'no fused MLP for a gated one');
    assert.ok(relError(on.prefill, off.prefill) < 1e-6, `prefill rel err ${relError(on.prefill, off.prefill)}`);
    on.steps.forEach((row, i) => assert.ok(relError(row, off.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, off.steps[i]!)}`));
    const prompts = [PROMPT, PROMPT.slice(0, 3), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11], [4, 4, 4]];
    const run = (mode: 'on' | 'off', batch: readonly (readonly number[])[]) => {
      projectedAttentionOptions.mode = mode;
      return generateBatch(model, batch, { maxNewTokens: 7, temperature: 0, stopTokenIds: [], engineOptions: { graphs: true } });
    };
    for (const batch of [prompts, prompts.slice(0, 1)]) assert.deepEqual(await run('on', batch), await run('off', batch), `${batch.length} prompts`);
    model.free();
  });
}

// A model quantized to INT4 (round to nearest, groups of 32): decode attention projects with the INT4 O weight
// (dequantized as int4Linear's), the MLP's INT4 products read the accumulator through their norms — Llama's gated
// product and GPT-2's (no fused MLP for a quantized one). INT8 O weights are not projected.
for (const family of ['llama', 'gpt2'] as const) {
  test(`${family} (3 layers, INT4): the attention projected with the INT4 O weight gives the usual decode logits and greedy tokens`, async () => {
    const dir = join(root, `${family}-int4-projected`);
    writeModelFolder(dir, family, { ...(family === 'llama' ? { ...TINY_LLAMA, ffn: 64 } : TINY_GPT2), layers: 3 } as never, 6);
    const { backend, counts } = countingBackend();
    const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
    quantizeDecoderModel(model, { method: 'rtn', bits: 4, groupSize: 32 });
    const logits = (mode: 'on' | 'off') => {
      fusedMlpOptions.mode = mode;
      projectedAttentionOptions.mode = mode;
      return prefillAndStepLogits(model);
    };
    const off = logits('off');
    const on = logits('on');
    assert.equal(counts.projected, 4 * 3, 'the four decode steps projected every layer\'s attention');
    assert.equal(counts.normMlp, 0, 'no fused MLP for a quantized model');
    on.steps.forEach((row, i) => assert.ok(relError(row, off.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, off.steps[i]!)}`));
    const prompts = [PROMPT, PROMPT.slice(0, 3), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11]];
    const run = (mode: 'on' | 'off') => {
      projectedAttentionOptions.mode = mode;
      return generateBatch(model, prompts, { maxNewTokens: 7, temperature: 0, stopTokenIds: [], engineOptions: { graphs: true } });
    };
    assert.deepEqual(await run('on'), await run('off'));
    model.free();
  });
}

test('llama (INT8): the O weight is not projected, the steps run their W8A8 O product', () => {
  const dir = join(root, 'llama-int8-projected');
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, layers: 2 } as never, 7);
  const { backend, counts } = countingBackend();
  const { model } = loadDecoderModel(dir, backend, { dtype: 'f32' });
  quantizeDecoderModel(model, { method: 'rtn', bits: 8 });
  projectedAttentionOptions.mode = 'on';
  prefillAndStepLogits(model);
  assert.equal(counts.projected, 0);
  model.free();
});

test('gpt2: a forward cut short by an error leaves the accumulators zeroed, so the engine\'s next forwards are right', () => {
  const dir = join(root, 'gpt2-error');
  writeModelFolder(dir, 'gpt2', GPT2 as never, 6);
  const backend = new CpuBackend();
  const { model } = loadDecoderModel(dir, backend);
  const promptLogits = (engine: DecodeEngine) => engine.promptLogits(PROMPT);
  fusedMlpOptions.mode = 'off';
  const usualEngine = new DecodeEngine(model, { maxBatch: 1, maxLen: 24 });
  const usual = promptLogits(usualEngine);
  usualEngine.dispose();
  fusedMlpOptions.mode = 'on';
  const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 24 });
  // The first forward fails at layer 1's first normLinear, after layer 0's normMlp has added into its accumulator.
  const normLinear = backend.normLinear.bind(backend);
  let calls = 0;
  backend.normLinear = (args) => {
    if (++calls === 2) throw new Error('injected failure');
    normLinear(args);
  };
  assert.throws(() => promptLogits(engine), /injected failure/);
  for (let i = 0; i < 2; i++) {
    const again = promptLogits(engine);
    assert.ok(relError(again, usual) < 1e-5, `forward ${i + 1} after the failure: rel err ${relError(again, usual)}`);
  }
  engine.dispose();
  model.free();
});

test('gpt2: forwards of both forms (prefill: the MLPs alone; decode steps: attention projected too) follow each other in one engine', () => {
  const dir = join(root, 'gpt2-mixed');
  writeModelFolder(dir, 'gpt2', { ...GPT2, layers: 3 } as never, 7);
  const { backend, counts } = countingBackend();
  const { model } = loadDecoderModel(dir, backend);
  const run = (mode: 'on' | 'off') => {
    fusedMlpOptions.mode = mode;
    projectedAttentionOptions.mode = mode;
    const engine = new DecodeEngine(model, { maxBatch: 1, maxLen: 24 });
    const logits: Float32Array[] = [];
    // Two rounds in one engine: a prompt's logits and a batch's prefill (the MLPs alone), then projected steps.
    for (const prompt of [PROMPT, [9, 8, 7]]) {
      logits.push(engine.promptLogits(prompt));
      engine.start([{ prompt, maxNewTokens: 8, sampling: resolveSampling({ temperature: 0 }) }], []);
      for (const token of [3, 250, 17]) {
        engine.collect();
        engine.force(0, token);
        engine.decode(1);
        logits.push(engine.logits()[0]!);
      }
    }
    engine.dispose();
    return logits;
  };
  const usual = run('off'), ours = run('on');
  assert.equal(counts.projected, 2 * 3 * 3, 'two rounds of three steps of three layers');
  ours.forEach((row, i) => assert.ok(relError(row, usual[i]!) < 1e-5, `forward ${i}: rel err ${relError(row, usual[i]!)}`));
  model.free();
});

test('gpt2: steps of the projected attention alone (1 row) and with the fused MLP (2–4 rows) follow each other in one engine', () => {
  const dir = join(root, 'gpt2-alone-and-both');
  writeModelFolder(dir, 'gpt2', { ...GPT2, layers: 3 } as never, 8);
  const backend = new CpuBackend(), counts = { normMlp: 0, projected: 0 };
  const normMlp = backend.normMlp.bind(backend), append = backend.appendDecodeAttention.bind(backend);
  // As CUDA with FUSEFORMER_FUSED_O=1 by default: the MLP fused from two rows, the attention projected at 1–4.
  Object.assign(backend, {
    fusesMlp: (rows: number) => rows >= 2 && rows <= 4, projectsAttention: (rows: number) => rows <= 4,
    normMlp: (args: NormMlpArgs) => { counts.normMlp++; normMlp(args); },
    appendDecodeAttention: (args: AppendDecodeAttentionArgs) => { if (args.project) counts.projected++; append(args); },
  });
  const { model } = loadDecoderModel(dir, backend);
  const prompts = [PROMPT, [9, 8, 7], [4, 4, 4, 4], [200, 100]];
  const run = (mode: 'auto' | 'off') => {
    fusedMlpOptions.mode = mode;
    projectedAttentionOptions.mode = mode;
    const engine = new DecodeEngine(model, { maxBatch: 4, maxLen: 32 });
    const logits: Float32Array[] = [];
    // Rounds of 1, 3, 1 and 2 sequences in one engine (one forward, its accumulators kept), so steps of the
    // projection alone and of both forms follow each other.
    for (const batch of [prompts.slice(0, 1), prompts.slice(1, 4), prompts.slice(2, 3), prompts.slice(0, 2)]) {
      engine.start(batch.map((prompt) => ({ prompt, maxNewTokens: 8, sampling: resolveSampling({ temperature: 0 }) })), []);
      for (const token of [3, 250, 17]) {
        engine.collect();
        batch.forEach((_, b) => engine.force(b, token + b));
        engine.decode(1);
        logits.push(...engine.logits().slice(0, batch.length));
      }
    }
    engine.dispose();
    return logits;
  };
  const usual = run('off');
  assert.deepEqual(counts, { normMlp: 0, projected: 0 });
  const ours = run('auto');
  assert.ok(counts.projected > 0 && counts.normMlp > 0, `both forms ran: ${JSON.stringify(counts)}`);
  assert.equal(ours.length, usual.length);
  ours.forEach((row, i) => assert.ok(relError(row, usual[i]!) < 1e-5, `row ${i}: rel err ${relError(row, usual[i]!)}`));
  model.free();
});
