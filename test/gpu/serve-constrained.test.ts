// Constrained requests (structured outputs) in the serving engine on CUDA, f32 tiny random GPT-2 and Llama
// folders (whitespace quietened: hf-folder.ts quietWhitespace): every answer parses and
// fits its schema; batched with unconstrained requests — graphs, pipelined steps, chunked prefill — each
// request's tokens equal its own alone; greedy answers equal the CPU engine's; requests with a logit_bias or
// frequency / presence penalties among them the same. Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createByteTokenizer } from '../../src/io/byte-tokenizer.js';
import { tokenByteTable } from '../../src/io/token-bytes.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import type { SamplingOptions } from '../../src/infer/sampling.js';
import { compileJsonSchema } from '../../src/infer/structured/json-schema.js';
import { JsonConstraint, TokenVocabulary } from '../../src/infer/structured/token-mask.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { FinishReason, ServingEngineOptions } from '../../src/serve/engine.js';
import { quietWhitespace, TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import { createGpuBackend, gpuSkip } from './device.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-constrained-'));
after(() => rmSync(root, { recursive: true, force: true }));

const EOS = 256;
const vocabulary = new TokenVocabulary(tokenByteTable(createByteTokenizer(), 257));
const SCHEMA = compileJsonSchema({
  type: 'object',
  properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: -50, maximum: 50 }, word: { type: 'string', maxLength: 6 }, tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 2 } },
  required: ['ok', 'n', 'word', 'tags'], additionalProperties: false,
});
const PROMPTS = [[12, 40, 7, 99, 3], [12, 40, 7, 99, 3, 18, 20, 21], Array.from({ length: 30 }, (_, i) => 100 + i), [9, 33, 1], [12, 40, 7, 99, 3, 18, 20, 21, 22, 23]];
const CONSTRAINED = [true, false, true, true, false];
const MAX_TOKENS = [300, 40, 300, 300, 25];
/** logit_bias on an unconstrained request and a constrained one (biasLogits, then the row sampled again). */
const BIAS: (readonly (readonly [number, number])[] | undefined)[] = [undefined, [[65, 4], [66, -100], [32, 2]], [[0x22, 1.5]], undefined, undefined];
/** Frequency / presence penalties (biases from the answer's tokens so far): on a plain request and a constrained one. */
const PENALTIES: ({ frequencyPenalty?: number; presencePenalty?: number } | undefined)[] = [undefined, undefined, undefined, { presencePenalty: 0.8 }, { frequencyPenalty: 1.2, presencePenalty: -0.3 }];

function serve(model: DecoderModel, options: ServingEngineOptions, sampling: SamplingOptions, indices = PROMPTS.map((_, i) => i)): { tokens: number[]; reason: FinishReason | undefined }[] {
  const engine = new ServingEngine(model, options);
  const out = indices.map((i) => {
    const o = { tokens: [] as number[], reason: undefined as FinishReason | undefined };
    engine.submit({
      prompt: PROMPTS[i]!, maxTokens: MAX_TOKENS[i]!, sampling: resolveSampling({ ...sampling, seed: 40 + i }), stopTokenIds: [EOS],
      ...(CONSTRAINED[i] ? { constraint: new JsonConstraint(SCHEMA, vocabulary, [EOS]) } : {}), ...(BIAS[i] ? { logitBias: BIAS[i] } : {}),
      ...PENALTIES[i],
      onToken: (e) => o.tokens.push(e.token), onFinish: (r) => { o.reason = r; },
    });
    return o;
  });
  engine.runToCompletion();
  assert.equal(engine.pool.usedBlocks, 0, 'every block came back');
  engine.dispose();
  return out;
}

for (const family of ['gpt2', 'llama'] as const) {
  test(`${family}: constrained answers on CUDA are valid JSON, the same alone and batched (graphs, pipelined), greedy the same as the CPU's`, { skip }, async () => {
    const gpu = await createGpuBackend(), cpu = new CpuBackend();
    const dir = join(root, family);
    const config = family === 'gpt2' ? { ...TINY_GPT2, hidden: 64, heads: 2, ffn: 256, maxPositions: 400 } : { ...TINY_LLAMA, hidden: 128, heads: 8, kvHeads: 2, headDim: 16, ffn: 192, maxPositions: 400 };
    writeModelFolder(dir, family, config, 6, {
      edit: quietWhitespace(family),
    });
    const load = (b: Backend) => loadDecoderModel(dir, b, { dtype: 'f32' }).model;
    const onGpu = load(gpu), onCpu = load(cpu);
    for (const sampling of [{ temperature: 0 }, { temperature: 1, topK: 0 }, { temperature: 0.8, topP: 0.9 }] as SamplingOptions[]) {
      const what = JSON.stringify(sampling);
      const alone = PROMPTS.map((_, i) => serve(onGpu, { maxRunning: 1, maxBatchTokens: 400, prefixCaching: false, graphs: false, pipeline: false }, sampling, [i])[0]!);
      alone.forEach((o, i) => {
        if (!CONSTRAINED[i]) return;
        assert.equal(o.reason, 'stop', `${what}: request ${i} ended at its closing brace`);
        const value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(o.tokens))) as Record<string, unknown>;
        assert.deepEqual(Object.keys(value), ['ok', 'n', 'word', 'tags']);
        assert.ok(Number.isInteger(value['n']) && Math.abs(value['n'] as number) <= 50);
      });
      for (const options of [
        { maxRunning: 5, maxBatchTokens: 24, blockSize: 8, graphs: true, pipeline: true },
        { maxRunning: 5, maxBatchTokens: 64, blockSize: 8, graphs: false, pipeline: false },
      ] as ServingEngineOptions[]) {
        assert.deepEqual(serve(onGpu, options, sampling), alone, `${what} batched ${JSON.stringify(options)}`);
      }
      if (sampling.temperature === 0) assert.deepEqual(serve(onCpu, { maxRunning: 5, maxBatchTokens: 24, blockSize: 8 }, sampling), alone, 'greedy on the CPU');
    }
    onGpu.free();
    onCpu.free();
  });
}
