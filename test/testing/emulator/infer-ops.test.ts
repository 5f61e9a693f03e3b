// The decode-step op cases (src/testing/infer-op-cases.ts, the table `npm run test:gpu` runs on the GPU) on the
// CUDA backend's kernels run by the kernel emulator, against the CPU reference: fresh random inputs, outputs
// poisoned first, sampled tokens compared exactly. Then decode attention's cases again with its pipelined and
// its throughput variants forced, and the
// fused MLP's and the sampler's probes.
// FUSEFORMER_EMULATOR_OPS=a,b runs only the cases whose name contains one of the words. Skips where the
// emulator cannot compile (no g++ or CUDA headers).

import { test } from 'node:test';
import { decodeAttentionOptions } from '../../../src/backend/cuda/kernels/decode-attention.js';
import { mlpOptions } from '../../../src/backend/cuda/kernels/gemv-mlp.js';
import { sampleTokensForcedSplits, sampleTokensPreload } from '../../../src/backend/cuda/kernels/sample-tokens.js';
import { emulatorUnavailable } from '../../../src/testing/emulator/host.js';
import { inferOpCases } from '../../../src/testing/infer-op-cases.js';
import { checkOnEmulator, selectedCases } from './emulated-cases.js';

const skip = emulatorUnavailable() ?? false;

test('decode-step ops on the emulated CUDA backend match the CPU reference', { skip, timeout: 40 * 60_000 }, async (t) => {
  await checkOnEmulator(t, selectedCases(inferOpCases()));
});

/** The cases matching `pattern` again with a launcher option changed by `apply` (undone by what it returns). */
function variant(title: string, pattern: RegExp, apply: () => () => void): void {
  test(`${title}, on the emulated CUDA backend, matches the CPU reference`, { skip, timeout: 15 * 60_000 }, async (t) => {
    const restore = apply();
    try {
      await checkOnEmulator(t, selectedCases(inferOpCases()).filter((c) => pattern.test(c.name)));
    } finally {
      restore();
    }
  });
}

function withOptions<O extends object>(options: O, set: Partial<O>): () => () => void {
  return () => {
    const saved = { ...options };
    Object.assign(options, set);
    return () => Object.assign(options, saved);
  };
}

function withEnv(name: string, value: string): () => () => void {
  return () => {
    const saved = process.env[name];
    process.env[name] = value;
    return () => { if (saved === undefined) delete process.env[name]; else process.env[name] = saved; };
  };
}

const attention = /^(append)?[dD]ecodeAttention /;
variant('decode attention, pipelined variant forced', attention, withOptions(decodeAttentionOptions, { pipelined: true }));
variant('decode attention, throughput variant forced', attention, withOptions(decodeAttentionOptions, { throughput: true, pipelined: false }));
// The probes of session 38, which the GPU has not run yet.
variant('normMlp with vector atomics (FUSEFORMER_MLP_RED_V4)', /^normMlp /, withOptions(mlpOptions, { vectorRed: true }));
variant('normMlp triggering the next kernel after its sums (FUSEFORMER_MLP_EARLY_TRIGGER=0)', /^normMlp /, withOptions(mlpOptions, { earlyTrigger: false }));
variant('normMlp at 8 features a block (FUSEFORMER_MLP_FEATURES=8)', /^normMlp /, withEnv('FUSEFORMER_MLP_FEATURES', '8'));
// 32 features a block fit the registers at 16-bit and H ≤ 768 (elsewhere the op refuses the forced size, by design).
variant('normMlp at 32 features a block (FUSEFORMER_MLP_FEATURES=32)', /^normMlp (f16|bf16) rows=\d H=(768|136) /, withEnv('FUSEFORMER_MLP_FEATURES', '32'));
variant('sampleTokens with each row in one block (FUSEFORMER_SAMPLE_SPLITS=1)', /^sampleTokens /, withOptions(sampleTokensForcedSplits, { splits: 1 }));
variant('sampleTokens at 3 splits a row (FUSEFORMER_SAMPLE_SPLITS=3)', /^sampleTokens /, withOptions(sampleTokensForcedSplits, { splits: 3 }));
variant('sampleTokens with the first logits requested before the row state (FUSEFORMER_SAMPLE_PRELOAD)', /^sampleTokens /, withOptions(sampleTokensPreload, { enabled: true }));
