// A decode step's kernels on their programmatic chain (runtime/timeline.ts): every kernel of the replayed
// step stamps the moment its grid-dependency wait returns, so each kernel's time is from its release to
// the next kernel's — the step as it runs, launches and weight prefetch overlapped as in the decode bench
// (the marker-node profile times each op alone; the removal profile lets neighbours absorb the removed op).
// Models as bench/decode.ts (random bf16 weights, 32-token prompts, greedy); the first steps compile and
// capture the step's graph, then `--steps` replayed steps are recorded.
//
// Usage: node dist/bench/decode-timeline.js [--models gpt2,llama] [--batch 1] [--quant bf16,int4-head,int8-head]
//                                           [--steps 8] [--json FILE]
// CUDA only (the stamps are device code); it sets FUSEFORMER_TIMELINE=1 for its own process.

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import { stepChains, summarizeChains, summarizeRoles } from '../src/backend/cuda/runtime/timeline.js';
import { DecodeEngine } from '../src/infer/engine.js';
import { randomDecoderModel } from '../src/infer/model.js';
import { quantizeDecoderModel } from '../src/infer/quantized.js';
import { resolveSampling } from '../src/infer/sampling.js';
import { presetConfig } from '../src/models/registry.js';

const { values: cli } = parseArgs({
  options: {
    models: { type: 'string', default: 'gpt2,llama' },
    batch: { type: 'string', default: '1' },
    quant: { type: 'string', default: 'bf16' },
    steps: { type: 'string', default: '8' },
    json: { type: 'string' },
  },
});
const MODELS: Record<string, string> = { gpt2: 'gpt2-124M', llama: 'llama-1.2B' };
const PRECISIONS: Record<string, { bits?: 4 | 8; lmHead?: boolean }> = {
  bf16: {}, int4: { bits: 4 }, int8: { bits: 8 }, 'int4-head': { bits: 4, lmHead: true }, 'int8-head': { bits: 8, lmHead: true },
};
const batch = Number(cli.batch), steps = Number(cli.steps), PROMPT = 32;
if (!Number.isInteger(batch) || batch < 1) throw new Error(`--batch: a positive integer, got '${cli.batch}'`);
if (!Number.isInteger(steps) || steps < 2) throw new Error(`--steps: an integer of at least 2, got '${cli.steps}'`);
const models = cli.models!.split(',');
for (const m of models) if (!MODELS[m]) throw new Error(`--models: '${m}' is not one of ${Object.keys(MODELS).join(', ')}`);
const precisions = cli.quant!.split(',');
for (const p of precisions) if (!PRECISIONS[p]) throw new Error(`--quant: '${p}' is not one of ${Object.keys(PRECISIONS).join(', ')}`);

process.env['FUSEFORMER_TIMELINE'] = '1';
const { backend } = await selectBackend('cuda');
const timeline = (backend as CudaBackend).runtime.timeline;
if (!timeline) throw new Error('the CUDA runtime was created without its timeline (FUSEFORMER_TIMELINE=1)');

const results: Record<string, unknown>[] = [];
for (const key of models) {
  for (const precision of precisions) {
    const config = presetConfig(MODELS[key]!);
    const model = randomDecoderModel(config, backend, { dtype: 'bf16', seed: 1n });
    const q = PRECISIONS[precision]!;
    if (q.bits) quantizeDecoderModel(model, { method: 'rtn', bits: q.bits, groupSize: 128, lmHead: q.lmHead ?? false });
    const engine = new DecodeEngine(model, { maxBatch: batch, maxLen: PROMPT + steps + 16 });
    const vocab = model.arch.vocabSize;
    const requests = Array.from({ length: batch }, (_, b) => ({
      prompt: Array.from({ length: PROMPT }, (_, i) => (b * 7919 + i * 104729) % vocab), maxNewTokens: steps + 8, sampling: resolveSampling({ temperature: 0 }),
    }));
    engine.start(requests, []);
    engine.decode(3);  // compiles, tunes, captures the step's graph
    backend.synchronize();
    timeline.arm(4096);
    engine.decode(steps);
    backend.synchronize();
    const { stamps, dropped } = timeline.read();
    engine.collect();
    engine.dispose();
    model.free();
    const chains = stepChains(stamps, (name) => name.startsWith('embed_tokens'));
    const { kernels, stepUs } = summarizeChains(chains);
    const label = `${MODELS[key]} ${precision} batch ${batch}`;
    const median = [...stepUs].sort((a, b) => a - b)[Math.floor(stepUs.length / 2)] ?? NaN;
    console.log(`\n## ${label}: ${chains.length} steps recorded, median ${median.toFixed(1)} µs a step (${stamps.length} stamps${dropped ? `, ${dropped} dropped` : ''})`);
    console.log('| kernel | a step | median µs | µs a step | % of step |');
    console.log('|---|---:|---:|---:|---:|');
    const total = kernels.reduce((a, k) => a + k.stepUs, 0);
    for (const k of kernels) console.log(`| ${k.kernel} | ${k.perStep} | ${k.medianUs.toFixed(2)} | ${k.stepUs.toFixed(1)} | ${((100 * k.stepUs) / total).toFixed(1)}% |`);
    // The same stamps by role: a kernel run r times a layer split into its r products (output / down projection).
    const roles = summarizeRoles(chains, model.arch.layers);
    console.log('\n| kernel | role | a step | median µs |');
    console.log('|---|---|---:|---:|');
    for (const r of roles) console.log(`| ${r.kernel} | ${r.role} | ${r.perStep} | ${r.medianUs.toFixed(2)} |`);
    results.push({ model: MODELS[key], precision, batch, steps: chains.length, stepUs, kernels, roles, dropped });
  }
}
if (cli.json) {
  mkdirSync(dirname(cli.json), { recursive: true });
  writeFileSync(cli.json, `${JSON.stringify({ date: new Date().toISOString(), device: backend.description, results }, null, 1)}\n`);
  console.log(`\nwrote ${cli.json}`);
}
