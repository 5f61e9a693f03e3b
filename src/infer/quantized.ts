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
//   loadQuantizedDecoderModel  a directory `fuseformer quantize` wrote (or a Hugging Face GPTQ / AWQ GPT-2 or
//                              Llama, quant/checkpoint.ts); the quantized projections' float slots are not
//                              held (WeightNotHeld), unless floatCopies keeps their dequantized weights (the
//                              float path then computes the same function); q/k/v and gate/up, separate
//                              modules in the files, are stacked into one weight.
// The stacked matrices are quantized as one: RTN's groups run along a row's inputs, so stacking rows
// (q/k/v, gate/up) gives the same values as quantizing each part alone.

import type { Backend } from '../backend/backend.js';
import { quantizeInt8Rows } from '../backend/cpu/quant-math.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { loadQuantizedModel } from '../quant/checkpoint.js';
import type { DeviceInt4Weight, DeviceQuantizedWeight } from '../quant/device.js';
import { freeQuantized, uploadQuantized } from '../quant/device.js';
import type { QuantizationInfo } from '../quant/model.js';
import type { Int4HostWeight, Int8HostWeight, QuantizedHostWeight } from '../quant/weights.js';
import { dequantizeHostWeight, transpose } from '../quant/weights.js';
import { decoderArchitecture } from './architecture.js';
import type { LayerWeightNames } from './architecture.js';
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

/**
 * Adds a round-to-nearest copy of the LM head to a model whose projections are already quantized (a
 * `fuseformer quantize` / GPTQ / AWQ directory): INT4 in the projections' group size, or INT8 W8A8, as
 * the projections are. The embedding keeps its float table.
 */
export function quantizeLmHead(model: DecoderModel): void {
  const q = model.quantization;
  if (!q) throw new ArgumentError(`${model.source}: the model is not quantized (quantize its projections first)`);
  if (q.lmHead) throw new ArgumentError(`${model.source}: the LM head is already quantized`);
  const H = model.lmHead.shape[1]!, G = q.info.groupSize ?? 128;
  if (q.info.bits === 4 && H % G !== 0) throw new ArgumentError(`${model.source}: INT4 group size ${G} does not divide the LM head's ${H} inputs`);
  const lmHead = q.info.bits === 4 ? int4OnDevice(model.backend, model.lmHead, G) : int8FromHost(model.backend, model.lmHead);
  model.quantization = { ...q, lmHead };
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
  if (model.notHeld.size > 0) throw new ArgumentError(`${model.source}: its quantized projections were loaded without float copies, so it has no float path (load with floatCopies: true to keep them)`);
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

/** True when the directory's config.json has a quantization_config. */
export function isQuantizedDirectory(config: Record<string, unknown>): boolean {
  return typeof config['quantization_config'] === 'object' && config['quantization_config'] !== null;
}

/** A layer's projection weights by role, in stacking order (several for Llama's q/k/v and gate/up). */
export function projectionWeightNames(names: LayerWeightNames): Record<ProjectionRole, readonly string[]> {
  return { qkv: names.qkv, out: [names.out], up: names.up, down: [names.down] };
}

/** Module prefixes of a layer's projections by role (the weight names without ".weight"). */
function projectionModules(names: LayerWeightNames): Record<ProjectionRole, readonly string[]> {
  const all = projectionWeightNames(names), prefix = (name: string) => name.replace(/\.weight$/, '');
  return { qkv: all.qkv.map(prefix), out: all.out.map(prefix), up: all.up.map(prefix), down: all.down.map(prefix) };
}

/**
 * The parts of a stacked projection as one weight, rows in order (Llama's q, k, v or gate, up), or
 * undefined when they cannot run as one quantized product: a part left in floating point, or parts of
 * different kinds, group sizes or input orders (act-order GPTQ: q, k and v share theirs, being ordered
 * by the same input's Hessian). Stacking is exact: a row's groups, scales and zero points are its own.
 */
export function stackHostWeights(parts: readonly (QuantizedHostWeight | undefined)[]): QuantizedHostWeight | undefined {
  const first = parts[0];
  const sameOrder = (a: Int32Array | undefined, b: Int32Array | undefined) => (a === undefined ? b === undefined : b !== undefined && a.every((k, j) => k === b[j]));
  const matches = (w: QuantizedHostWeight | undefined): boolean => w !== undefined && first !== undefined && w.kind === first.kind && w.inFeatures === first.inFeatures &&
    (w.kind !== 'int4' || (first.kind === 'int4' && w.groupSize === first.groupSize && sameOrder(w.inputOrder, first.inputOrder)));
  if (!first || !parts.every(matches)) return undefined;
  if (parts.length === 1) return first;
  const all = parts as readonly QuantizedHostWeight[];
  const N = all.reduce((n, w) => n + w.outFeatures, 0), K = first.inFeatures;
  const concat = <T extends Int32Array | Float32Array | Uint8Array | Int8Array>(make: (n: number) => T, pick: (w: QuantizedHostWeight) => T): T => {
    const out = make(all.reduce((n, w) => n + pick(w).length, 0));
    let at = 0;
    for (const w of all) { out.set(pick(w), at); at += pick(w).length; }
    return out;
  };
  if (first.kind === 'int4') {
    const int4 = all as readonly Int4HostWeight[];
    const pick4 = <T extends Int32Array | Float32Array | Uint8Array>(f: (w: Int4HostWeight) => T) => (w: QuantizedHostWeight) => f(w as Int4HostWeight);
    return {
      kind: 'int4', inFeatures: K, outFeatures: N, groupSize: int4[0]!.groupSize, ...(int4[0]!.inputOrder ? { inputOrder: int4[0]!.inputOrder } : {}),
      qweight: concat((n) => new Int32Array(n), pick4((w) => w.qweight)), scales: concat((n) => new Float32Array(n), pick4((w) => w.scales)),
      zeros: concat((n) => new Uint8Array(n), pick4((w) => w.zeros)),
    };
  }
  return {
    kind: 'int8', inFeatures: K, outFeatures: N,
    qweight: concat((n) => new Int8Array(n), (w) => (w as Int8HostWeight).qweight), scales: concat((n) => new Float32Array(n), (w) => (w as Int8HostWeight).scales),
  };
}

/**
 * Loads a quantized GPT-2 or Llama-family directory (ours, GPTQ or AWQ) as a DecoderModel with
 * `quantization` set. A projection runs quantized when all its parts are (q, k and v; gate and up) with
 * one kind, group size and input order; its float copy is then not held (WeightNotHeld: the model takes
 * the quantized bytes, not the float model's), unless `floatCopies` keeps it — the dequantized weights,
 * so that dropQuantization runs the same function in floating point. A projection with a part left in
 * floating point runs its float GEMM on the dequantized weights.
 */
export function loadQuantizedDecoderModel(dir: string, backend: Backend, options: { dtype?: FloatDType; floatCopies?: boolean } = {}): DecoderModel {
  const { model: config, quantized } = loadQuantizedModel(dir);
  const arch = decoderArchitecture(config);
  const specs = new Map(arch.weights.map((w) => [w.name, w]));
  for (const prefix of quantized.modules.keys()) {
    if (!specs.has(`${prefix}.weight`)) throw new ArgumentError(`${dir}: quantized module '${prefix}' is not a projection of this ${arch.family} model`);
  }
  const stacks = arch.layerNames.map((names) => {
    const modules = projectionModules(names);
    return PROJECTION_ROLES.map((role) => ({ role, parts: modules[role], stacked: stackHostWeights(modules[role].map((p) => quantized.modules.get(p))) }));
  });
  const notHeld = new Set(options.floatCopies ? [] : stacks.flat().filter((s) => s.stacked).flatMap((s) => s.parts.map((p) => `${p}.weight`)));
  const model = new DecoderModel(backend, arch, options.dtype ?? (backend.name === 'cuda' ? 'bf16' : 'f32'), readGenerationConfig(dir, arch.vocabSize), dir, undefined, notHeld);
  const layers: QuantizedLayer[] = arch.layerNames.map(() => ({}));
  try {
    for (const [name, t] of quantized.floats) {
      if (specs.has(name)) model.loadWeight(name, t.data);
    }
    for (const [prefix, w] of quantized.modules) {
      const name = `${prefix}.weight`, spec = specs.get(name)!;
      if (notHeld.has(name)) continue;
      // The float slot holds the dequantized weight, in the file's layout (GPT-2's Conv1D: [in, out]).
      const dense = Float32Array.from(dequantizeHostWeight(w));
      model.loadWeight(name, spec.transposed ? transpose(dense, w.outFeatures, w.inFeatures) : dense);
    }
    stacks.forEach((roles, l) => {
      for (const { role, stacked } of roles) if (stacked) layers[l]![role] = uploadQuantized(backend, stacked);
    });
  } catch (error) {
    freeLayers(backend, layers);
    model.free();
    throw error;
  }
  model.quantization = { info: quantized.info, layers };
  return model;
}
