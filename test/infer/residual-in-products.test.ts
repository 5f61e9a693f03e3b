// The decode forward with the residual added by the O and down products (GEMMs accumulating into x,
// beta = 1) instead of by the norms after them (residualInProductsOptions): on the CPU its logits match
// the float64 reference and the usual form's, its tokens equal the usual form's, and it is taken only for
// the models and backends it is meant for.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import type { GemmArgs, NormLinearArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { residualInProductsOptions } from '../../src/infer/forward.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { writeModelFolder } from './hf-folder.js';
import { llamaReferenceLogits } from './reference-forward.js';
import { LLAMA, PROMPT, prefillAndStepLogits, qualificationForwards, relError } from './forward-forms.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-residual-'));
after(() => rmSync(root, { recursive: true, force: true }));
afterEach(() => { residualInProductsOptions.mode = 'auto'; });

/** A CPU backend that counts the accumulating GEMMs and the normLinear calls that add a residual. */
function countingBackend(): { backend: CpuBackend; counts: { accumulating: number; residualNorms: number } } {
  const backend = new CpuBackend(), counts = { accumulating: 0, residualNorms: 0 };
  const gemm = backend.gemm.bind(backend), normLinear = backend.normLinear.bind(backend);
  backend.gemm = (args: GemmArgs) => { if (args.beta === 1) counts.accumulating++; gemm(args); };
  backend.normLinear = (args: NormLinearArgs) => { if (args.norm.y) counts.residualNorms++; normLinear(args); };
  return { backend, counts };
}

test('llama: the residual added by the products gives the reference prefill logits and the usual decode logits', () => {
  const dir = join(root, 'llama');
  const weights = writeModelFolder(dir, 'llama', LLAMA, 3);
  const { backend, counts } = countingBackend();
  const { model } = loadDecoderModel(dir, backend);
  const logits = (mode: 'on' | 'off') => {
    residualInProductsOptions.mode = mode;
    return prefillAndStepLogits(model);
  };
  const off = logits('off');
  assert.equal(counts.accumulating, 0, 'the usual form adds the residual in the norms');
  const on = logits('on');
  assert.ok(counts.accumulating > 0, 'the O and down products accumulated into x');
  const reference = llamaReferenceLogits(LLAMA, weights, PROMPT).flatMap((row) => [...row]);
  assert.ok(relError(on.prefill, reference) < 1e-5, `prefill rel err ${relError(on.prefill, reference)}`);
  on.steps.forEach((row, i) => assert.ok(relError(row, off.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, off.steps[i]!)}`));
  model.free();
});

test('llama: with the residual in the products no norm adds one, and greedy tokens equal the usual form\'s', async () => {
  const dir = join(root, 'llama-tokens');
  writeModelFolder(dir, 'llama', LLAMA, 5);
  const { backend, counts } = countingBackend();
  const { model } = loadDecoderModel(dir, backend);
  const prompts = [PROMPT, PROMPT.slice(0, 3), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11], [4, 4, 4], [200, 100], [1]];
  const run = async (mode: 'on' | 'off') => {
    residualInProductsOptions.mode = mode;
    return generateBatch(model, prompts, { maxNewTokens: 9, temperature: 0, stopTokenIds: [], engineOptions: { graphs: true } });
  };
  const usual = await run('off');
  const before = counts.residualNorms;
  assert.ok(before > 0);
  assert.deepEqual(await run('on'), usual);
  assert.equal(counts.residualNorms, before, 'no normLinear added a residual');
  model.free();
});

test('residualInProducts: only RMS-norm models without O / down biases, and in auto mode where the backend forms the norm', () => {
  const backend = new CpuBackend(), { llama, biased, gpt2, free } = qualificationForwards(root, backend);
  residualInProductsOptions.mode = 'on';
  assert.equal(llama.residualInProducts(backend, 8), true);
  assert.equal(biased.residualInProducts(backend, 8), false, 'an O-projection bias would need beta with a bias epilogue');
  assert.equal(gpt2.residualInProducts(backend, 8), false, 'LayerNorm');
  residualInProductsOptions.mode = 'auto';
  assert.equal(llama.residualInProducts(backend, 8), false, 'the CPU backend forms no norm in a product');
  const forming = Object.assign(new CpuBackend(), { formsNormInProduct: (rows: number) => rows >= 5 && rows <= 32 });
  assert.equal(llama.residualInProducts(forming, 8), true);
  assert.equal(llama.residualInProducts(forming, 1), false);
  residualInProductsOptions.mode = 'off';
  assert.equal(llama.residualInProducts(forming, 8), false);
  free();
});
