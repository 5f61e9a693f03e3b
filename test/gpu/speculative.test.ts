// Speculative decoding on the GPU, with tiny random GPT-2 and Llama folders: extend() logits (one pass and
// chunked over the cache) against the CPU engine, extendGreedy()'s device picks against the host's argmax; greedy speculative output equal to plain greedy decoding
// (the graph-replayed decode path) on the GPU; the target's KV cache after a rejection equal to a fresh
// prefill; the first sampled token over 1200 fixed seeds against the target's distribution (chi-square).
// Skips without a GPU.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { createGpuBackend, gpuSkip } from './device.js';
import type { FloatDType } from '../../src/dtype.js';
import { DecodeEngine } from '../../src/infer/engine.js';
import { generate } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { resolveSampling } from '../../src/infer/sampling.js';
import { emptySpeculativeStats, SpeculativeSession } from '../../src/infer/speculative.js';
import { greedyToken, samplingDistribution } from '../../src/infer/speculative-accept.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import { chiSquare, chiSquareBound, nearDraftEdit } from '../infer/speculative-stats.js';
import './report-as-you-go.js';

const skip = gpuSkip();
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-spec-'));
after(() => rmSync(root, { recursive: true, force: true }));

const MODELS: { name: string; family: 'gpt2' | 'llama'; config: Gpt2Config | LlamaConfig }[] = [
  { name: 'gpt2', family: 'gpt2', config: { ...TINY_GPT2, hidden: 64, heads: 2, ffn: 256, maxPositions: 128 } },
  { name: 'llama', family: 'llama', config: { ...TINY_LLAMA, hidden: 128, heads: 8, kvHeads: 2, headDim: 16, ffn: 192, maxPositions: 128 } },
];
const PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17];

function relError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0, norm = 0;
  for (let i = 0; i < b.length; i++) { diff += (a[i]! - b[i]!) ** 2; norm += b[i]! ** 2; }
  return Math.sqrt(diff / norm);
}

for (const m of MODELS) {
  test(`${m.name}: extend() logits on the GPU match the CPU, whole and chunked over the cache`, { skip }, async () => {
    const gpu = await createGpuBackend(), cpu = new CpuBackend();
    const dir = join(root, `${m.name}-extend`);
    writeModelFolder(dir, m.family, m.config, 5);
    for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
      const run = (b: Backend) => {
        const model = loadDecoderModel(dir, b, { dtype }).model;
        const engine = new DecodeEngine(model, { maxBatch: 2, maxLen: 64, graphs: false });
        const whole = engine.extend(1, 0, PROMPT);
        const chunked = Float32Array.from([...engine.extend(0, 0, PROMPT.slice(0, 9)), ...engine.extend(0, 9, PROMPT.slice(9, 10)), ...engine.extend(0, 10, PROMPT.slice(10))]);
        const picks = engine.extendGreedy(1, 0, PROMPT, 6), V = model.vocabSize, n = PROMPT.length;
        const hostPicks = Array.from({ length: 6 }, (_, i) => greedyToken(whole.subarray((n - 6 + i) * V, (n - 5 + i) * V), { repetitionPenalty: 1 }, []));
        engine.dispose();
        // The graph engine's extendGreedy (decode-step kernels over the cache row, replayed from the second
        // call of a row count on): its picks for the last 6 prompt tokens, after an eager extend of the rest, three times.
        const graphed = new DecodeEngine(model, { maxBatch: 2, maxLen: 64, graphs: true });
        graphed.extend(1, 0, PROMPT.slice(0, n - 6));
        const replayed = [0, 1, 2].map(() => graphed.extendGreedy(1, n - 6, PROMPT.slice(n - 6)));
        // extend()'s logits through the replayed pass: the last 6 rows, twice (eager, then captured).
        const replayedLogits = [0, 1].map(() => graphed.extend(1, n - 6, PROMPT.slice(n - 6)));
        graphed.dispose();
        model.free();
        return { whole, chunked, picks, hostPicks, replayed, replayedLogits };
      };
      const g = run(gpu), c = run(cpu);
      assert.deepEqual(g.picks, g.hostPicks, `${dtype}: device greedy picks (extendGreedy) vs the host's argmax of the same logits`);
      for (const r of [...g.replayed, ...c.replayed]) {
        // bf16: the decode kernels round differently from the prefill's flash pass; a near tie may flip.
        const same = r.filter((t, i) => t === g.hostPicks[i]).length;
        assert.ok(dtype === 'f32' ? same === 6 : same >= 5, `${dtype}: replayed extendGreedy picks ${r} vs ${g.hostPicks}`);
      }
      const tolerance = dtype === 'f32' ? 1e-4 : 2e-2;
      const V = g.whole.length / PROMPT.length, tail = g.whole.subarray((PROMPT.length - 6) * V);
      for (const r of g.replayedLogits) {
        const e = relError(r, tail);
        assert.ok(e <= tolerance, `${dtype} replayed extend logits rel err ${e}`);
      }
      for (const key of ['whole', 'chunked'] as const) {
        const e = relError(g[key], c[key]);
        assert.ok(e <= tolerance, `${dtype} ${key} rel err ${e}`);
      }
    }
  });

  test(`${m.name}: greedy speculative output on the GPU equals plain greedy decoding (f32)`, { skip }, async () => {
    const gpu = await createGpuBackend();
    const targetDir = join(root, `${m.name}-target`), nearDir = join(root, `${m.name}-near`), otherDir = join(root, `${m.name}-other`);
    writeModelFolder(targetDir, m.family, m.config, 5);
    writeModelFolder(nearDir, m.family, m.config, 5, { edit: nearDraftEdit(m.family, 0.8) });
    writeModelFolder(otherDir, m.family, { ...m.config, layers: 1 }, 9);
    const target = loadDecoderModel(targetDir, gpu, { dtype: 'f32' }).model;
    const plain: number[] = [];
    for await (const t of generate(target, PROMPT, { maxNewTokens: 64, temperature: 0, stopTokenIds: [] })) plain.push(t);
    for (const dir of [nearDir, otherDir]) {
      const draft = loadDecoderModel(dir, gpu, { dtype: 'f32' }).model;
      const ours: number[] = [];
      const stats = emptySpeculativeStats();
      for await (const t of generate(target, PROMPT, { maxNewTokens: 64, temperature: 0, stopTokenIds: [], speculative: { draft, draftTokens: 4, stats } })) ours.push(t);
      assert.deepEqual(ours, plain, `draft ${dir}: α = ${stats.accepted / stats.drafted}`);
      draft.free();
    }
    target.free();
  });

  test(`${m.name}: GPU target KV cache after a rejection equals a fresh prefill (f32)`, { skip }, async () => {
    const gpu = await createGpuBackend();
    const targetDir = join(root, `${m.name}-rb-target`), draftDir = join(root, `${m.name}-rb-draft`);
    writeModelFolder(targetDir, m.family, m.config, 5);
    writeModelFolder(draftDir, m.family, m.config, 5, { edit: nearDraftEdit(m.family, 0.5) });
    const target = loadDecoderModel(targetDir, gpu, { dtype: 'f32' }).model, draft = loadDecoderModel(draftDir, gpu, { dtype: 'f32' }).model;
    const session = new SpeculativeSession(target, draft, PROMPT, 40, resolveSampling({ temperature: 1, topK: 8, seed: 3 }), [], { draftTokens: 4, adaptive: false });
    let rejected = false;
    while (!session.done && !rejected) {
      const { accepted, drafted } = session.stats;
      session.round();
      rejected = session.stats.accepted - accepted < session.stats.drafted - drafted;
    }
    assert.ok(rejected, 'no round rejected a draft token');
    const tv = session.targetCachedLength, arch = target.arch;
    const fresh = new DecodeEngine(target, { maxBatch: 1, maxLen: session.targetEngine.maxLen });
    fresh.start([{ prompt: session.tokens.slice(0, tv), maxNewTokens: 1, sampling: resolveSampling({ temperature: 0 }) }], []);
    const ours = gpu.download(session.targetEngine.cache.storage) as Float32Array, theirs = gpu.download(fresh.cache.storage) as Float32Array;
    const L = fresh.maxLen, d = arch.headDim;
    let worst = 0, scale = 0;
    for (let block = 0; block < arch.layers * 2 * arch.kvHeads; block++) {
      for (let i = block * L * d; i < (block * L + tv) * d; i++) {
        worst = Math.max(worst, Math.abs(ours[i]! - theirs[i]!));
        scale = Math.max(scale, Math.abs(theirs[i]!));
      }
    }
    assert.ok(worst <= 1e-4 * scale, `max |diff| ${worst} (max |k|, |v| ${scale})`);
    fresh.dispose();
    session.dispose();
    target.free();
    draft.free();
  });
}

test('GPU sampled speculative decoding: the first token over 1200 fixed seeds follows the target (chi-square)', { skip }, async () => {
  const gpu = await createGpuBackend();
  const m = MODELS[0]!;
  const targetDir = join(root, 'chi-target'), draftDir = join(root, 'chi-draft');
  writeModelFolder(targetDir, m.family, m.config, 5);
  writeModelFolder(draftDir, m.family, m.config, 5, { edit: nearDraftEdit(m.family, 0.6) });
  const target = loadDecoderModel(targetDir, gpu, { dtype: 'f32' }).model, draft = loadDecoderModel(draftDir, gpu, { dtype: 'f32' }).model;
  const settings = resolveSampling({ temperature: 1, topK: 8 });
  const V = target.vocabSize;
  const probeEngine = new DecodeEngine(target, { maxBatch: 1, maxLen: 32, graphs: false });
  const p = samplingDistribution(probeEngine.promptLogits(PROMPT).subarray((PROMPT.length - 1) * V), settings, PROMPT);
  probeEngine.dispose();
  const engines = { target: new DecodeEngine(target, { maxBatch: 1, maxLen: 32, graphs: false }), draft: new DecodeEngine(draft, { maxBatch: 1, maxLen: 32, graphs: false }) };
  const N = 1200, counts = new Array(V).fill(0), stats = emptySpeculativeStats();
  for (let s = 0; s < N; s++) {
    const session = new SpeculativeSession(target, draft, PROMPT, 3, { ...settings, seed: BigInt(s) }, [], { draftTokens: 2, adaptive: false, engines, stats });
    counts[session.round()[0]!]++;
    session.dispose();
  }
  const [stat, df] = chiSquare(counts, p, N);
  console.log(`# GPU tiny GPT-2, T = 1, top-k 8, K = 2: chi2 = ${stat.toFixed(2)} (df ${df}, bound ${chiSquareBound(df).toFixed(2)}); α = ${(stats.accepted / stats.drafted).toFixed(3)}`);
  assert.ok(stat < chiSquareBound(df), `chi2 ${stat} >= ${chiSquareBound(df)}`);
  assert.ok(stats.accepted > 0 && stats.accepted < stats.drafted, 'both acceptances and rejections should occur');
  engines.target.dispose();
  engines.draft.dispose();
  target.free();
  draft.free();
});
