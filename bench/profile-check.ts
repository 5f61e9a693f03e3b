// `npm run check:profile`: the profiler checked on the GPU.
//  1. GPT-2 124M training step (16 × 1024, bf16; with the fused attention op, the default, and with
//     the LightSeq path): the op times of the profiled run add up to the step time measured on its own
//     (the replayed CUDA graph) within 5%; BERT-base's (32 × 256) sum is reported beside them. No op
//     was launched while the GPU waited for the host (the queue-ahead worked).
//  2. Roofline placement of three kernels against formulas written out here, independently of
//     src/profile/cost.ts: the QKV projection GEMM, LayerNorm forward, and attention — the LightSeq
//     path's Q·Kᵀ batched GEMM and causal softmax in the GPT-2 step, and flashAttentionForward in a
//     GPT-2 step with the fused attention op. FLOPs and bytes per call must match exactly; the
//     measured point must sit at or below its roof (≤ 110% of it: timing noise, and L2 hits the
//     minimum-bytes count cannot see).
//  3. Decode steps of the inference engine (GPT-2 124M, 8 × 512 cached tokens; the Llama 1.2B config,
//     1 × 512, GQA 32/8): the GPU never waited for the host, and decode attention's FLOPs and bytes
//     match a formula over the real key counts (for GQA, K and V read once per KV head); their op
//     times (marker nodes in the replayed graph) add up to the replayed step within 5%.
// Programmatic dependent launch is turned off for all of it (see the comment at its line).
// Writes into --out (default $OUT, else ./profile-check-out): check.json (every check with its
// numbers), and per profile a directory with profile.json and roofline.svg/png. Exit code 1 if a
// check fails.
// --dry-run: the same steps at toy sizes on the CPU backend, checking only the FLOP and byte counts
// (no timing checks; nominal roofs), so the formulas here and the cost model can be compared anywhere.
//
// Usage: node dist/bench/profile-check.js [--out DIR] [--dry-run] [--only train|decode]

import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { Backend } from '../src/backend/backend.js';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import { selectBackend } from '../src/backend/index.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { BertConfig } from '../src/models/bert.js';
import { BERT_PRESETS } from '../src/models/bert.js';
import { BertModel } from '../src/models/bert-model.js';
import type { Gpt2Config } from '../src/models/gpt2.js';
import { GPT2_PRESETS } from '../src/models/gpt2.js';
import { Gpt2Model } from '../src/models/gpt2-model.js';
import type { LanguageModel } from '../src/models/language-model.js';
import { presetConfig } from '../src/models/registry.js';
import { randomBatch } from '../src/cli/profile.js';
import { DECODE_STEPS_ROOM, profileDecodeStep } from '../src/profile/decode.js';
import { writeProfileOutputs } from '../src/profile/output.js';
import type { KernelRow, Profile } from '../src/profile/profiler.js';
import { formatKernelTable, formatSummary } from '../src/profile/report.js';
import type { Roofs } from '../src/profile/roofs.js';
import { measureRoofs } from '../src/profile/roofs.js';
import { StepRunner } from '../src/train/step-runner.js';

const { values: cli } = parseArgs({ options: { out: { type: 'string' }, 'dry-run': { type: 'boolean', default: false }, only: { type: 'string' } } });
// --only train|decode: just the training steps (1, 2) or just the decode steps (3).
if (cli.only !== undefined && !['train', 'decode'].includes(cli.only)) throw new Error(`--only must be train or decode, got '${cli.only}'`);
const runTrain = cli.only !== 'decode', runDecode = cli.only !== 'train';
const outDir = resolve(cli.out ?? process.env.OUT ?? 'profile-check-out');
const dryRun = cli['dry-run']!;
/** Dry runs on the CPU place kernels against these (an H200's order of magnitude); nothing is timed against them. */
const NOMINAL_ROOFS: Roofs = { copyGBps: 4000, gemmTflops: 800, gemmDtype: 'bf16', gemmShape: [8192, 8192, 8192], ridge: 200 };

interface Check { name: string; pass: boolean; detail: string; numbers?: Record<string, number> }
const checks: Check[] = [];
const check = (name: string, pass: boolean, detail: string, numbers?: Record<string, number>) => {
  checks.push({ name, pass, detail, ...(numbers ? { numbers } : {}) });
  process.stdout.write(`${pass ? 'PASS' : 'FAIL'} ${name}: ${detail}\n`);
};

function profileModel(backend: Backend, roofs: Roofs, name: string, model: LanguageModel, batch: number, seq: number, masked: boolean): Profile {
  model.params.initialize(1n);
  const runner = new StepRunner(model, { maxBatch: batch, maxSeqLen: seq });
  try {
    const p = runner.profileStep(randomBatch(batch, seq, model.vocabSize, masked, 777), { training: true, warmupSteps: dryRun ? 2 : 3, repeats: dryRun ? 1 : 7, roofs });
    const files = writeProfileOutputs(join(outDir, name), p, { model: name, batch, seq, dtype: model.dtype, mode: 'train' }, `${name} train, ${model.dtype}, ${batch}×${seq} — ${backend.description}`);
    process.stdout.write(`\n## ${name}\n${formatSummary(p, 'training step (graph replay)')}\n\n${formatKernelTable(p, 15)}\nwrote ${files.json}\n\n`);
    return p;
  } finally {
    runner.dispose();
    model.params.free();
  }
}

/**
 * The issue's 5% criterion: Σ op times (timed inside the replayed graph, profiler.ts graph mode: by
 * marker nodes for training steps, by removal for decode steps) against the replayed step without markers.
 */
function sumCheck(name: string, p: Profile): void {
  if (dryRun) return; // CPU times say nothing about the GPU
  const error = (p.kernelMs - p.stepMs) / p.stepMs;
  check(`${name}: op times add up to the step`, Math.abs(error) <= 0.05,
    `Σ ops ${p.kernelMs.toFixed(3)} ms vs step ${p.stepMs.toFixed(3)} ms (${(100 * error).toFixed(2)}%, limit ±5%; ops timed by ${p.opTiming ?? '?'}`
      + `${p.markedKernelMs !== undefined ? `, by marker nodes Σ ${p.markedKernelMs.toFixed(3)} ms` : ''}); GEMMs ${p.gemmMs.toFixed(2)} ms, other ${p.otherMs.toFixed(2)} ms, ${p.ops.length} ops`,
    { kernelMs: p.kernelMs, stepMs: p.stepMs, relativeError: error, ...(p.markedKernelMs !== undefined ? { markedKernelMs: p.markedKernelMs } : {}) });
  check(`${name}: the GPU never waited for the host during the profiled run`, p.hostBoundOps === 0, `${p.hostBoundOps} host-bound ops of ${p.ops.length}`, { hostBoundOps: p.hostBoundOps });
}

/** Compares one row's per-call FLOPs and bytes with the hand formula, and its place under the roof. */
function placementCheck(label: string, p: Profile, row: KernelRow | undefined, expected: { flops: number; bytes: number }): void {
  if (!row || row.flops === undefined || row.bytes === undefined) {
    check(`${label}: found in the profile`, false, `no costed row; rows: ${p.kernels.slice(0, 40).map((k) => k.name).join('; ')}`);
    return;
  }
  const flops = row.flops / row.calls, bytes = row.bytes / row.calls;
  check(`${label}: FLOPs and bytes match the hand count`, flops === expected.flops && bytes === expected.bytes,
    `'${row.name}' ×${row.calls}: profiler ${flops} FLOP, ${bytes} B; by hand ${expected.flops} FLOP, ${expected.bytes} B; AI ${(flops / bytes).toFixed(2)} FLOP/B`,
    { flops, bytes, expectedFlops: expected.flops, expectedBytes: expected.bytes });
  if (dryRun) return;
  const roofs = p.roofs!;
  const attainable = Math.min(roofs.gemmTflops, (expected.flops / expected.bytes) * roofs.copyGBps / 1e3);
  const achieved = expected.flops / (row.medianMs * 1e-3) / 1e12;
  const atRoof = Math.max(expected.flops / (roofs.gemmTflops * 1e12), expected.bytes / (roofs.copyGBps * 1e9)) * 1e3;
  const percent = (100 * atRoof) / row.medianMs;
  check(`${label}: at or under its roof`, percent > 0 && percent <= 110,
    `median ${(row.medianMs * 1e3).toFixed(1)} µs: ${achieved.toFixed(2)} TFLOP/s of an attainable ${attainable.toFixed(2)} (${percent.toFixed(0)}% of the roof; the profiler says ${row.percentOfRoof?.toFixed(0)}% over all calls), ${row.bound}-bound`,
    { achievedTflops: achieved, attainableTflops: attainable, percentOfRoof: percent });
}

/**
 * Keys decode attention reads in the step whose cost the profile reports: decode step k after prefill
 * sees context + k keys. On the CPU that is the eager engine's second step (warm-up, profiled run); on
 * CUDA the timed engine's last replay (one eager step, the captured step, then DECODE_REPEATS replays).
 */
const decodeKeys = (context: number) => context + (dryRun ? 2 : 2 + DECODE_REPEATS);
const DECODE_REPEATS = 7;

const find = (p: Profile, prefix: string, op: string) => p.kernels.find((k) => k.op === op && (k.name === prefix || k.name.startsWith(`${prefix} `)));

async function main(): Promise<number> {
  const probe = probeCuda();
  if (!probe.available && !dryRun) {
    process.stderr.write(`check:profile needs a CUDA GPU: ${probe.reason} (--dry-run checks the FLOP and byte counts on the CPU)\n`);
    return 1;
  }
  mkdirSync(outDir, { recursive: true });
  const { backend } = await selectBackend(dryRun ? 'cpu' : 'cuda');
  // Kernels one after another: programmatic launches (on by default on Hopper) let a decode kernel
  // overlap its neighbours in the replayed step, but not across the marker nodes that time each op,
  // so with them the op times would add up to more than the step by that overlap.
  if (backend.name === 'cuda') (backend as CudaBackend).runtime.programmaticLaunch = false;
  const roofs = dryRun ? NOMINAL_ROOFS : measureRoofs(backend, 'bf16')!;
  process.stdout.write(`${backend.description}: copy ${roofs.copyGBps.toFixed(0)} GB/s, bf16 GEMM ${roofs.gemmTflops.toFixed(0)} TFLOP/s, ridge ${roofs.ridge.toFixed(0)} FLOP/B${dryRun ? ' (nominal: dry run)' : ''}\n`);
  if (!dryRun) check('roofs are plausible for a GPU', roofs.copyGBps > 100 && roofs.gemmTflops > 10, `copy ${roofs.copyGBps.toFixed(0)} GB/s, GEMM ${roofs.gemmTflops.toFixed(0)} TFLOP/s`);
  // Toy sizes keep B·L, hidden, L and d apart, so no two GEMMs of the step share a name by accident.
  const toy = { hidden: 96, layers: 2, heads: 2, ffn: 256, maxPositions: 128 };

  // GPT-2 124M, the LightSeq attention path (forced: the default picks the fused op at L = 1024).
  const gpt2: Gpt2Config = { ...GPT2_PRESETS['gpt2-124M']!, residualDropout: 0, embeddingDropout: 0, attentionDropout: 0, ...(dryRun ? { ...toy, vocabSize: 517 } : {}) };
  const B = dryRun ? 2 : 16, L = dryRun ? 32 : 1024, C = gpt2.hidden, heads = gpt2.heads, d = C / heads, M = B * L;
  const dtype = dryRun ? 'f32' : 'bf16', s = dryRun ? 4 : 2;
  if (runTrain) {
  const p = profileModel(backend, roofs, 'gpt2-124M-lightseq-attention', new Gpt2Model(backend, gpt2, dtype, { fusedAttention: false }), B, L, false);
  sumCheck('GPT-2 124M (LightSeq attention)', p);
  // The QKV projection: [M, C]·[C, 3C] (+ its bias when the GEMM's epilogue adds it). s = bytes per element.
  const qkv = p.kernels.find((k) => k.name === `gemm ${M}×${3 * C}×${C}` || k.name === `gemm ${M}×${3 * C}×${C} bias`);
  const qkvBias = qkv?.name.includes(' bias') ?? false;
  placementCheck('QKV projection GEMM', p, qkv, {
    flops: 2 * M * 3 * C * C + (qkvBias ? M * 3 * C : 0),
    bytes: s * (M * C + C * 3 * C + M * 3 * C) + (qkvBias ? s * 3 * C : 0),
  });
  // LayerNorm forward: x read, out written (16-bit), γ and β read, mean and rstd written (f32); 7 FLOPs an element + 3 a row.
  placementCheck('LayerNorm forward', p, find(p, `layerNormForward [${M}, ${C}]`, 'layerNormForward'), {
    flops: 7 * M * C + 3 * M, bytes: s * 2 * M * C + s * 2 * C + 4 * 2 * M,
  });
  // Attention scores Q·Kᵀ: B·heads products [L, d]·[L, d]ᵀ.
  const bh = B * heads;
  placementCheck('attention Q·Kᵀ (batched GEMM)', p, p.kernels.find((k) => k.name === `batchedGemm ${bh}×${L}×${L}×${d} Bᵀ`), {
    flops: 2 * bh * L * L * d, bytes: s * bh * (2 * L * d + L * L),
  });
  // Causal softmax: only the L(L+1)/2 visible scores of each matrix are read; all L² are written; 5 FLOPs a visible score.
  const visible = bh * (L * (L + 1)) / 2;
  placementCheck('attention softmax (causal)', p, find(p, `softmaxForward [${B}, ${heads}, ${L}, ${L}] causal`, 'softmaxForward'), {
    flops: 5 * visible, bytes: s * visible + s * bh * L * L,
  });

  // BERT-base: the step whose op sum was 28% over the replayed graph before the queue-ahead.
  const bert: BertConfig = { ...BERT_PRESETS['bert-base']!, hiddenDropout: 0, attentionDropout: 0, ...(dryRun ? { ...toy, vocabSize: 517 } : {}) };
  sumCheck('BERT-base', profileModel(backend, roofs, 'bert-base', new BertModel(backend, bert, dtype), dryRun ? 2 : 32, dryRun ? 32 : 256, true));

  // GPT-2 with the fused attention op: flashAttentionForward by hand (FA2's count, 4·d per visible pair).
  const fusedB = dryRun ? 2 : 16;
  try {
    const f = profileModel(backend, roofs, 'gpt2-124M', new Gpt2Model(backend, gpt2, dtype, { fusedAttention: true }), fusedB, L, false);
    sumCheck('GPT-2 124M (fused attention, the default)', f);
    const fbh = fusedB * heads, pairs = fbh * (L * (L + 1)) / 2;
    placementCheck('attention (flashAttentionForward, causal)', f, find(f, `flashAttentionForward B${fusedB} H${heads} ${L}×${L} d${d} causal`, 'flashAttentionForward'), {
      flops: 4 * d * pairs, bytes: s * 4 * fbh * L * d + 4 * fbh * L,
    });
  } catch (error) {
    check('GPT-2 124M with the fused attention op runs', false, (error as Error).message);
  }
  }

  if (runDecode) {
  // A decode step of the inference engine (GPT-2 124M, 8 sequences × 512 cached tokens): it runs, the
  // GPU never waited for the host, and decode attention reads each sequence's keys at their real count.
  try {
    const batch = dryRun ? 2 : 8, context = dryRun ? 16 : 512;
    const config = { family: 'gpt2' as const, config: gpt2 };
    const dp = profileDecodeStep(backend, config, { batch, context, dtype, repeats: dryRun ? 1 : DECODE_REPEATS, roofs });
    const files = writeProfileOutputs(join(outDir, 'gpt2-124M-decode'), dp, { model: 'gpt2-124M', mode: 'decode', batch, context, dtype }, `gpt2-124M decode, ${dtype}, ${batch} × ${context} cached — ${backend.description}`);
    process.stdout.write(`\n## GPT-2 124M decode\n${formatSummary(dp, 'decode step (graph replay)')}\n\n${formatKernelTable(dp, 12)}\nwrote ${files.json}\n\n`);
    sumCheck('GPT-2 124M decode', dp);
    const keys = decodeKeys(context);
    // appendDecodeAttention: the QKV rows (+ bias: one add an element) in, the new key and value rows out,
    // the cached keys and values read, out written; the query heads stay on chip.
    const width = 3 * heads * d;
    placementCheck('decode attention', dp, find(dp, `appendDecodeAttention B${batch} H${heads}/${heads} d${d} cache ${context + DECODE_STEPS_ROOM}`, 'appendDecodeAttention'), {
      flops: batch * width + 4 * d * heads * batch * keys,
      bytes: s * (batch * width + width) + 4 * batch + 2 * s * batch * heads * d + 2 * s * batch * keys * heads * d + s * batch * heads * d,
    });
  } catch (error) {
    check('GPT-2 124M decode step profiles', false, (error as Error).message);
  }

  // A decode step of the Llama 1.2B config (the issue's model: hidden 2048, 16 layers, GQA 32/8, vocab
  // 128256, tied), batch 1 with 512 cached tokens: produced, written out, its op sum reported beside the
  // replayed graph, and decode attention (grouped: one KV head per 4 query heads) placed by hand.
  try {
    const llama = presetConfig('llama-1.2B');
    if (llama.family !== 'llama') throw new Error('the llama-1.2B preset is not a Llama config');
    const lc = dryRun ? { ...llama, config: { ...llama.config, hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, ffn: 128, vocabSize: 517 } } : llama;
    const batch = 1, context = dryRun ? 16 : 512;
    const { heads: Hq, kvHeads: Hkv, headDim: dl } = lc.config;
    const dp = profileDecodeStep(backend, lc, { batch, context, dtype, repeats: dryRun ? 1 : DECODE_REPEATS, roofs });
    const files = writeProfileOutputs(join(outDir, 'llama-1.2B-decode'), dp, { model: 'llama-1.2B', mode: 'decode', batch, context, dtype }, `Llama 1.2B decode, ${dtype}, ${batch} × ${context} cached — ${backend.description}`);
    process.stdout.write(`\n## Llama 1.2B decode\n${formatSummary(dp, 'decode step (graph replay)')}\n\n${formatKernelTable(dp, 12)}\nwrote ${files.json}\n\n`);
    sumCheck('Llama 1.2B decode', dp);
    const keys = decodeKeys(context);
    // RoPE: per rotated element 3 FLOPs, per (row, pair) 5 for the angle, cos, sin and scale; invFreq f32 [d/2] read.
    placementCheck('Llama decode attention (GQA)', dp, find(dp, `appendDecodeAttention B${batch} H${Hq}/${Hkv}`, 'appendDecodeAttention'), {
      flops: batch * ((Hq + Hkv) * dl * 3 + (dl / 2) * 5) + 4 * dl * Hq * batch * keys,
      bytes: s * batch * (Hq + 2 * Hkv) * dl + 4 * batch + 4 * (dl / 2) + 2 * s * batch * Hkv * dl + 2 * s * batch * keys * Hkv * dl + s * batch * Hq * dl,
    });
  } catch (error) {
    check('Llama 1.2B decode step profiles', false, (error as Error).message);
  }
  }

  const failed = checks.filter((c) => !c.pass);
  writeFileSync(join(outDir, 'check.json'), `${JSON.stringify({ date: new Date().toISOString(), device: backend.description, roofs, checks }, null, 1)}\n`);
  process.stdout.write(`\n${checks.length - failed.length} of ${checks.length} checks pass${failed.length ? `; failed: ${failed.map((c) => c.name).join('; ')}` : ''}\nwrote ${join(outDir, 'check.json')}\n`);
  return failed.length === 0 ? 0 : 1;
}

main().then((code) => { process.exitCode = code; }, (error: unknown) => {
  process.stderr.write(`check:profile: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exitCode = 1;
});
