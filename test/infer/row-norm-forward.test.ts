// The decode forward with the RMS norms split across the products (rowNormOptions: the O and down
// products leave x ⊙ γ and x's partial sums of squares, QKV and the MLP's first product scale their rows
// by 1/rms): on the CPU its logits match the float64 reference and the usual form's, its greedy tokens
// equal the usual form's with no norm kernel between the products, and it is taken only for the models
// and backends it is meant for.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import type { GemmArgs, NormLinearArgs, ResidualNormArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { rowNormOptions } from '../../src/infer/forward.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { writeModelFolder } from './hf-folder.js';
import { llamaReferenceLogits } from './reference-forward.js';
import { LLAMA, PROMPT, prefillAndStepLogits, qualificationForwards, relError } from './forward-forms.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-row-norm-'));
after(() => rmSync(root, { recursive: true, force: true }));
afterEach(() => { rowNormOptions.mode = 'auto'; rowNormOptions.mlp = false; });

/** A CPU backend counting the products with rowSquares / rowScale and the norms run (residualNorm and normLinear). */
function countingBackend(): { backend: CpuBackend; counts: { rowSquares: number; rowScale: number; norms: number } } {
  const backend = new CpuBackend(), counts = { rowSquares: 0, rowScale: 0, norms: 0 };
  const gemm = backend.gemm.bind(backend);
  const normLinear = backend.normLinear.bind(backend), residualNorm = backend.residualNorm.bind(backend);
  backend.gemm = (args: GemmArgs) => { if (args.rowSquares) counts.rowSquares++; if (args.rowScale) counts.rowScale++; gemm(args); };
  // (gatedLinear's CPU form is a gemm with its rowScale: counted there.)
  // normLinear's CPU form calls residualNorm: count the calls from outside only.
  let inside = false;
  backend.normLinear = (args: NormLinearArgs) => { counts.norms++; inside = true; try { normLinear(args); } finally { inside = false; } };
  backend.residualNorm = (args: ResidualNormArgs) => { if (!inside) counts.norms++; residualNorm(args); };
  return { backend, counts };
}

for (const mlp of [false, true]) test(`llama: the norms ${mlp ? 'before QKV and the MLP' : 'before QKV'} split across the products give the reference prefill logits and the usual decode logits`, () => {
  const dir = join(root, 'llama');
  const weights = writeModelFolder(dir, 'llama', LLAMA, 3);
  const { backend, counts } = countingBackend();
  const { model } = loadDecoderModel(dir, backend);
  const logits = (mode: 'on' | 'off') => {
    rowNormOptions.mode = mode;
    rowNormOptions.mlp = mlp;
    return prefillAndStepLogits(model);
  };
  const off = logits('off');
  assert.equal(counts.rowSquares + counts.rowScale, 0, 'the usual form runs its norms');
  const normsOff = counts.norms;
  counts.norms = 0;
  const on = logits('on');
  // A forward of 3 layers: the first two down products leave the sums and the last two QKV products read
  // them (2 each), with mlp the O products and the MLPs too (5); norms: layer 0's and the final one, and
  // without mlp the MLPs' (5 against 7 a forward, 2 with mlp).
  const split = mlp ? 5 : 2, norms = mlp ? 2 : 5;
  assert.ok(counts.rowSquares > 0 && counts.rowSquares % split === 0 && counts.rowScale === counts.rowSquares, `rowSquares ${counts.rowSquares}, rowScale ${counts.rowScale}`);
  assert.equal(counts.norms * 7, normsOff * norms, `norms on ${counts.norms}, off ${normsOff}: ${norms} a forward against 7`);
  const reference = llamaReferenceLogits(LLAMA, weights, PROMPT).flatMap((row) => [...row]);
  assert.ok(relError(on.prefill, reference) < 1e-5, `prefill rel err ${relError(on.prefill, reference)}`);
  on.steps.forEach((row, i) => assert.ok(relError(row, off.steps[i]!) < 1e-5, `step ${i}: rel err ${relError(row, off.steps[i]!)}`));
  model.free();
});

test('llama: greedy tokens with the norms split across the products equal the usual form\'s (graphs replayed)', async () => {
  const dir = join(root, 'llama-tokens');
  writeModelFolder(dir, 'llama', LLAMA, 5);
  const { backend, counts } = countingBackend();
  const { model } = loadDecoderModel(dir, backend);
  const prompts = [PROMPT, PROMPT.slice(0, 3), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11], [4, 4, 4], [200, 100], [1]];
  const run = async (mode: 'on' | 'off', mlp = false) => {
    rowNormOptions.mode = mode;
    rowNormOptions.mlp = mlp;
    return generateBatch(model, prompts, { maxNewTokens: 9, temperature: 0, stopTokenIds: [], engineOptions: { graphs: true } });
  };
  const usual = await run('off');
  assert.deepEqual(await run('on'), usual);
  assert.deepEqual(await run('on', true), usual);
  assert.ok(counts.rowScale > 0, 'the products scaled their rows');
  model.free();
});

test('rowNormInProducts: RMS-norm models without O / down biases or quantization, and in auto mode where the backend offers it', () => {
  const backend = new CpuBackend(), { llama, biased, gpt2, free } = qualificationForwards(root, backend);
  rowNormOptions.mode = 'on';
  assert.equal(llama.rowNormInProducts(backend, 8), true);
  assert.equal(biased.rowNormInProducts(backend, 8), false, 'an O-projection bias');
  assert.equal(gpt2.rowNormInProducts(backend, 8), false, 'LayerNorm');
  rowNormOptions.mode = 'auto';
  assert.equal(llama.rowNormInProducts(backend, 8), false, 'the CPU backend does not offer it');
  const offering = Object.assign(new CpuBackend(), { rowNormProducts: (rows: number) => rows >= 5 && rows <= 32 });
  assert.equal(llama.rowNormInProducts(offering, 8), true);
  assert.equal(llama.rowNormInProducts(offering, 1), false);
  rowNormOptions.mode = 'off';
  assert.equal(llama.rowNormInProducts(offering, 8), false);
  free();
});
