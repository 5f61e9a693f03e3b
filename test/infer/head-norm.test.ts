// The decode step's final norm and LM head as one normLinear (headNormOptions): on the CPU the decode logits
// and greedy tokens equal the usual form's (residualNorm, then the head GEMM), for GPT-2 (LayerNorm, the
// fused MLP's f32 accumulator as y too) and Llama (RMSNorm); the head's normLinear is what ran.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import type { NormLinearArgs } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { fusedMlpOptions, headNormOptions } from '../../src/infer/forward.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { TINY_GPT2, writeModelFolder } from './hf-folder.js';
import { LLAMA, PROMPT, prefillAndStepLogits, relError } from './forward-forms.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-head-norm-'));
after(() => rmSync(root, { recursive: true, force: true }));
afterEach(() => { headNormOptions.enabled = false; fusedMlpOptions.mode = 'auto'; });

for (const [family, config, fused] of [['gpt2', TINY_GPT2, false], ['gpt2', TINY_GPT2, true], ['llama', LLAMA, false]] as const) {
  test(`${family}${fused ? ' with the fused MLP' : ''}: the head with the final norm in its normLinear gives the usual logits and tokens`, async () => {
    const dir = join(root, `${family}-${fused}`);
    writeModelFolder(dir, family, config as never, 4);
    const backend = new CpuBackend();
    const { model } = loadDecoderModel(dir, backend);
    let heads = 0;
    const normLinear = backend.normLinear.bind(backend);
    backend.normLinear = (args: NormLinearArgs) => { if (args.linear.kind === 'gemm' && args.linear.b === model.lmHead) heads++; normLinear(args); };
    fusedMlpOptions.mode = fused ? 'on' : 'off';
    const run = async (on: boolean) => {
      headNormOptions.enabled = on;
      const logits = prefillAndStepLogits(model);
      const tokens = await generateBatch(model, [PROMPT, [5, 6, 7]], { maxNewTokens: 7, temperature: 0, stopTokenIds: [], engineOptions: { graphs: true } });
      return { logits, tokens };
    };
    const usual = await run(false);
    assert.equal(heads, 0);
    const ours = await run(true);
    assert.ok(heads > 0, 'the decode steps ran the head as a normLinear');
    ours.logits.steps.forEach((row, i) => assert.ok(relError(row, usual.logits.steps[i]!) < 1e-6, `step ${i}: rel err ${relError(row, usual.logits.steps[i]!)}`));
    assert.deepEqual(ours.tokens, usual.tokens);
    model.free();
  });
}
