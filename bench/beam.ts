// Beam-search translation speed against Hugging Face in the same run, on the GPU machine:
//  1. MarianMTModel at the Transformer-base size of opus-mt (random weights, saved by save_pretrained through
//     bench/hf_marian.py; final_logits_bias[eos] lowered so every run generates exactly max_new_tokens
//     positions on both sides), 4 beams, 64 new tokens, batch 1 and 32, bf16 and f32:
//       ours: translate() wall time (encoder, decoder steps as replayed CUDA graphs, host bookkeeping every
//             4 steps), per generated position; and the decoder step alone (device time, graphs back to back)
//       HF:   model.generate(num_beams=4, max_new_tokens=64) wall time per generated position (torch_beam.py)
//  2. HARS top-K (beamTopK: log-softmax + running score + top 2K, fused) against HF's path for the same step
//     (f32 log_softmax, add, torch.topk over K·V) and torch.topk alone, V = 32000 and 50257, 4 beams.
// Without python3/torch the PyTorch columns are left out and our side runs on our own random weights.
// Usage: node dist/bench/beam.js [--json bench/results/beam.json] [--iters 5] [--max-new-tokens 64] [--no-torch]

import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { Backend } from '../src/backend/backend.js';
import { selectBackend } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import { MARIAN_PRESETS } from '../src/models/marian.js';
import { generationSettingsFromJson } from '../src/infer/seq2seq-config.js';
import { Seq2SeqModel } from '../src/infer/seq2seq-model.js';
import type { Translator } from '../src/infer/seq2seq.js';
import { loadSeq2Seq, timeDecodeSteps, translate } from '../src/infer/seq2seq.js';
import { Rng } from '../src/testing/random.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/beam.json' },
    iters: { type: 'string', default: '5' },
    'max-new-tokens': { type: 'string', default: '64' },
    'no-torch': { type: 'boolean', default: false },
  },
});
const ITERS = Number(cli.iters), MAX_NEW = Number(cli['max-new-tokens']);
const BEAMS = 4, BATCHES = [1, 32], SOURCE_LENGTH = 24;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const { backend } = await selectBackend();
const report: Record<string, unknown> = { device: backend.description, beams: BEAMS, maxNewTokens: MAX_NEW, sourceLength: SOURCE_LENGTH };
const config = MARIAN_PRESETS['marian-base']!;

function python(script: string, args: string[], input?: string): string | null {
  if (cli['no-torch']) return null;
  const run = spawnSync('python3', [script, ...args], { encoding: 'utf8', timeout: 1_800_000, maxBuffer: 64 << 20, ...(input ? { input } : {}) });
  if (run.status !== 0) {
    console.log(`(${script} unavailable: ${(run.stderr || String(run.error)).trim().split('\n').pop()})`);
    return null;
  }
  return run.stdout;
}

// ---- the model: HF's save_pretrained output when torch is here, else our own random weights ----
const dir = mkdtempSync(join(tmpdir(), 'fuseformer-bench-beam-'));
const built = python('bench/hf_marian.py', ['build', dir, '--size', 'base', '--eos-bias', '-50', '--sources', String(Math.max(...BATCHES)),
  '--min-len', String(SOURCE_LENGTH), '--max-len', String(SOURCE_LENGTH)]) !== null;
const rng = new Rng(1);
const sources: number[][] = built
  ? (JSON.parse(readFileSync(join(dir, 'sources.json'), 'utf8')) as { sources: number[][] }).sources
  : Array.from({ length: Math.max(...BATCHES) }, () => [...Array.from(rng.ints(SOURCE_LENGTH - 1, 1, config.vocabSize - 1)), config.eosTokenId]);

function ourTranslator(dtype: FloatDType): Translator {
  if (built) return loadSeq2Seq(dir, backend, { dtype });
  const model = new Seq2SeqModel(backend, config, dtype);
  model.net.params.initialize(1n);
  const bias = model.net.params.param('final_logits_bias').value;
  const values = backend.download(bias) as Float32Array;
  values[config.eosTokenId] = -50;
  backend.upload(bias, values);
  const generation = generationSettingsFromJson({
    decoder_start_token_id: config.padTokenId, pad_token_id: config.padTokenId, eos_token_id: config.eosTokenId, forced_eos_token_id: config.eosTokenId,
    bad_words_ids: [[config.padTokenId]], num_beams: BEAMS, renormalize_logits: true,
  }, 'bench generation settings', config);
  return { model, generation, unusedTensors: [] };
}

// ---- 1. translation ----
const translationRows: Record<string, unknown>[] = [];
for (const dtype of ['bf16', 'f32'] as FloatDType[]) {
  const t = ourTranslator(dtype);
  const hf = python('bench/torch_beam.py', [], JSON.stringify({ mode: 'generate', dir, dtype, beams: BEAMS, max_new_tokens: MAX_NEW, batches: BATCHES, warmup: 2, iters: ITERS }));
  const theirs = hf && built ? JSON.parse(hf) as Record<string, { total_ms: number; steps: number }> : undefined;
  for (const batch of BATCHES) {
    const chunk = sources.slice(0, batch);
    const options = { numBeams: BEAMS, maxNewTokens: MAX_NEW };
    for (let i = 0; i < 2; i++) translate(t, chunk, options);
    const times: number[] = [];
    let steps = 0;
    for (let i = 0; i < ITERS; i++) {
      const start = performance.now();
      const out = translate(t, chunk, options);
      times.push(performance.now() - start);
      steps = Math.max(...out.map((r) => r.tokens.length));
    }
    const device = timeDecodeSteps(t, chunk, options);
    const row: Record<string, unknown> = {
      dtype, batch, steps, oursTotalMs: median(times), oursMsPerStep: median(times) / steps, oursDeviceStepMs: device.stepMs,
      ...(theirs ? { hfTotalMs: theirs[String(batch)]!.total_ms, hfSteps: theirs[String(batch)]!.steps, hfMsPerStep: theirs[String(batch)]!.total_ms / theirs[String(batch)]!.steps } : {}),
    };
    if (theirs) row.speedup = (row.hfMsPerStep as number) / (row.oursMsPerStep as number);
    translationRows.push(row);
  }
  t.model.dispose();
}
report.translation = translationRows;

// ---- 2. HARS top-K ----
function timeTopK(b: Backend, vocab: number, Vp: number, batch: number): number {
  const rows = batch * BEAMS, K = 2 * BEAMS;
  const logits = b.empty([rows, Vp], 'bf16');
  b.randomFill({ out: logits, seed: 3n, offset: 0n, distribution: 'normal', std: 2 });
  const beamScores = b.fromArray(rng.floats(rows, 2, -5), [rows], 'f32');
  const out = { tokens: b.empty([batch, K], 'i32'), sourceBeams: b.empty([batch, K], 'i32'), scores: b.empty([batch, K], 'f32') };
  const call = () => b.beamTopK({ logits, beams: BEAMS, classes: vocab, beamScores, bannedTokens: [vocab - 1], renormalize: true, ...out });
  call();
  const graph = b.captureGraph(() => { for (let i = 0; i < 20; i++) call(); });
  graph.replay();
  b.synchronize();
  const start = b.mark();
  for (let i = 0; i < ITERS * 4; i++) graph.replay();
  const end = b.mark();
  const us = (end.elapsedSince(start) * 1e3) / (ITERS * 4 * 20);
  start.dispose(); end.dispose(); graph.dispose();
  for (const x of [logits, beamScores, out.tokens, out.sourceBeams, out.scores]) b.free(x);
  return us;
}
const VOCABS: [number, number][] = [[32000, 32000], [50257, 50304], [58101, 58112]];
const torchTopK = python('bench/torch_beam.py', [], JSON.stringify({ mode: 'topk', vocabs: VOCABS.map((v) => v[0]), beams: BEAMS, batches: BATCHES, dtype: 'bf16', iters: 400 }));
const theirTopK = torchTopK ? JSON.parse(torchTopK) as Record<string, { hf_eager_us: number; hf_graph_us: number; topk_graph_us: number }> : undefined;
const topkRows = VOCABS.flatMap(([vocab, Vp]) => BATCHES.map((batch) => ({ vocab, batch, oursUs: timeTopK(backend, vocab, Vp, batch), ...(theirTopK?.[`${vocab}/${batch}`] ?? {}) })));
report.topk = topkRows;
rmSync(dir, { recursive: true, force: true });

if (cli.json) {
  mkdirSync(dirname(cli.json), { recursive: true });
  writeFileSync(cli.json, JSON.stringify(report, null, 1));
}
const fmt = (x: unknown, digits = 2) => (typeof x === 'number' ? x.toFixed(digits) : '–');
console.log(`\nMarianMTModel (Transformer-base, random weights), ${BEAMS} beams, ${MAX_NEW} new tokens, ${SOURCE_LENGTH}-token sources — ${backend.description}`);
console.log('| dtype | batch | ours ms/step | ours decoder step (device) ms | HF generate ms/step | speedup |');
console.log('|---|---|---|---|---|---|');
for (const r of translationRows) console.log(`| ${r.dtype} | ${r.batch} | ${fmt(r.oursMsPerStep, 3)} | ${fmt(r.oursDeviceStepMs, 3)} | ${fmt(r.hfMsPerStep)} | ${fmt(r.speedup, 1)}× |`);
console.log(`\nBeam top-K of one step (bf16 logits, ${BEAMS} beams, top ${2 * BEAMS} per item), µs per call`);
console.log('| V | batch | ours (HARS, fused) | HF path eager | HF path in a graph | torch.topk alone (graph) |');
console.log('|---|---|---|---|---|---|');
for (const r of topkRows) console.log(`| ${r.vocab} | ${r.batch} | ${fmt(r.oursUs, 1)} | ${fmt((r as { hf_eager_us?: number }).hf_eager_us, 1)} | ${fmt((r as { hf_graph_us?: number }).hf_graph_us, 1)} | ${fmt((r as { topk_graph_us?: number }).topk_graph_us, 1)} |`);
