// Decode speed: fuseformer's inference engine against HF transformers generate() in the same run.
//
// GPT-2 124M and a Llama 3.2 1B-shaped model (hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192,
// vocabulary 128256, tied), random bf16 weights; 32-token prompts, 128 new tokens, greedy; batch 1 and 32.
//   ours      decode ms/token: CUDA events around 127 decode steps (graph replays) after prefill, median
//             of 5 generations; and end to end: (T(128 tokens) − T(1 token)) / 127 of whole generations
//             (prefill, decode, reading the tokens) on the host clock, the same measure as for HF.
//   HF        generate() eager (dynamic cache), with cache_implementation="static" (which transformers 5
//             compiles itself), and with the static cache + our torch.compile of forward (mode
//             "reduce-overhead", HF's older recipe), (T(128) − T(1)) / 127 (torch_decode.py).
//   floor     (weight bytes a step reads + KV bytes it reads, averaged over the steps) ÷ the device-to-device
//             copy bandwidth measured here; "% of floor" = floor time / measured time.
// Targets (issue #5): GPT-2 ≤ 0.12 ms/token; Llama 1.2B ≤ 0.70 ms/token at batch 1, ≥ 35k tokens/s at batch 32.
// --quant int4,int8 adds rows per model with its projections RTN-quantized (infer/quantized.ts: INT4 W4A16
// in groups of 128, INT8 W8A8 per channel; embeddings, norms and LM head bf16); int4-head, int8-head
// quantize the LM head too; the floor from the bytes the quantized step reads. Targets (issue #7): Llama 1.2B at batch 1 ≤ 0.30 ms/token INT4, ≤ 0.45 INT8.
//
// Usage: node dist/bench/decode.js [--json bench/results/decode.json] [--no-torch] [--torch-modes eager,static,static-compile]
//                                  [--reps 5] [--models gpt2,llama(,qwen3,llama8b)] [--backend cuda] [--quant int4,int8,int4-head,int8-head]
//                                  [--modes default,cublas,gemv,pdl,gemv-pdl] [--batches 1,32] [--sampling T,K,P]
// --sampling T,K,P: sampled instead of greedy, ours and HF's alike (e.g. 0.7,50,0.9).
// --batches: the batch sizes timed (default 1 and 32, the issues' targets; e.g. 1,4 for the GEMV's 2–4-row plans).
// --modes: the backend's defaults (on an H200: the decode GEMMs of ≤ 4 rows on kernels/gemv.ts and
// programmatic dependent launches), or the decode GEMMs on cuBLASLt or on the GEMV kernel
// (CudaBackend.decodeGemv), with or without programmatic launches (runtime.programmaticLaunch); one set
// of rows per mode, same run. HF runs beside the first mode listed.
// (--models tiny --backend cpu --no-torch runs the harness on a small GPT-2 anywhere, as a smoke test.)

import { torchRows } from './torch-rows.js';
import type { TorchResult } from './torch-rows.js';
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { CudaBackend } from '../src/backend/cuda/index.js';
import { decodeWeightBytes } from '../src/infer/architecture.js';
import { DecodeEngine } from '../src/infer/engine.js';
import { randomDecoderModel } from '../src/infer/model.js';
import type { DecoderModel } from '../src/infer/model.js';
import { quantizeDecoderModel, quantizedDecodeWeightBytes } from '../src/infer/quantized.js';
import { resolveSampling } from '../src/infer/sampling.js';
import { presetConfig, toHfJson } from '../src/models/registry.js';
import type { ModelConfig } from '../src/models/registry.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/decode.json' },
    'no-torch': { type: 'boolean', default: false },
    'torch-modes': { type: 'string', default: 'eager,static,static-compile' },
    reps: { type: 'string', default: '5' },
    models: { type: 'string', default: 'gpt2,llama' },
    backend: { type: 'string', default: 'cuda' },
    quant: { type: 'string', default: '' },
    modes: { type: 'string', default: 'default' },
    batches: { type: 'string', default: '1,32' },
    sampling: { type: 'string' },
  },
});
const REPS = Number(cli.reps), PROMPT = 32, NEW = 128, BATCHES = cli.batches.split(',').map(Number);
// --sampling T,K,P: every sequence drawn with temperature T, top-k K (0 = off) and top-p P, here and in HF's
// generate(do_sample=True) — what sampled serving pays for its draws (default: greedy).
const SAMPLING = (() => {
  if (cli.sampling === undefined) return { temperature: 0, topK: 0, topP: 1 };
  const [temperature, topK, topP] = cli.sampling.split(',').map(Number);
  if (!(temperature! > 0) || !Number.isInteger(topK) || topK! < 0 || !(topP! > 0 && topP! <= 1)) throw new Error(`--sampling: T,K,P with T > 0, K a non-negative integer, 0 < P ≤ 1; got '${cli.sampling}'`);
  return { temperature: temperature!, topK: topK!, topP: topP! };
})();
const SAMPLING_LABEL = SAMPLING.temperature === 0 ? '' : ` (T ${SAMPLING.temperature}, top-k ${SAMPLING.topK}, top-p ${SAMPLING.topP})`;
if (BATCHES.some((b) => !Number.isInteger(b) || b < 1)) throw new Error(`--batches: a comma list of positive integers, got '${cli.batches}'`);

interface ModelCase { key: string; name: string; config: ModelConfig; target: { b1MsPerToken?: number; b32TokensPerS?: number } }
const CASES: ModelCase[] = [
  { key: 'gpt2', name: 'GPT-2 124M', config: presetConfig('gpt2-124M'), target: { b1MsPerToken: 0.12 } },
  { key: 'llama', name: 'Llama 1.2B (3.2 1B shape)', config: presetConfig('llama-1.2B'), target: { b1MsPerToken: 0.70, b32TokensPerS: 35000 } },
  { key: 'qwen3', name: 'Qwen3-0.6B', config: presetConfig('qwen3-0.6B'), target: {} },
  // d-128 heads at full size (Llama 3 / Qwen / Mistral 7-8B class; 16 GB of bf16 weights): not in the defaults.
  { key: 'llama8b', name: 'Llama 3.1 8B', config: presetConfig('llama-8B'), target: {} },
  { key: 'tiny', name: 'GPT-2 tiny (smoke test)', config: presetConfig('gpt2-tiny'), target: {} },
].filter((c) => cli.models!.split(',').includes(c.key));

interface Precision { key: string; label: string; bits?: 4 | 8; lmHead?: boolean; b1MsPerToken?: Record<string, number> }
const PRECISIONS: Precision[] = [
  { key: 'bf16', label: '' },
  { key: 'int4', label: ' INT4 W4A16', bits: 4, b1MsPerToken: { llama: 0.30 } },
  { key: 'int8', label: ' INT8 W8A8', bits: 8, b1MsPerToken: { llama: 0.45 } },
  { key: 'int4-head', label: ' INT4 W4A16 + head', bits: 4, lmHead: true, b1MsPerToken: { llama: 0.30 } },
  { key: 'int8-head', label: ' INT8 W8A8 + head', bits: 8, lmHead: true, b1MsPerToken: { llama: 0.45 } },
];
const quantKeys = cli.quant ? cli.quant.split(',') : [];
for (const k of quantKeys) if (!PRECISIONS.some((p) => p.bits && p.key === k)) throw new Error(`--quant: '${k}' is not one of int4, int8, int4-head, int8-head`);
const precisions = PRECISIONS.filter((p) => p.key === 'bf16' || quantKeys.includes(p.key));

const { backend } = await selectBackend(cli.backend as 'cuda' | 'cpu');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Device-to-device copy bandwidth (bytes read + written per second) on 1 GiB, median of 10 copies. */
function copyBandwidth(): number {
  const n = backend.name === 'cuda' ? 2 ** 29 : 2 ** 20, src = backend.empty([n], 'bf16'), dst = backend.empty([n], 'bf16');
  backend.fill(src, 1);
  backend.copy(src, dst);
  const times: number[] = [];
  for (let i = 0; i < 10; i++) {
    const a = backend.mark();
    backend.copy(src, dst);
    const b = backend.mark();
    times.push(b.elapsedSince(a));
    a.dispose(); b.dispose();
  }
  backend.free(src); backend.free(dst);
  return (2 * n * 2) / (median(times) / 1000);
}

function prompts(batch: number, vocab: number, seed: number): number[][] {
  let s = seed;
  const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s; };
  return Array.from({ length: batch }, () => Array.from({ length: PROMPT }, () => next() % vocab));
}

interface Ours { msPerToken: number; tokensPerS: number; e2eMsPerToken: number; floorMs: number; percentOfFloor: number; weightBytes: number; kvBytesPerStep: number }

function measure(model: DecoderModel, batch: number, bandwidth: number): Ours {
  const arch = model.arch;
  const engine = new DecodeEngine(model, { maxBatch: batch, maxLen: PROMPT + NEW });
  const sampling = resolveSampling({ ...SAMPLING, seed: 5n });
  const requests = prompts(batch, arch.vocabSize, 7).map((prompt) => ({ prompt, maxNewTokens: NEW, sampling }));
  // Warm-up: kernels compile, GEMMs choose algorithms, the bucket's step is captured.
  engine.start(requests, []);
  engine.decode(3);
  engine.collect();
  const decodeMs: number[] = [];
  for (let r = 0; r < REPS; r++) {
    engine.start(requests, []);
    const a = backend.mark();
    engine.decode(NEW - 1);
    const b = backend.mark();
    decodeMs.push(b.elapsedSince(a) / (NEW - 1));
    a.dispose(); b.dispose();
    const lengths = engine.collect().map((u) => u.tokens.length);
    if (lengths.some((n) => n !== NEW)) throw new Error(`a generation made ${lengths.join(', ')} tokens, expected ${NEW} each`);
  }
  const msPerToken = median(decodeMs);
  // End to end, as HF is measured: whole generations of 128 and of 1 new token.
  const e2eMsPerToken = (e2eSync(engine, requests, NEW) - e2eSync(engine, requests, 1)) / (NEW - 1);
  engine.dispose();
  const weightBytes = quantizedDecodeWeightBytes(model, decodeWeightBytes(arch, 2), 2);
  // Keys read per step, averaged over the decode steps (contexts PROMPT + 1 .. PROMPT + NEW − 1).
  const averageKeys = PROMPT + NEW / 2;
  const kvBytesPerStep = batch * averageKeys * 2 * arch.layers * arch.kvHeads * arch.headDim * 2;
  const floorMs = ((weightBytes + kvBytesPerStep) / bandwidth) * 1000;
  return { msPerToken, tokensPerS: batch / (msPerToken / 1000), e2eMsPerToken, floorMs, percentOfFloor: (100 * floorMs) / msPerToken, weightBytes, kvBytesPerStep };
}

/** Median host time of a whole generation of `tokens` new tokens (prefill, decode, reads) through the engine. */
function e2eSync(engine: DecodeEngine, requests: { prompt: number[]; maxNewTokens: number; sampling: ReturnType<typeof resolveSampling> }[], tokens: number): number {
  const times: number[] = [];
  for (let r = 0; r < REPS; r++) {
    const t0 = performance.now();
    engine.start(requests.map((q) => ({ ...q, maxNewTokens: tokens })), []);
    let chunk = 1;
    for (;;) {
      engine.collect();
      if (engine.done) break;
      engine.decode(chunk);
      chunk = Math.min(16, chunk * 2);
    }
    times.push(performance.now() - t0);
  }
  return median(times);
}


function runTorch(c: ModelCase): Record<string, Record<string, TorchResult>> | { error: string } {
  const spec = {
    model: c.config.family, config: { ...toHfJson(c.config), architectures: undefined }, batches: BATCHES, prompt: PROMPT, new_tokens: NEW,
    reps: REPS, modes: cli['torch-modes']!.split(','), sampling: SAMPLING,
  };
  const run = spawnSync('python3', ['bench/torch_decode.py'], { input: JSON.stringify(spec), encoding: 'utf8', maxBuffer: 16 << 20, timeout: 1_500_000 });
  if (run.status !== 0) {
    // The last lines that are not torch's own log warnings (W1201 12:00:00.000000 … lines) say what failed.
    const lines = (run.stderr || String(run.error)).trim().split('\n').filter((l) => !/^[WI]\d{4} /.test(l));
    const error = `exit ${run.status ?? run.signal}: ${lines.slice(-3).join(' | ')}`;
    // The rows measured before the process ended (one JSON line each on stdout) are kept; the others carry the exit.
    const rows = torchRows(run.stdout ?? '');
    if (rows.length === 0) return { error };
    const partial: Record<string, Record<string, TorchResult>> = {};
    for (const mode of spec.modes) {
      partial[mode] = {};
      for (const b of BATCHES) partial[mode][String(b)] = rows.find((r) => r.mode === mode && r.batch === b)?.result ?? { error: `not measured: ${error}` };
    }
    return partial;
  }
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as Record<string, Record<string, TorchResult>>;
}


const bandwidth = copyBandwidth();
console.log(`${backend.description}; device-to-device copy ${(bandwidth / 1e12).toFixed(2)} TB/s`);
const results: Record<string, unknown> = { date: new Date().toISOString().slice(0, 10), device: backend.description, copyBandwidth: bandwidth, prompt: PROMPT, newTokens: NEW, models: {} };
const table: string[] = [
  '| model | batch | fuseformer ms/token | tokens/s | % of floor | e2e ms/token | HF eager ms/token | HF static cache ms/token | HF static + our compile ms/token | target |',
  '|---|---|---|---|---|---|---|---|---|---|',
];
/** Decode GEMMs and launches (CUDA): the backend's defaults, cuBLASLt, the GEMV kernel, with or without programmatic launches. */
const MODES = ['default', 'cublas', 'gemv', 'pdl', 'gemv-pdl'] as const;
type Mode = (typeof MODES)[number];
const modes = cli.modes!.split(',') as Mode[];
for (const m of modes) if (!MODES.includes(m)) throw new Error(`--modes: '${m}' is not one of ${MODES.join(', ')}`);
const defaults = backend.name === 'cuda'
  ? { gemv: (backend as CudaBackend).decodeGemv, pdl: (backend as CudaBackend).runtime.programmaticLaunch } : undefined;
function setMode(mode: Mode): void {
  if (!defaults) {
    if (mode !== 'default' && mode !== 'cublas') throw new Error(`--modes ${mode} needs the CUDA backend`);
    return;
  }
  const cuda = backend as CudaBackend;
  cuda.decodeGemv = mode === 'default' ? defaults.gemv : mode === 'gemv' || mode === 'gemv-pdl';
  cuda.runtime.programmaticLaunch = mode === 'default' ? defaults.pdl : mode === 'pdl' || mode === 'gemv-pdl';
}
const modeName = (mode: Mode): string => {
  if (mode !== 'default') return mode;
  return defaults ? `${defaults.gemv ? 'gemv' : 'cublas'}${defaults.pdl ? '-pdl' : ''}` : 'cpu';
};

const failedRow = (name: string, error: unknown) => {
  // One failing case (a kernel that does not run) must not cost the other rows of the run.
  const message = error instanceof Error ? error.message : String(error);
  console.log(`${name}: FAILED: ${message}`);
  (results.models as Record<string, unknown>)[name] = { error: message };
  table.push(`| ${name} | — | failed: ${message.split('\n')[0]!.slice(0, 120)} | | | | | | | |`);
};

for (const c of CASES) {
  for (const p of precisions) {
    const model = randomDecoderModel(c.config, backend, { dtype: 'bf16', seed: 1n });
    try {
      if (p.bits) quantizeDecoderModel(model, { method: 'rtn', bits: p.bits, groupSize: 128, lmHead: p.lmHead ?? false });
    } catch (error) {
      failedRow(`${c.name}${p.label}`, error);
      model.free();
      continue;
    }
    try {
      for (const mode of modes) {
        const name = `${c.name}${p.label}${mode === 'default' ? '' : ` [${mode}]`}${SAMPLING_LABEL}`;
        const ours: Record<number, Ours> = {};
        try {
          setMode(mode);
          for (const batch of BATCHES) {
            ours[batch] = measure(model, batch, bandwidth);
            const o = ours[batch]!;
            console.log(`${name} batch ${batch}: ${o.msPerToken.toFixed(3)} ms/token (${Math.round(o.tokensPerS)} tokens/s), floor ${o.floorMs.toFixed(3)} ms (${o.percentOfFloor.toFixed(0)}%), e2e ${o.e2eMsPerToken.toFixed(3)} ms/token`);
          }
        } catch (error) {
          failedRow(name, error);
          continue;
        }
        // HF is measured for the bf16 model only (transformers has no W4A16 / W8A8 decode path to compare with here).
        const torch = cli['no-torch'] || p.bits || mode !== modes[0] ? undefined : runTorch(c);
        if (torch && 'error' in torch) console.log(`${c.name} PyTorch: ${torch.error}`);
        const lost = torch && !('error' in torch) ? Object.values(torch).flatMap((m) => Object.values(m)).find((r) => r.error?.startsWith('not measured: '))?.error : undefined;
        if (lost) console.log(`${c.name} PyTorch: some rows ${lost}`);
        (results.models as Record<string, unknown>)[name] = { ours, torch, mode: modeName(mode) };
        // The issues' targets are greedy decode's.
        const greedy = SAMPLING.temperature === 0;
        const b1Target = !greedy ? undefined : p.bits ? p.b1MsPerToken?.[c.key] : c.target.b1MsPerToken;
        for (const batch of BATCHES) {
          const o = ours[batch]!;
          const hf = (hfMode: string): string => {
            if (!torch || 'error' in torch) return '—';
            const r = torch[hfMode]?.[String(batch)];
            return r?.ms_per_token !== undefined ? r.ms_per_token.toFixed(3) : r?.error ? 'error' : '—';
          };
          const target = batch === 1 && b1Target !== undefined ? `≤ ${b1Target} ms/token ${o.msPerToken <= b1Target ? 'met' : 'missed'}`
            : greedy && batch === 32 && !p.bits && c.target.b32TokensPerS !== undefined ? `≥ ${c.target.b32TokensPerS} tok/s ${o.tokensPerS >= c.target.b32TokensPerS ? 'met' : 'missed'}` : '';
          table.push(`| ${name} | ${batch} | ${o.msPerToken.toFixed(3)} | ${Math.round(o.tokensPerS)} | ${o.percentOfFloor.toFixed(0)}% | ${o.e2eMsPerToken.toFixed(3)} | ${hf('eager')} | ${hf('static')} | ${hf('static-compile')} | ${target} |`);
        }
      }
    } finally {
      setMode('default');
      model.free();
    }
  }
}
mkdirSync(dirname(cli.json!), { recursive: true });
writeFileSync(cli.json!, JSON.stringify(results, null, 1));
console.log(`\n${table.join('\n')}`);
