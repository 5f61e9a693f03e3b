// A decoder-only model ready for inference: its architecture (architecture.ts), one weight workspace in
// the chosen dtype (bf16 by default; f16 or f32 by option) with a typed view per role, and the generation
// defaults of its directory. No gradients, no optimizer state: only what a forward pass reads.
//
// Loading (loadDecoderModel) reads config.json, generation_config.json and the safetensors file(s)
// (model.safetensors, or the shards model.safetensors.index.json lists), tensor by tensor:
//   - names may lack the "transformer." / "model." prefix (files saved from GPT2Model / LlamaModel);
//   - buffers that are not weights (GPT-2's attn.bias masks, old Llama files' rotary_emb.inv_freq) and a
//     tied model's lm_head.weight are skipped; any other unknown tensor is reported in `unused`;
//   - F32, F16 and BF16 tensors are converted to the workspace's dtype; a tensor with another dtype, a
//     shape other than the config implies, a duplicate, or a missing tensor is an error naming it.
// Tensor parallel (options.tensorParallel, dist/tp-decoder.ts): the model holds one rank's shards; the
// checkpoint's shapes are still the whole model's, and each rank reads only its shard's bytes.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { openWeightFile } from '../io/weight-file.js';
import type { WeightFile, WeightInfo } from '../io/weight-file.js';
import { checkLayerCount, shardFiles } from '../models/hf-weights.js';
import { loadModelConfig } from '../models/registry.js';
import type { ModelConfig } from '../models/registry.js';
import { layoutWorkspace, Workspace } from '../nn/workspace.js';
import type { WorkspaceEntry } from '../nn/workspace.js';
import { formatShape, Tensor } from '../tensor.js';
import { dropoutOffsetAdvance } from '../backend/rng.js';
import type { Communicator } from '../dist/communicator.js';
import type { DecoderTensorParallel } from '../dist/tp-decoder.js';
import { decoderWeightSplits, shardDecoderArchitecture, shardFileRanges, shardRowPicks } from '../dist/tp-decoder.js';
import type { DecoderArchitecture, LayerWeightNames, WeightSpec } from './architecture.js';
import { decoderArchitecture } from './architecture.js';
import type { GenerationDefaults } from './generation-config.js';
import { readGenerationConfig } from './generation-config.js';
import { ropeFrequencies } from './rope.js';
import type { RopeFrequencies } from './rope.js';
import { freeQuantized } from '../quant/device.js';
import type { DecoderQuantization } from './quantized.js';

export interface NormWeights {
  readonly gamma: Tensor;
  readonly beta?: Tensor;
}

export interface LayerWeights {
  readonly norm1: NormWeights;
  /** [in, 3·out] (GPT-2) or [(Hq + 2·Hkv)·d, H] (Llama, q/k/v stacked). */
  readonly qkv: Tensor;
  readonly qkvBias?: Tensor;
  /** Qwen3's q_norm / k_norm gammas [headDim] (QkvRopeAppendArgs.headNorm). */
  readonly headNorm?: { readonly q: Tensor; readonly k: Tensor };
  readonly out: Tensor;
  readonly outBias?: Tensor;
  readonly norm2: NormWeights;
  /** GPT-2's c_fc [C, F], or Llama's gate and up stacked [2F, H]. */
  readonly up: Tensor;
  readonly upBias?: Tensor;
  readonly down: Tensor;
  readonly downBias?: Tensor;
}

/**
 * A weight the model does not hold — a quantized projection's float copy (loadQuantizedDecoderModel):
 * its shape and dtype only, no storage. No backend made it, so every op and transfer refuses it by name.
 */
export class WeightNotHeld extends Tensor {}

/** Tensors of a checkpoint that are not weights: causal-mask buffers, RoPE tables, position ids. */
const NOT_WEIGHTS = [/(^|\.)attn\.(masked_)?bias$/, /rotary_emb\.inv_freq$/, /position_ids$/];

export class DecoderModel {
  readonly workspace: Workspace;
  readonly tokenEmbedding: Tensor;
  readonly positionEmbedding?: Tensor;
  readonly layers: readonly LayerWeights[];
  readonly finalNorm: NormWeights;
  /** [paddedVocab, H] (the token embedding when tied). */
  readonly lmHead: Tensor;
  private readonly entries: ReadonlyMap<string, WorkspaceEntry>;
  private readonly specs: ReadonlyMap<string, WeightSpec>;
  private freed = false;
  /** This rank's place in a tensor-parallel group (arch is then the rank's shard of tensorParallel.full). */
  readonly tensorParallel?: DecoderTensorParallel;
  /** Quantized projections that DecoderForward runs instead of the float GEMMs (quantized.ts); freed with the model. */
  quantization?: DecoderQuantization;
  /** Weights the model does not hold (WeightNotHeld: quantized projections loaded without float copies). */
  readonly notHeld: ReadonlySet<string>;

  constructor(
    readonly backend: Backend,
    readonly arch: DecoderArchitecture,
    readonly dtype: FloatDType,
    readonly generation: GenerationDefaults = {},
    /** Where the weights came from (a directory, or a description), for messages. */
    readonly source = 'random weights',
    /** The group this model is one rank of: `arch` is then the whole model, and the model holds its shards. */
    tensorParallel?: Communicator,
    /** Weights not to hold (their names); a packed group is held whole or not at all. */
    notHeld: ReadonlySet<string> = new Set(),
  ) {
    if (tensorParallel) {
      if (tensorParallel.backend !== backend) throw new ArgumentError('DecoderModel: the communicator works on a different backend than the model');
      this.tensorParallel = { comm: tensorParallel, full: arch, splits: decoderWeightSplits(arch) };
      arch = this.arch = shardDecoderArchitecture(arch, tensorParallel.worldSize);
    }
    if (notHeld.size > 0 && tensorParallel) throw new ArgumentError('DecoderModel: a tensor-parallel model holds every weight');
    this.notHeld = notHeld;
    const layout = layoutWorkspace(arch.weights.filter((w) => !notHeld.has(w.name)), dtype);
    this.workspace = Workspace.allocate(backend, layout);
    this.entries = new Map(layout.entries.map((e) => [e.name, e]));
    this.specs = new Map(arch.weights.map((w) => [w.name, w]));
    const one = (name: string): Tensor => (notHeld.has(name) ? new WeightNotHeld(backend.name, this.specs.get(name)!.shape, dtype) : this.workspace.get(name));
    const maybe = (name: string | undefined) => (name === undefined ? undefined : one(name));
    const norm = (n: { gamma: string; beta?: string }): NormWeights => ({ gamma: one(n.gamma), ...(n.beta ? { beta: one(n.beta) } : {}) });
    this.tokenEmbedding = one(arch.tokenEmbedding);
    if (arch.positionEmbedding) this.positionEmbedding = one(arch.positionEmbedding);
    this.layers = arch.layerNames.map((n: LayerWeightNames): LayerWeights => {
      const qkvBias = n.qkvBias ? this.packed(n.qkvBias) : undefined, outBias = maybe(n.outBias);
      const upBias = n.upBias ? this.packed(n.upBias) : undefined, downBias = maybe(n.downBias);
      return {
        norm1: norm(n.norm1), qkv: this.packed(n.qkv), out: one(n.out), norm2: norm(n.norm2), up: this.packed(n.up), down: one(n.down),
        ...(n.headNorm ? { headNorm: { q: one(n.headNorm.q), k: one(n.headNorm.k) } } : {}),
        ...(qkvBias ? { qkvBias } : {}), ...(outBias ? { outBias } : {}), ...(upBias ? { upBias } : {}), ...(downBias ? { downBias } : {}),
      };
    });
    this.finalNorm = norm(arch.finalNorm);
    this.lmHead = one(arch.lmHead);
  }

  get vocabSize(): number { return this.arch.vocabSize; }

  /** RoPE frequencies for a cache of maxLen positions (Llama), uploaded by the caller; undefined for learned positions. */
  ropeFor(maxLen: number): RopeFrequencies | undefined {
    if (this.arch.family !== 'llama' || this.arch.config.family !== 'llama') return undefined;
    return ropeFrequencies(this.arch.config.config, maxLen);
  }

  /** The tensors `names` (stored back to back) as one tensor stacked along the first dimension. */
  private packed(names: readonly string[]): Tensor {
    const held = names.filter((n) => !this.notHeld.has(n));
    if (held.length === 0) {
      const shapes = names.map((n) => this.specs.get(n)!.shape);
      return new WeightNotHeld(this.backend.name, [shapes.reduce((rows, s) => rows + s[0]!, 0), ...shapes[0]!.slice(1)], this.dtype);
    }
    if (held.length < names.length) throw new ArgumentError(`internal: weights ${names.join(', ')} are held in part`);
    if (names.length === 1) return this.workspace.get(names[0]!);
    const entries = names.map((n) => this.entries.get(n)!);
    const first = entries[0]!;
    let end = first.offset;
    for (const e of entries) {
      if (e.offset !== end) throw new ArgumentError(`internal: weights ${names.join(', ')} are not stored back to back`);
      end += e.numel;
    }
    const rows = entries.reduce((n, e) => n + e.shape[0]!, 0);
    return this.backend.view(this.workspace.flat, first.offset, [rows, ...first.shape.slice(1)]);
  }

  /** The stored tensor for `name` without padding rows (a transposed matrix keeps its stored shape). */
  fileView(name: string): Tensor {
    const e = this.entries.get(name), spec = this.specs.get(name);
    if (!e || !spec) throw new ArgumentError(`${this.source}: the model has no weight '${name}'`);
    return this.backend.view(this.workspace.flat, e.offset, spec.transposed ? spec.shape : spec.fileShape ?? spec.shape);
  }

  /** Uploads the checkpoint's values of `name` (in the file's shape and order), transposing where stored so. */
  loadWeight(name: string, values: Float32Array): void {
    const spec = this.specs.get(name);
    if (!spec) throw new ArgumentError(`${this.source}: the model has no weight '${name}'`);
    if (this.notHeld.has(name)) throw new ArgumentError(`${this.source}: weight '${name}' is not held (a quantized projection loaded without its float copy)`);
    const [rows, cols] = spec.fileShape ?? spec.shape;
    this.backend.upload(this.fileView(name), spec.transposed ? transposeMatrix(values, rows!, cols!) : values);
  }

  /** Every weight's name and checkpoint shape. */
  weightShapes(): { name: string; shape: readonly number[] }[] {
    return this.arch.weights.map((w) => ({ name: w.name, shape: w.fileShape ?? w.shape }));
  }

  /**
   * Random weights from the Philox stream (benchmarks, tests): matrices N(0, std), norm gains 1, biases
   * and norm shifts 0 (HF's initialisation). Padding rows stay zero.
   */
  initializeRandom(seed: bigint, std = 0.02): void {
    const norms = new Set(this.arch.layerNames.flatMap((n) => [n.norm1.gamma, n.norm2.gamma]).concat(this.arch.finalNorm.gamma));
    const tp = this.tensorParallel, b = this.backend;
    let offset = 0n;
    // Under tensor parallelism the stream runs over the whole model's tensors (tp.full, same order):
    // each split matrix is drawn whole into a temporary and this rank's shard gathered from it, so the
    // shards are exactly the single-GPU model's.
    for (const w of tp ? tp.full.weights : this.arch.weights) {
      const t = this.fileView(w.name);
      const split = tp?.splits.get(w.name);
      if (norms.has(w.name)) b.fill(t, 1);
      else if (t.rank === 1) b.fill(t, 0);
      else if (!split || split.kind === 'replicated') {
        b.randomFill({ out: t, seed, offset, distribution: 'normal', mean: 0, std });
        offset += dropoutOffsetAdvance(t.numel);
      } else {
        const whole = b.empty(w.shape, this.dtype);
        try {
          b.randomFill({ out: whole, seed, offset, distribution: 'normal', mean: 0, std });
          offset += dropoutOffsetAdvance(whole.numel);
          const { rows, width, picks } = shardRowPicks(w, split, tp!.comm.rank, tp!.comm.worldSize);
          const index = b.fromArray(picks, [picks.length], 'i32');
          b.embedTokens({ tokens: index, tokenTable: b.view(whole, 0, [rows, width]), out: b.view(t, 0, [picks.length, width]) });
          b.free(index);
        } finally {
          b.free(whole);
        }
      }
    }
  }

  /** Values of checkpoint tensor `name` for this model: whole, or this rank's shard read alone. */
  readCheckpointTensor(reader: WeightFile, info: WeightInfo, name: string): Float32Array {
    const tp = this.tensorParallel, split = tp?.splits.get(name);
    if (!split || split.kind === 'replicated') return reader.readFloats(info.name);
    const spec = tp!.full.weights.find((w) => w.name === name)!;
    return reader.readFloats(info.name, shardFileRanges(spec, split, tp!.comm.rank, tp!.comm.worldSize));
  }

  free(): void {
    if (this.freed) return;
    this.freed = true;
    for (const layer of this.quantization?.layers ?? []) for (const w of Object.values(layer)) freeQuantized(this.backend, w);
    if (this.quantization?.lmHead) freeQuantized(this.backend, this.quantization.lmHead);
    this.backend.free(this.workspace.flat);
  }
}

/** Options for loading a model directory. */
export interface LoadOptions {
  /** Weight and activation dtype (default bf16 on CUDA, f32 on the CPU). */
  readonly dtype?: FloatDType;
  /** Load this rank's shards for Megatron tensor parallelism over the communicator's group (dist/tp-decoder.ts). */
  readonly tensorParallel?: Communicator;
  /**
   * Leave out an untied LM head (an embedding model's encoder reads the final norm's rows only): the model
   * neither needs nor holds lm_head.weight (one in the files is reported unused), and lmHead refuses every op.
   */
  readonly withoutHead?: boolean;
}

export interface LoadedModel {
  readonly model: DecoderModel;
  readonly files: readonly string[];
  /** Tensors in the files that are not weights of the model (reported, not an error). */
  readonly unused: readonly string[];
}

/** Loads an HF model directory (config.json, safetensors, generation_config.json) onto `backend`. */
export function loadDecoderModel(dir: string, backend: Backend, options: LoadOptions = {}): LoadedModel {
  const config = loadModelConfig(dir);
  const files = shardFiles(dir);
  if (config.family === 'gpt2' || config.family === 'llama') {
    checkLayerCount(dir, files, LAYER_INDEX, config.family === 'gpt2' ? 'n_layer' : 'num_hidden_layers', config.config.layers);
  }
  const arch = decoderArchitecture(config);
  const dtype = options.dtype ?? (backend.name === 'cuda' ? 'bf16' : 'f32');
  if (!['f32', 'f16', 'bf16'].includes(dtype)) throw new ArgumentError(`loadDecoderModel: dtype must be f32, f16 or bf16, got ${JSON.stringify(dtype)}`);
  // Every tensor's name, shape and dtype are checked from the files' headers before the model's memory is
  // allocated: a config.json whose sizes do not match the checkpoint is named, not an allocation failure.
  const notHeld = new Set(options.withoutHead && !arch.tiedEmbeddings ? [arch.lmHead] : []);
  const plan = planWeights(arch, dir, files, notHeld);
  const model = new DecoderModel(backend, arch, dtype, readGenerationConfig(dir, arch.vocabSize), dir, options.tensorParallel, notHeld);
  try {
    loadWeights(model, plan);
    return { model, files, unused: plan.unused };
  } catch (error) {
    model.free();
    throw error;
  }
}

/** A model with random weights for `config` (no files). */
export function randomDecoderModel(config: ModelConfig, backend: Backend, options: { dtype?: FloatDType; seed?: bigint; std?: number; tensorParallel?: Communicator } = {}): DecoderModel {
  const model = new DecoderModel(backend, decoderArchitecture(config), options.dtype ?? (backend.name === 'cuda' ? 'bf16' : 'f32'), {}, 'random weights', options.tensorParallel);
  model.initializeRandom(options.seed ?? 1n, options.std);
  return model;
}

/** Which file holds each weight, checked against the architecture; tensors that are not weights. */
interface WeightPlan {
  readonly byFile: ReadonlyMap<string, readonly { readonly tensor: string; readonly weight: string }[]>;
  readonly unused: readonly string[];
}

/** The layer index in a per-layer tensor name (`h.3.`, `layers.3.`), if it is one. */
const LAYER_INDEX = /(?:^|\.)(?:h|layers)\.(\d+)\./;


function planWeights(arch: DecoderArchitecture, dir: string, files: readonly string[], notHeld: ReadonlySet<string>): WeightPlan {
  // The checkpoint holds the whole model's tensors, also when the model is one rank's shards.
  const expected = new Map(arch.weights.filter((w) => !notHeld.has(w.name)).map((w) => [w.name, w.fileShape ?? w.shape]));
  const loadedFrom = new Map<string, string>();
  const byFile = new Map<string, { tensor: string; weight: string }[]>();
  const unused: string[] = [];
  let headInFile: { file: string; tensor: string } | undefined;
  for (const file of files) {
    const reader = openWeightFile(file);
    const picks: { tensor: string; weight: string }[] = [];
    try {
      for (const info of reader.tensors) {
        const name = expected.has(info.name) ? info.name : expected.has(arch.optionalPrefix + info.name) ? arch.optionalPrefix + info.name : undefined;
        if (name === undefined) {
          if (arch.tiedEmbeddings && info.name === 'lm_head.weight') headInFile = { file, tensor: info.name };
          else if (!NOT_WEIGHTS.some((re) => re.test(info.name))) unused.push(info.name);
          continue;
        }
        const shape = expected.get(name)!;
        if (formatShape(info.shape) !== formatShape(shape)) {
          throw new ArgumentError(`${file}: tensor '${info.name}' has shape ${formatShape(info.shape)}; the ${arch.family} config (${dir}/config.json) implies ${formatShape(shape)}`);
        }
        if (info.dtype !== 'F32' && info.dtype !== 'F16' && info.dtype !== 'BF16') {
          throw new ArgumentError(`${file}: tensor '${info.name}' is ${info.dtype}; only F32, F16 and BF16 weights are read`);
        }
        const earlier = loadedFrom.get(name);
        if (earlier !== undefined) throw new ArgumentError(`${file}: tensor '${info.name}' also appears in ${earlier}`);
        loadedFrom.set(name, file);
        picks.push({ tensor: info.name, weight: name });
      }
    } finally {
      reader.close();
    }
    byFile.set(file, picks);
  }
  const missing = [...expected.keys()].filter((n) => !loadedFrom.has(n));
  if (missing.length > 0) {
    const list = missing.slice(0, 5).map((n) => `'${n}' ${formatShape(expected.get(n)!)}`).join(', ');
    // A sequence classifier (score.weight in place of the LM head) generates nothing; it reranks.
    const classifier = missing.length === 1 && missing[0] === arch.lmHead && unused.includes('score.weight')
      ? ' — it is a …ForSequenceClassification checkpoint (score.weight in place of an LM head): `fuseformer rerank` scores with it' : '';
    throw new ArgumentError(`${dir}: the checkpoint (${files.length} file${files.length > 1 ? 's' : ''}) lacks ${missing.length} weight(s) the ${arch.family} model needs: ${list}${missing.length > 5 ? ', …' : ''}${classifier}`);
  }
  // A tied model's head in the file: the embedding's copy (PyTorch state dicts keep lm_head.weight on the
  // embedding's storage) is the tie itself; a different one is reported unused, not dropped silently.
  if (headInFile && !sameBytes(headInFile, { file: loadedFrom.get(arch.lmHead)!, tensor: byFile.get(loadedFrom.get(arch.lmHead)!)!.find((p) => p.weight === arch.lmHead)!.tensor })) {
    unused.push(headInFile.tensor);
  }
  return { byFile, unused };
}

/** Whether two checkpoint tensors hold the same bytes. */
function sameBytes(a: { file: string; tensor: string }, b: { file: string; tensor: string }): boolean {
  const read = ({ file, tensor }: { file: string; tensor: string }) => {
    const reader = openWeightFile(file);
    try {
      return reader.read(tensor);
    } finally {
      reader.close();
    }
  };
  const x = read(a), y = read(b);
  return x.dtype === y.dtype && Buffer.from(x.bytes.buffer, x.bytes.byteOffset, x.bytes.byteLength).equals(Buffer.from(y.bytes.buffer, y.bytes.byteOffset, y.bytes.byteLength));
}

function loadWeights(model: DecoderModel, plan: WeightPlan): void {
  for (const [file, picks] of plan.byFile) {
    const reader = openWeightFile(file);
    try {
      for (const { tensor, weight } of picks) model.loadWeight(weight, model.readCheckpointTensor(reader, reader.info(tensor), weight));
    } finally {
      reader.close();
    }
  }
}

/** The [cols, rows] transpose of a row-major [rows, cols] matrix. */
function transposeMatrix(values: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(values.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = values[r * cols + c]!;
  return out;
}


