// Quantized projections for the inference engine: per layer the QKV projection, the attention output,
// the MLP's first GEMM (GPT-2's c_fc, or Llama's gate and up stacked [2F, H]) and the down projection,
// as INT4 W4A16 or INT8 W8A8 weights (quant/device.ts) that DecoderForward runs in place of the 16-bit
// GEMMs; optionally the LM head too (`lmHead`: at batch 1 the head is a large share of what a step reads —
// Llama 1.2B's 128256 × 2048 tied table is 0.5 GB of 2.5 in bf16). Embeddings, norms and biases stay in
// the model's float dtype; a tied table keeps its float copy for the embedding lookups, and the head
// reads the quantized copy.
//
// Two ways to get them:
//   quantizeDecoderModel       round-to-nearest from the model's own weights (any family, random or loaded):
//                              INT4 by int4QuantizeWeights on the backend, INT8 per output channel on the host
//   loadQuantizedDecoderModel  a directory `fuseformer quantize` wrote (or a Hugging Face GPTQ / AWQ GPT-2,
//                              quant/checkpoint.ts); the float slots of the quantized layers get the
//                              dequantized weights, so the model's float path computes the same function.
// The stacked matrices are quantized as one: RTN's groups run along a row's inputs, so stacking rows
// (q/k/v, gate/up) gives the same values as quantizing each part alone.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import { quantizeInt8Rows } from '../backend/cpu/quant-math.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { loadQuantizedModel } from '../quant/checkpoint.js';
import type { DeviceInt4Weight, DeviceQuantizedWeight } from '../quant/device.js';
import { freeQuantized, uploadQuantized } from '../quant/device.js';
import type { QuantizationInfo } from '../quant/model.js';
import { dequantizeHostWeight, transpose } from '../quant/weights.js';
import { decoderArchitecture } from './architecture.js';
import { readGenerationConfig } from './generation-config.js';
import { DecoderModel } from './model.js';
import type { LayerWeights } from './model.js';

export type ProjectionRole = 'qkv' | 'out' | 'up' | 'down';
export const PROJECTION_ROLES: readonly ProjectionRole[] = ['qkv', 'out', 'up', 'down'];

/** A layer's quantized projections (a role left out runs its 16-bit GEMM). */
export type QuantizedLayer = Partial<Record<ProjectionRole, DeviceQuantizedWeight>>;

export interface DecoderQuantization {
  readonly info: QuantizationInfo;
  readonly layers: readonly QuantizedLayer[];
  /** The LM head [paddedVocab, hidden], when it was quantized too. */
  readonly lmHead?: DeviceQuantizedWeight;
}

export interface QuantizeDecoderOptions {
  /** Round-to-nearest is the one method that needs no calibration pass. */
  readonly method: 'rtn';
  readonly bits: 4 | 8;
  /** INT4 group size (default 128; a multiple of 32 dividing every projection's input width). */
  readonly groupSize?: number;
  /** Quantize the LM head too (default false; see the header). */
  readonly lmHead?: boolean;
}

/** The float matrix [N out, K in] of a layer's projection. */
function projectionMatrix(layer: LayerWeights, role: ProjectionRole): Tensor {
  return layer[role];
}

/** Sets `model.quantization` to RTN-quantized copies of every layer's four projections. */
export function quantizeDecoderModel(model: DecoderModel, options: QuantizeDecoderOptions): DecoderQuantization {
  if (options.method !== 'rtn') throw new ArgumentError(`quantizeDecoderModel: method '${String(options.method)}' is not supported here (rtn is; calibrated methods run in \`fuseformer quantize\`)`);
  if (options.bits !== 4 && options.bits !== 8) throw new ArgumentError(`quantizeDecoderModel: bits must be 4 or 8, got ${String(options.bits)}`);
  if (model.tensorParallel) throw new ArgumentError('quantizeDecoderModel: quantized weights are not supported with tensor parallelism');
  if (model.quantization) throw new ArgumentError(`${model.source}: the model is already quantized`);
  const G = options.groupSize ?? 128;
  const b = model.backend;
  if (options.bits === 4) {
    const widths = [...new Set([...model.layers.flatMap((layer) => PROJECTION_ROLES.map((r) => projectionMatrix(layer, r).shape[1]!)), ...(options.lmHead ? [model.lmHead.shape[1]!] : [])])];
    if (!(Number.isInteger(G) && G >= 32 && G % 32 === 0) || widths.some((k) => k % G !== 0)) {
      throw new ArgumentError(`quantizeDecoderModel: INT4 group size ${G} must be a multiple of 32 dividing every projection's input width (${widths.join(', ')})`);
    }
  }
  const layers: QuantizedLayer[] = [];
  const quantize = (w: Tensor) => (options.bits === 4 ? int4OnDevice(b, w, G) : int8FromHost(b, w));
  let lmHead: DeviceQuantizedWeight | undefined;
  try {
    for (const layer of model.layers) {
      const q: QuantizedLayer = {};
      layers.push(q);
      for (const role of PROJECTION_ROLES) q[role] = quantize(projectionMatrix(layer, role));
    }
    if (options.lmHead) lmHead = quantize(model.lmHead);
  } catch (error) {
    freeLayers(b, layers);
    throw error;
  }
  const info: QuantizationInfo = { method: 'rtn', bits: options.bits, ...(options.bits === 4 ? { groupSize: G } : {}) };
  return (model.quantization = { info, layers, ...(lmHead ? { lmHead } : {}) });
}

function int4OnDevice(b: Backend, weight: Tensor, G: number): DeviceInt4Weight {
  const [N, K] = weight.shape as [number, number];
  const w: DeviceInt4Weight = {
    kind: 'int4', inFeatures: K, outFeatures: N, groupSize: G,
    qweight: b.empty([N, K / 8], 'i32'), scales: b.empty([N, K / G], 'f16'), zeros: b.empty([N, K / G], 'u8'),
  };
  b.int4QuantizeWeights({ weight, groupSize: G, qweight: w.qweight, scales: w.scales, zeros: w.zeros });
  return w;
}

function int8FromHost(b: Backend, weight: Tensor): DeviceQuantizedWeight {
  const [N, K] = weight.shape as [number, number];
  const { q, scales } = quantizeInt8Rows(b.download(weight) as Float32Array, N, K);
  return uploadQuantized(b, { kind: 'int8', inFeatures: K, outFeatures: N, qweight: q, scales });
}

function freeLayers(b: Backend, layers: readonly QuantizedLayer[]): void {
  for (const layer of layers) for (const w of Object.values(layer)) freeQuantized(b, w);
}

/** Frees the model's quantized weights and returns it to its float path. */
export function dropQuantization(model: DecoderModel): void {
  if (!model.quantization) return;
  freeLayers(model.backend, model.quantization.layers);
  if (model.quantization.lmHead) freeQuantized(model.backend, model.quantization.lmHead);
  model.quantization = undefined;
}

/** Weight bytes one decode step reads with the model's quantized projections (the others at `bytesPerElement`). */
export function quantizedDecodeWeightBytes(model: DecoderModel, floatWeightBytes: number, bytesPerElement: number): number {
  if (!model.quantization) return floatWeightBytes;
  let bytes = floatWeightBytes;
  const swap = (w: DeviceQuantizedWeight, N: number, K: number) => {
    bytes -= N * K * bytesPerElement;
    bytes += w.kind === 'int4' ? N * K / 2 + (N * K / w.groupSize) * 3 : N * K + N * 4;
  };
  model.quantization.layers.forEach((q, l) => {
    for (const role of PROJECTION_ROLES) {
      const w = q[role];
      if (!w) continue;
      const [N, K] = projectionMatrix(model.layers[l]!, role).shape as [number, number];
      swap(w, N, K);
    }
  });
  // The head reads the vocabulary's rows (decodeWeightBytes counts vocabSize × hidden for it).
  const head = model.quantization.lmHead;
  if (head) swap(head, model.vocabSize, head.inFeatures);
  return bytes;
}

/** GPT-2 module prefixes by projection role (quant/model.ts's targets). */
const GPT2_MODULES: Record<ProjectionRole, string> = { qkv: 'attn.c_attn', out: 'attn.c_proj', up: 'mlp.c_fc', down: 'mlp.c_proj' };

/** True when the directory's config.json has a quantization_config. */
export function isQuantizedDirectory(config: Record<string, unknown>): boolean {
  return typeof config['quantization_config'] === 'object' && config['quantization_config'] !== null;
}

/** Loads a quantized GPT-2 directory (ours, GPTQ or AWQ) as a DecoderModel with `quantization` set. */
export function loadQuantizedDecoderModel(dir: string, backend: Backend, options: { dtype?: FloatDType } = {}): DecoderModel {
  const modelType = (JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { model_type?: unknown }).model_type;
  if (modelType !== undefined && modelType !== 'gpt2') {
    throw new ArgumentError(`${dir}: a quantized ${String(modelType)} directory cannot be loaded (quantized checkpoints are read for GPT-2; quantize a 16-bit model on loading with --quantize rtn4|rtn8 instead)`);
  }
  const { config, quantized } = loadQuantizedModel(dir);
  const arch = decoderArchitecture({ family: 'gpt2', config });
  const model = new DecoderModel(backend, arch, options.dtype ?? (backend.name === 'cuda' ? 'bf16' : 'f32'), readGenerationConfig(dir), dir);
  const layers: QuantizedLayer[] = arch.layerNames.map(() => ({}));
  try {
    const known = new Set(arch.weights.map((w) => w.name));
    for (const [name, t] of quantized.floats) {
      if (known.has(name)) model.loadWeight(name, t.data);
    }
    for (const [prefix, w] of quantized.modules) {
      const match = /^transformer\.h\.(\d+)\.(.+)$/.exec(prefix);
      const role = match ? PROJECTION_ROLES.find((r) => GPT2_MODULES[r] === match[2]) : undefined;
      if (!match || !role || Number(match[1]) >= layers.length) throw new ArgumentError(`${dir}: quantized module '${prefix}' is not a projection of this GPT-2`);
      // The float slot holds the dequantized weight (Conv1D's [in, out] file layout).
      model.loadWeight(`${prefix}.weight`, transpose(Float32Array.from(dequantizeHostWeight(w)), w.outFeatures, w.inFeatures));
      layers[Number(match[1])]![role] = uploadQuantized(backend, w);
    }
  } catch (error) {
    freeLayers(backend, layers);
    model.free();
    throw error;
  }
  model.quantization = { info: quantized.info, layers };
  return model;
}
