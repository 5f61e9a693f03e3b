// The LM head forming each row's greedy pick (GemmArgs.argmax, RowArgmax) and sampleTokens reading it
// (headArgmaxOptions): the packing on the CPU backend — the largest stored value, the lowest column on ties,
// −0 as +0, NaN skipped, padding columns ignored, max-combined into the slot —, the sampler taking the pick
// for greedy rows without a penalty and zeroing every slot, and decoding with it on giving the usual tokens
// (greedy, sampled, penalised; GPT-2 with and without the fused MLP, Llama; INT8 and INT4 heads).

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import type { GemmArgs, Int4LinearArgs, Int8LinearArgs, SampleTokensArgs } from '../../src/backend/backend.js';
import { argmaxColumn, argmaxKey, argmaxValue, packArgmax } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { combineRowArgmax } from '../../src/backend/cpu/gemm.js';
import { fusedMlpOptions, headArgmaxOptions } from '../../src/infer/forward.js';
import { generateBatch } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { quantizeDecoderModel } from '../../src/infer/quantized.js';
import { TINY_GPT2, writeModelFolder } from './hf-folder.js';
import { LLAMA, PROMPT } from './forward-forms.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-head-argmax-'));
after(() => rmSync(root, { recursive: true, force: true }));
afterEach(() => { headArgmaxOptions.mode = 'auto'; fusedMlpOptions.mode = 'auto'; });

test('argmaxKey orders floats as numbers; packArgmax breaks ties to the lower column', () => {
  const values = [-Infinity, -3.3e38, -2, -1e-30, 0, 1e-30, 1, 7.25, 3.3e38, Infinity];
  for (let i = 1; i < values.length; i++) assert.ok(argmaxKey(values[i]!) > argmaxKey(values[i - 1]!), `${values[i]} above ${values[i - 1]}`);
  assert.equal(argmaxKey(-0), argmaxKey(0));
  for (const v of values) assert.equal(argmaxValue(argmaxKey(v)), Math.fround(v), `argmaxValue inverts argmaxKey at ${v}`);
  const [lowA] = packArgmax(5, 3), [lowB] = packArgmax(5, 9);
  assert.ok(lowA > lowB, 'the lower column packs larger');
  assert.equal(argmaxColumn(...packArgmax(1.5, 12345)), 12345);
  assert.equal(argmaxColumn(0, 0), undefined);
});

test('the CPU packing: the stored maximum over classes, ties low, −0 as +0, NaN skipped, combined with the slot', () => {
  const values = Float32Array.from([
    1, 4, NaN, 4, -0, 9,                          // row 0: 4 at columns 1 and 3 (1 wins); column 5 is padding
    -Infinity, -2, -2, -Infinity, -5, 100,        // row 1: −2 at 1 and 2 (1 wins)
    NaN, NaN, 0, -0, NaN, NaN,                    // row 2: 0 and −0 tie (column 2)
    NaN, NaN, NaN, NaN, NaN, 1,                   // row 3: nothing but NaN below classes: the slot stays 0
    3, 2, 1, 0, -1, 5,                            // row 4: the slot starts higher and stays
  ]);
  const start = packArgmax(1e30, 0);
  const slots = Int32Array.from([0, 0, 0, 0, 0, 0, 0, 0, ...start.map((x) => x | 0)]);
  combineRowArgmax(values, 6, 5, slots);
  const columns = [0, 1, 2, 3, 4].map((m) => argmaxColumn(slots[2 * m]!, slots[2 * m + 1]!));
  assert.deepEqual(columns, [1, 1, 2, undefined, 0]);
  assert.deepEqual([slots[0]! >>> 0, slots[1]! >>> 0], packArgmax(4, 1));
  assert.deepEqual([slots[4]! >>> 0, slots[5]! >>> 0], packArgmax(0, 2));
  assert.deepEqual([slots[8]! >>> 0, slots[9]! >>> 0], start);
});

test('gemm with argmax on the CPU packs the rows of out it wrote; bad slots are refused by name', () => {
  const b = new CpuBackend();
  const tensor = (shape: number[], dtype: 'f32' | 'i32', values: Float32Array | Int32Array) => { const t = b.empty(shape, dtype); b.upload(t, values); return t; };
  // out = a·wᵀ with a = I₂: out[m, n] = w[n, m].
  const w = Float32Array.from([0.5, 3, 2, -1, 2, 3, 9, 9]);  // [4, 2]: row 0 of out 0.5, 2, 2, 9; row 1 3, −1, 3, 9
  const a = tensor([2, 2], 'f32', Float32Array.from([1, 0, 0, 1])), weight = tensor([4, 2], 'f32', w);
  const slots = tensor([2, 2], 'i32', new Int32Array(4)), out = b.empty([2, 4], 'f32');
  b.gemm({ a, b: weight, out, transB: true, argmax: { out: slots, classes: 3 } });
  const words = b.download(slots) as Int32Array;
  assert.deepEqual([argmaxColumn(words[0]!, words[1]!), argmaxColumn(words[2]!, words[3]!)], [1, 0]);
  assert.throws(() => b.gemm({ a, b: weight, out, transB: true, argmax: { out: b.empty([2], 'i32'), classes: 3 } }), /'argmax.out' must be \[2, 2\]/);
  assert.throws(() => b.gemm({ a, b: weight, out, transB: true, argmax: { out: slots, classes: 5 } }), /'argmax.classes' must be an integer in \[1, 4\]/);
});

const CASES = [['gpt2', TINY_GPT2, false, 0], ['gpt2', TINY_GPT2, true, 0], ['llama', LLAMA, false, 0], ['llama', LLAMA, false, 8], ['gpt2', TINY_GPT2, false, 4]] as const;
for (const [family, config, fused, bits] of CASES) {
  test(`${family}${fused ? ' with the fused MLP' : ''}${bits ? `, INT${bits} with an INT${bits} head` : ''}: decoding with the head's greedy picks gives the usual tokens`, async () => {
    const dir = join(root, `${family}-${fused}-${bits}`);
    writeModelFolder(dir, family, config as never, 4);
    const backend = new CpuBackend();
    const { model } = loadDecoderModel(dir, backend);
    if (bits) {
      quantizeDecoderModel(model, { method: 'rtn', bits, groupSize: 32, lmHead: true });
    }
    const seen = { heads: 0, samplers: 0 };
    const gemm = backend.gemm.bind(backend), sampleTokens = backend.sampleTokens.bind(backend);
    const int8Linear = backend.int8Linear.bind(backend), int4Linear = backend.int4Linear.bind(backend);
    backend.gemm = (args: GemmArgs) => { if (args.argmax) seen.heads++; gemm(args); };
    backend.int8Linear = (args: Int8LinearArgs) => { if (args.argmax) seen.heads++; int8Linear(args); };
    backend.int4Linear = (args: Int4LinearArgs) => { if (args.argmax) seen.heads++; int4Linear(args); };
    backend.sampleTokens = (args: SampleTokensArgs) => { if (args.argmax) seen.samplers++; sampleTokens(args); };
    fusedMlpOptions.mode = fused ? 'on' : 'off';
    const prompts = [PROMPT, [5, 6, 7], [9, 9, 9, 9]];
    for (const sampling of [{ temperature: 0 }, { temperature: 0.9, seed: 3 }, { temperature: 0, repetitionPenalty: 1.4 }]) {
      const run = async (mode: 'on' | 'off') => {
        headArgmaxOptions.mode = mode;
        return generateBatch(model, prompts, { maxNewTokens: 7, stopTokenIds: [], engineOptions: { graphs: true }, ...sampling });
      };
      const usual = await run('off');
      assert.deepEqual(seen, { heads: 0, samplers: 0 });
      assert.deepEqual(await run('on'), usual, JSON.stringify(sampling));
      assert.ok(seen.heads > 0 && seen.samplers === seen.heads, `the decode steps formed and read the picks (${JSON.stringify(seen)})`);
      seen.heads = seen.samplers = 0;
    }
    model.free();
  });
}
