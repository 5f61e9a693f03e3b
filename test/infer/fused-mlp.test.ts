// The decode forward with each GPT-2 MLP as one normMlp into an f32 accumulator that the next norm reads
// (fusedMlpOptions): on the CPU its logits match the float64 reference and the usual form's, its greedy
// tokens equal the usual form's across batch sizes and graph replays (the accumulators alternate and are
// zeroed as the contract says), and it is taken only for the models and backends it is meant for.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import type { NormMlpArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { DecoderForward, fusedMlpOptions } from '../../src/infer/forward.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { TINY_GPT2, writeModelFolder } from './hf-folder.js';
import { gpt2ReferenceLogits } from './reference-forward.js';
import { PROMPT, prefillAndStepLogits, qualificationForwards, relError } from './forward-forms.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-fused-mlp-'));
after(() => rmSync(root, { recursive: true, force: true }));
afterEach(() => { fusedMlpOptions.mode = 'auto'; });

const GPT2 = { ...TINY_GPT2, layers: 3 };

/** A CPU backend that counts normMlp calls. */
function countingBackend(): { backend: CpuBackend; counts: { normMlp: number } } {
  const backend = new CpuBackend(), counts = { normMlp: 0 };
  const normMlp = backend.normMlp.bind(backend);
  backend.normMlp = (args: NormMlpArgs) => { counts.normMlp++; normMlp(args); };
  return { backend, counts };
}

for (const layers of [2, 3]) {
  test(`gpt2 (${layers} layers): the fused MLP gives the reference prefill logits and the usual decode logits`, () => {
    const dir = join(root, `gpt2-${layers}`);
    const config = { ...GPT2, layers };
    const weights = writeModelFolder(dir, 'gpt2', config as never, 3);
    const { backend, counts } = countingBackend();
    const { model } = loadDecoderModel(dir, backend);
    const logits = (mode: 'on' | 'off') => {
      fusedMlpOptions.mode = mode;
      return prefillAndStepLogits(model);
    };
    const off = logits('off');
    assert.equal(counts.normMlp, 0, 'the usual form runs no normMlp');
    const on = logits('on');
    assert.ok(counts.normMlp >= 5 * layers, `normMlp ran for every layer of the prefill and the steps (${counts.normMlp})`);
    const reference = gpt2ReferenceLogits(config, weights, PROMPT).flatMap((row) => [...row]);
    assert.ok(relError(on.prefill, reference) < 1e-5, `prefill rel err ${relError(on.prefill, reference)}`);
    on.steps.forEach((row, i) => assert.ok(relError(row, off.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, off.steps[i]!)}`));
    model.free();
  });
}

test('gpt2: greedy tokens with the fused MLP equal the usual form\'s, batched and replayed from graphs', async () => {
  const dir = join(root, 'gpt2-tokens');
  writeModelFolder(dir, 'gpt2', GPT2 as never, 5);
  const { backend, counts } = countingBackend();
  const { model } = loadDecoderModel(dir, backend);
  const prompts = [PROMPT, PROMPT.slice(0, 3), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11], [4, 4, 4], [200, 100], [1]];
  const run = async (mode: 'on' | 'off', batch: readonly (readonly number[])[]) => {
    fusedMlpOptions.mode = mode;
    return generateBatch(model, batch, { maxNewTokens: 9, temperature: 0, stopTokenIds: [], engineOptions: { graphs: true } });
  };
  for (const batch of [prompts, prompts.slice(0, 1), prompts.slice(1, 4)]) {
    const usual = await run('off', batch);
    const before = counts.normMlp;
    assert.deepEqual(await run('on', batch), usual, `${batch.length} prompts`);
    assert.ok(counts.normMlp > before);
  }
  model.free();
});

test('fusedMlp: only non-gated MLPs with an fc epilogue, and in auto mode where the backend fuses them', () => {
  const backend = new CpuBackend();
  fusedMlpOptions.mode = 'on';
  const { llama, gpt2, free } = qualificationForwards(root, backend);
  const views = (f: DecoderForward, b: CpuBackend, rows: number) => (f as unknown as { fusedMlpViews(ops: CpuBackend, rows: number): unknown }).fusedMlpViews(b, rows);
  assert.notEqual(views(gpt2, backend, 8), undefined);
  assert.equal(views(llama, backend, 8), undefined, 'a gated MLP');
  fusedMlpOptions.mode = 'auto';
  assert.equal(views(gpt2, backend, 1), undefined, 'the CPU backend fuses no MLP');
  const fusing = Object.assign(new CpuBackend(), { fusesMlp: (rows: number) => rows <= 4 });
  assert.notEqual(views(gpt2, fusing, 1), undefined);
  assert.equal(views(gpt2, fusing, 8), undefined, "past the accumulators' rows (built in 'on' mode for 32): the backend declines 8");
  fusedMlpOptions.mode = 'off';
  assert.equal(views(gpt2, backend, 1), undefined);
  free();
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
