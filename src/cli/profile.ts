// `fuseformer profile`: where a step's time goes. Builds the model (a preset or a directory with
// config.json; random weights — the time does not depend on them), runs a few steps, then profiles one
// (profile/profiler.ts): every op timed with CUDA events and placed on the roofline measured in the same
// process. Prints the summary and the kernel table; writes profile.json and roofline.svg/png into --out.
//   --mode train     GPT-2 or BERT: forward, backward, gradient norm and AdamW (`fuseformer train`'s step)
//   --mode prefill   GPT-2 or BERT: the forward pass of the whole sequence and its loss, no backward
//   --mode decode    GPT-2 or Llama: one step of the inference engine (src/infer/engine.ts), a token for
//                    each of --batch sequences with --seq tokens in their KV cache (profile/decode.ts)
//   --mode serve-decode, serve-mixed   GPT-2 or Llama: one step of the serving engine (paged KV cache; a
//                    replayed CUDA graph on the GPU): --batch requests decoding with --seq cached positions, and for serve-mixed
//                    also one new request's --chunk-token prompt in the same step (profile/serve.ts)

import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { Backend } from '../backend/backend.js';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { resolveSampling } from '../infer/sampling.js';
import { checkOutputDirectory } from '../io/output-dir.js';
import { BertModel } from '../models/bert-model.js';
import { Gpt2Model } from '../models/gpt2-model.js';
import type { LanguageModel } from '../models/language-model.js';
import type { ModelConfig } from '../models/registry.js';
import { loadModelConfig, PRESET_NAMES, presetConfig } from '../models/registry.js';
import { DECODE_STEPS_ROOM, profileDecodeStep } from '../profile/decode.js';
import type { ProfileQuantization } from '../profile/decode.js';
import { profileServingStep, SERVE_STEPS_ROOM } from '../profile/serve.js';
import { writeProfileOutputs } from '../profile/output.js';
import { samplingFlags } from './sampling-options.js';
import type { Profile } from '../profile/profiler.js';
import { formatKernelTable, formatSummary } from '../profile/report.js';
import { measureRoofs } from '../profile/roofs.js';
import { StepRunner } from '../train/step-runner.js';

export const PROFILE_MODES = ['train', 'prefill', 'decode', 'serve-decode', 'serve-mixed'] as const;
export type ProfileMode = (typeof PROFILE_MODES)[number];

export const PROFILE_USAGE = `usage: fuseformer profile [options]

  --model NAME|DIR     gpt2-124M, bert-base, gpt2-tiny, llama-1.2B, another preset, or a directory with
                       config.json (default: gpt2-124M on CUDA, gpt2-tiny on the CPU); random weights
  --mode train|prefill|decode|serve-decode|serve-mixed   a training step, the forward pass only (GPT-2,
                       BERT), a decode step of the inference engine (GPT-2, Llama), or a step of the serving
                       engine (paged KV cache; graph-replayed on CUDA): decode rows only, or decode rows plus one new
                       request's whole prompt of --chunk tokens (default train)
  --batch N --seq N    batch and sequence length (default: 16 × 1024 for GPT-2 and 32 × 256 for BERT on
                       CUDA, 2 × 32 on the CPU; --seq at most the model's positions); for decode, the
                       sequences and the tokens already in their KV cache (default 8 × 512 on CUDA, 2 × 32
                       on the CPU; --seq + ${DECODE_STEPS_ROOM} at most the model's positions)
  --chunk N            serve-mixed: the new request's prompt tokens (default 256)
  --quantize rtn4|rtn8 decode and serve modes: the projections round-to-nearest quantized (INT4 W4A16 in
                       groups of 128, or INT8 W8A8); --quantize-lm-head the LM head too
  --temperature T --top-k N --top-p P   serve modes: every request sampled so (default greedy; a sampled
                       row's sampleTokens walks its whole row: the radix selects of top-k / top-p)
  --dtype f32|bf16|f16 (default bf16 on CUDA, f32 on the CPU)
  --fused-attention    the fused attention op instead of the materialised-scores path
  --steps N            ordinary steps before profiling (default 3; at least 2)
  --repeats N          timed runs of the step (median; default 5 on CUDA, 2 on the CPU)
  --op-timing auto|markers|removal   how the ops of a replayed graph are timed: marker nodes around
                       each op (auto), or removal (the step replayed without each op in turn: what the op
                       costs it; with programmatic launches, less its overlap with its neighbours)
  --top N              kernel table rows printed (default 30; profile.json has them all)
  --out DIR            profile.json, roofline.svg, roofline.png (default ./profile-out)
  --backend auto|cpu|cuda
  -h, --help           this text
`;

function positiveInt(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new ArgumentError(`--${name} must be a positive integer, got '${value}'`);
  return n;
}

function modelConfig(name: string): ModelConfig {
  if (PRESET_NAMES.includes(name)) return presetConfig(name);
  if (!existsSync(name)) throw new ArgumentError(`--model: '${name}' is neither a preset (${PRESET_NAMES.join(', ')}) nor a directory with config.json`);
  return loadModelConfig(name);
}

function buildModel(model: Extract<ModelConfig, { family: 'gpt2' | 'bert' }>, backend: Backend, dtype: FloatDType, fusedAttention: boolean): LanguageModel {
  return model.family === 'gpt2'
    ? new Gpt2Model(backend, model.config, dtype, { fusedAttention })
    : new BertModel(backend, model.config, dtype, { fusedAttention });
}

/** Random tokens (seeded); BERT's targets are 15% of the positions (masked LM), GPT-2's every position. */
export function randomBatch(batch: number, seqLen: number, vocab: number, masked: boolean, seed = 12345) {
  let s = seed;
  const next = () => (s = (Math.imul(s, 1103515245) + 12345) >>> 0);
  const n = batch * seqLen;
  return {
    batch, seqLen,
    tokens: Int32Array.from({ length: n }, () => next() % vocab),
    targets: Int32Array.from({ length: n }, () => (!masked || next() / 2 ** 32 < 0.15 ? next() % vocab : -100)),
  };
}

type ProfileCliValues = { temperature?: string; 'top-k'?: string; 'top-p'?: string; batch?: string; seq?: string; steps?: string; repeats?: string; top?: string; chunk?: string; quantize?: string; 'quantize-lm-head'?: boolean; out?: string; 'op-timing'?: string };

const OP_TIMINGS = ['auto', 'markers', 'removal'] as const;

function opTiming(value: string | undefined): (typeof OP_TIMINGS)[number] {
  if (value === undefined) return 'auto';
  if (!(OP_TIMINGS as readonly string[]).includes(value)) throw new ArgumentError(`--op-timing must be one of ${OP_TIMINGS.join(', ')}, got '${value}'`);
  return value as (typeof OP_TIMINGS)[number];
}

function writeAndPrint(result: Profile, stepLabel: string, top: number, outDir: string, run: Record<string, unknown>, title: string, log: (line: string) => void): void {
  log(formatSummary(result, stepLabel));
  log('');
  log(formatKernelTable(result, top));
  const files = writeProfileOutputs(outDir, result, run, title);
  log('');
  log(`wrote ${[files.json, files.svg, files.png].filter(Boolean).join(', ')}${files.note ? ` (${files.note})` : ''}`);
}

/** --quantize / --quantize-lm-head of the decode and serve modes. */
function profileQuantization(values: ProfileCliValues): ProfileQuantization | undefined {
  if (values.quantize === undefined) {
    if (values['quantize-lm-head']) throw new ArgumentError('--quantize-lm-head needs --quantize rtn4|rtn8');
    return undefined;
  }
  if (values.quantize !== 'rtn4' && values.quantize !== 'rtn8') throw new ArgumentError(`--quantize must be rtn4 or rtn8, got '${values.quantize}'`);
  return { bits: values.quantize === 'rtn4' ? 4 : 8, lmHead: values['quantize-lm-head'] ?? false };
}

function quantLabel(q: ProfileQuantization | undefined): string {
  return q ? `, ${q.bits === 4 ? 'INT4 W4A16' : 'INT8 W8A8'}${q.lmHead ? ' + head' : ''}` : '';
}

function runDecodeProfile(backend: Backend, reason: string, config: ModelConfig, modelName: string, dtype: FloatDType, values: ProfileCliValues, log: (line: string) => void): number {
  if (config.family !== 'gpt2' && config.family !== 'llama') {
    throw new ArgumentError(`--model ${modelName}: --mode decode runs the inference engine's GPT-2 and Llama models; this one is ${config.family}`);
  }
  const onGpu = backend.name === 'cuda';
  const batch = positiveInt('batch', values.batch, onGpu ? 8 : 2);
  if (config.config.maxPositions <= DECODE_STEPS_ROOM) throw new ArgumentError(`--model ${modelName}: its ${config.config.maxPositions} positions leave no room for a cached context beside the ${DECODE_STEPS_ROOM} the decode profile decodes`);
  const context = positiveInt('seq', values.seq, Math.min(config.config.maxPositions - DECODE_STEPS_ROOM, onGpu ? 512 : 32));
  if (context + DECODE_STEPS_ROOM > config.config.maxPositions) {
    throw new ArgumentError(`--seq ${context}: the KV cache must also hold the ${DECODE_STEPS_ROOM} positions the profile decodes, and the model has ${config.config.maxPositions}`);
  }
  const repeats = positiveInt('repeats', values.repeats, onGpu ? 5 : 2);
  const top = positiveInt('top', values.top, 30);
  const quantize = profileQuantization(values);
  log(`fuseformer profile: ${modelName} decode, ${batch} sequences × ${context} cached tokens, ${dtype}${quantLabel(quantize)} on ${backend.description} — ${reason}`);
  const roofs = measureRoofs(backend, dtype);
  if (roofs) log(`roofs: copy ${Math.round(roofs.copyGBps)} GB/s, ${dtype} GEMM ${roofs.gemmTflops.toFixed(0)} TFLOP/s`);
  const result = profileDecodeStep(backend, config, { batch, context, dtype, repeats, roofs: roofs ?? false, opTiming: opTiming(values['op-timing']), ...(quantize ? { quantize } : {}) });
  log(`${batch} tokens a step: ${result.stepMs.toFixed(3)} ms/token per sequence, ${Math.round((batch * 1e3) / result.stepMs).toLocaleString('en-US')} tokens/s`);
  writeAndPrint(result, `decode step${onGpu ? ' (graph replay)' : ''}`, top, resolve(values.out ?? 'profile-out'),
    { model: modelName, family: config.family, mode: 'decode', batch, context, dtype, repeats, ...(quantize ? { quantize } : {}) },
    `${modelName} decode, ${dtype}${quantLabel(quantize)}, ${batch} × ${context} cached — ${backend.description}`, log);
  return 0;
}

function runServeProfile(backend: Backend, reason: string, config: ModelConfig, modelName: string, dtype: FloatDType, mode: 'serve-decode' | 'serve-mixed', values: ProfileCliValues, log: (line: string) => void): number {
  if (config.family !== 'gpt2' && config.family !== 'llama') {
    throw new ArgumentError(`--model ${modelName}: --mode ${mode} runs the serving engine's GPT-2 and Llama models; this one is ${config.family}`);
  }
  const onGpu = backend.name === 'cuda';
  const kind = mode === 'serve-decode' ? 'decode' : 'mixed';
  const running = positiveInt('batch', values.batch, onGpu ? 64 : 2);
  if (config.config.maxPositions <= SERVE_STEPS_ROOM) throw new ArgumentError(`--model ${modelName}: its ${config.config.maxPositions} positions leave no room for a cached context beside the ${SERVE_STEPS_ROOM} the serving profile needs`);
  const context = positiveInt('seq', values.seq, Math.min(config.config.maxPositions - SERVE_STEPS_ROOM, onGpu ? 512 : 16));
  const chunk = positiveInt('chunk', values.chunk, onGpu ? 256 : 8);
  const repeats = positiveInt('repeats', values.repeats, onGpu ? 5 : 2);
  const top = positiveInt('top', values.top, 30);
  const what = `${running} requests × ${context} cached positions${kind === 'mixed' ? ` + a ${chunk}-token prompt` : ''}`;
  const quantize = profileQuantization(values);
  const sampling = resolveSampling({ ...samplingFlags(values).sampling, seed: 1n });
  const drawn = sampling.temperature === 0 ? 'greedy' : `T ${sampling.temperature}${sampling.topK > 0 ? `, top-k ${sampling.topK}` : ''}${sampling.topP < 1 ? `, top-p ${sampling.topP}` : ''}`;
  log(`fuseformer profile: ${modelName} serving step, ${what}, ${drawn}, ${dtype}${quantLabel(quantize)} on ${backend.description} — ${reason}`);
  const roofs = measureRoofs(backend, dtype);
  if (roofs) log(`roofs: copy ${Math.round(roofs.copyGBps)} GB/s, ${dtype} GEMM ${roofs.gemmTflops.toFixed(0)} TFLOP/s`);
  const result = profileServingStep(backend, config, { kind, running, context, chunk, dtype, repeats, roofs: roofs ?? false, sampling, ...(quantize ? { quantize } : {}) });
  const how = onGpu ? 'graph replay' : 'eager';
  log(`${running + (kind === 'mixed' ? chunk : 0)} positions a step: ${result.stepMs.toFixed(3)} ms (${how})`);
  writeAndPrint(result, `serving step (${kind}, ${how})`, top, resolve(values.out ?? 'profile-out'),
    { model: modelName, family: config.family, mode, batch: running, context, ...(kind === 'mixed' ? { chunk } : {}), sampling: drawn, dtype, repeats, ...(quantize ? { quantize } : {}) },
    `${modelName} serving ${kind}, ${drawn}, ${dtype}${quantLabel(quantize)}, ${what} — ${backend.description}`, log);
  return 0;
}

export async function runProfile(argv: string[], log: (line: string) => void = (line) => process.stdout.write(`${line}\n`)): Promise<number> {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: {
      model: { type: 'string' }, mode: { type: 'string', default: 'train' }, batch: { type: 'string' }, seq: { type: 'string' },
      dtype: { type: 'string' }, 'fused-attention': { type: 'boolean', default: false }, steps: { type: 'string' }, repeats: { type: 'string' },
      top: { type: 'string' }, chunk: { type: 'string' }, temperature: { type: 'string' }, 'top-k': { type: 'string' }, 'top-p': { type: 'string' }, quantize: { type: 'string' }, 'quantize-lm-head': { type: 'boolean', default: false }, out: { type: 'string', default: 'profile-out' }, 'op-timing': { type: 'string' }, backend: { type: 'string' }, help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) { process.stdout.write(PROFILE_USAGE); return 0; }
  const mode = values.mode as ProfileMode;
  if (!PROFILE_MODES.includes(mode)) throw new ArgumentError(`--mode must be one of ${PROFILE_MODES.join(', ')}, got '${values.mode}'`);
  const dtypeArg = values.dtype;
  if (dtypeArg !== undefined && !['f32', 'bf16', 'f16'].includes(dtypeArg)) throw new ArgumentError(`--dtype must be f32, bf16 or f16, got '${dtypeArg}'`);
  checkOutputDirectory(values.out!, '--out');
  // Options a mode does not read are refused, not ignored (the user would think they took effect).
  const notFor: Record<string, readonly ProfileMode[]> = {
    chunk: ['train', 'prefill', 'decode', 'serve-decode'], steps: ['decode', 'serve-decode', 'serve-mixed'],
    'op-timing': ['serve-decode', 'serve-mixed'], 'fused-attention': ['decode', 'serve-decode', 'serve-mixed'],
    ...Object.fromEntries(['temperature', 'top-k', 'top-p'].map((o) => [o, ['train', 'prefill', 'decode'] as const])),
  };
  for (const [option, modes] of Object.entries(notFor)) {
    const given = (values as Record<string, unknown>)[option];
    if (given !== undefined && given !== false && modes.includes(mode)) throw new ArgumentError(`--${option} is not an option of --mode ${mode}`);
  }
  const { backend, reason } = await selectBackend(values.backend as BackendChoice | undefined);
  const onGpu = backend.name === 'cuda';
  const modelName = values.model ?? (onGpu ? 'gpt2-124M' : 'gpt2-tiny');
  const config = modelConfig(modelName);
  const dtype = (dtypeArg ?? (onGpu ? 'bf16' : 'f32')) as FloatDType;
  if (mode === 'decode') return runDecodeProfile(backend, reason, config, modelName, dtype, values, log);
  if (mode === 'serve-decode' || mode === 'serve-mixed') return runServeProfile(backend, reason, config, modelName, dtype, mode, values, log);
  if (values.quantize !== undefined || values['quantize-lm-head']) throw new ArgumentError(`--quantize is for --mode decode, serve-decode and serve-mixed, not ${mode}`);
  if (config.family !== 'gpt2' && config.family !== 'bert') {
    throw new ArgumentError(`--model ${modelName}: --mode ${mode} runs GPT-2 and BERT models; this one is ${config.family} (--mode decode runs GPT-2 and Llama)`);
  }
  const bert = config.family === 'bert';
  const batch = positiveInt('batch', values.batch, onGpu ? (bert ? 32 : 16) : 2);
  const positions = config.config.maxPositions;
  const seq = positiveInt('seq', values.seq, Math.min(positions, onGpu ? (bert ? 256 : 1024) : 32));
  if (seq > positions) throw new ArgumentError(`--seq ${seq} exceeds the model's ${positions} positions`);
  const warmupSteps = positiveInt('steps', values.steps, 3);
  if (warmupSteps < 2) throw new ArgumentError('--steps must be at least 2 (the first step compiles, the second captures the graph)');
  const repeats = positiveInt('repeats', values.repeats, onGpu ? 5 : 2);
  const top = positiveInt('top', values.top, 30);
  const outDir = resolve(values.out!);

  log(`fuseformer profile: ${modelName} ${mode}, ${batch} × ${seq}, ${dtype} on ${backend.description} — ${reason}`);
  const roofs = measureRoofs(backend, dtype);
  if (roofs) log(`roofs: copy ${Math.round(roofs.copyGBps)} GB/s, ${dtype} GEMM ${roofs.gemmTflops.toFixed(0)} TFLOP/s`);
  const model = buildModel(config, backend, dtype, values['fused-attention']!);
  model.params.initialize(1n);
  const runner = new StepRunner(model, { maxBatch: batch, maxSeqLen: seq });
  let result: Profile;
  try {
    result = runner.profileStep(randomBatch(batch, seq, model.vocabSize, bert), {
      training: mode === 'train', lossScale: dtype === 'f16' && mode === 'train' ? 1024 : 1, warmupSteps, repeats, roofs: roofs ?? false, dtype,
      opTiming: opTiming(values['op-timing']),
    });
  } finally {
    runner.dispose();
    model.params.free();
  }
  const stepLabel = mode === 'train' ? `training step${onGpu ? ' (graph replay)' : ''}` : `forward pass${onGpu ? ' (graph replay)' : ''}`;
  const run = { model: modelName, family: config.family, mode, batch, seq, dtype, fusedAttention: values['fused-attention'], warmupSteps, repeats };
  writeAndPrint(result, stepLabel, top, outDir, run, `${modelName} ${mode}, ${dtype}, ${batch}×${seq} — ${backend.description}`, log);
  return 0;
}
