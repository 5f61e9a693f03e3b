// A quantized GPT-2 on the host, and putting it onto a model:
//   - the quantization targets: per block the QKV projection (attn.c_attn), the attention output
//     (attn.c_proj), and the MLP's two layers (mlp.c_fc, mlp.c_proj); embeddings, LayerNorms, biases
//     and the (tied) LM head stay in floating point;
//   - QuantizedModel: the quantized weights by module prefix ("transformer.h.0.attn.c_attn") plus every
//     float parameter, including LayerNorms and biases that smoothing folded factors into;
//   - applyQuantizedModel: float parameters into the model's workspace (the quantized layers' float
//     weights set to their dequantized values, so the float path computes the same function), and each
//     target Linear's `quantized` forward set to the uploaded weights.

import type { Backend } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import type { Gpt2Model } from '../models/gpt2-model.js';
import type { Linear } from '../nn/linear.js';
import { formatShape } from '../tensor.js';
import type { DeviceQuantizedWeight } from './device.js';
import { freeQuantized, quantizedForward, uploadQuantized } from './device.js';
import type { QuantizedHostWeight } from './weights.js';
import { dequantizeHostWeight, transpose } from './weights.js';

export type TargetRole = 'qkv' | 'attn_out' | 'fc1' | 'fc2';

export interface QuantTarget {
  /** The module's HF name: its weight is `${prefix}.weight`, its bias `${prefix}.bias`. */
  readonly prefix: string;
  readonly layer: number;
  readonly role: TargetRole;
  readonly linear: Linear;
}

export function gpt2QuantTargets(model: Gpt2Model): QuantTarget[] {
  return model.blocks.flatMap((block, layer) => {
    const entries: [TargetRole, Linear][] = [['qkv', block.attention.qkv], ['attn_out', block.attention.out], ['fc1', block.fc1], ['fc2', block.fc2]];
    return entries.map(([role, linear]) => ({ prefix: linear.weight.name.replace(/\.weight$/, ''), layer, role, linear }));
  });
}

export type HostParams = Map<string, { shape: readonly number[]; data: Float32Array }>;

/** How the weights were quantized (recorded in the checkpoint). */
export interface QuantizationInfo {
  /** rtn | awq | gptq (INT4), smoothquant | rtn (INT8), or gptq/awq for imported Hugging Face checkpoints. */
  readonly method: string;
  readonly bits: 4 | 8;
  /** INT4 group size. */
  readonly groupSize?: number;
  /** SmoothQuant's migration strength (INT8), 0 = no smoothing. */
  readonly smoothAlpha?: number;
  /** GPTQ with act-order (its weights read their inputs in their own order). */
  readonly actOrder?: boolean;
}

export interface QuantizedModel {
  readonly info: QuantizationInfo;
  readonly modules: Map<string, QuantizedHostWeight>;
  /** Every other parameter in its checkpoint shape (the quantized modules' weights are not here). */
  readonly floats: HostParams;
}

/** A copy of a target's float weight as n-major [N, K] f32 (GPT-2's Conv1D stores [K, N]). */
export function targetWeight(target: QuantTarget, params: HostParams): Float32Array {
  const name = `${target.prefix}.weight`;
  const w = params.get(name);
  if (!w) throw new ArgumentError(`no float weight '${name}'`);
  const { inFeatures: K, outFeatures: N } = target.linear;
  return target.linear.layout === 'in_out' ? transpose(w.data, K, N) : Float32Array.from(w.data);
}

/** Writes an n-major [N, K] weight back into the target's parameter in its own layout. */
export function setTargetWeight(target: QuantTarget, params: HostParams, nMajor: ArrayLike<number>): void {
  const name = `${target.prefix}.weight`;
  const w = params.get(name);
  if (!w) throw new ArgumentError(`no float weight '${name}'`);
  const { inFeatures: K, outFeatures: N } = target.linear;
  const values = Float32Array.from(nMajor);
  w.data.set(target.linear.layout === 'in_out' ? transpose(values, N, K) : values);
}

/** What applyQuantizedModel put on the device; detach() restores the float path and frees it. */
export interface AppliedQuantization {
  readonly weights: ReadonlyMap<string, DeviceQuantizedWeight>;
  detach(): void;
}

export function applyQuantizedModel(model: Gpt2Model, q: QuantizedModel): AppliedQuantization {
  const backend: Backend = model.backend;
  const targets = new Map(gpt2QuantTargets(model).map((t) => [t.prefix, t]));
  for (const prefix of q.modules.keys()) {
    if (!targets.has(prefix)) throw new ArgumentError(`quantized module '${prefix}' is not a linear layer of this model (${targets.size} are: ${[...targets.keys()].slice(0, 4).join(', ')}, …)`);
  }
  const params: HostParams = new Map(q.floats);
  for (const [prefix, w] of q.modules) {
    const target = targets.get(prefix)!;
    const { inFeatures: K, outFeatures: N } = target.linear;
    if (w.inFeatures !== K || w.outFeatures !== N) {
      throw new ArgumentError(`quantized module '${prefix}' is ${w.outFeatures}×${w.inFeatures} (out × in), the model's layer ${N}×${K}`);
    }
    const dense = Float32Array.from(dequantizeHostWeight(w));
    params.set(`${prefix}.weight`, { shape: target.linear.weight.value.shape, data: target.linear.layout === 'in_out' ? transpose(dense, N, K) : dense });
  }
  for (const e of model.params.fileShapes()) {
    const p = params.get(e.name);
    if (p && formatShape(p.shape) !== formatShape(e.shape)) throw new ArgumentError(`parameter '${e.name}' has shape ${formatShape(p.shape)}, the model expects ${formatShape(e.shape)}`);
  }
  model.params.upload(params, 'quantized model');
  const weights = new Map<string, DeviceQuantizedWeight>();
  for (const [prefix, w] of q.modules) {
    const device = uploadQuantized(backend, w);
    weights.set(prefix, device);
    targets.get(prefix)!.linear.quantized = quantizedForward(device);
  }
  return {
    weights,
    detach() {
      for (const [prefix, w] of weights) {
        delete targets.get(prefix)!.linear.quantized;
        freeQuantized(backend, w);
      }
      weights.clear();
    },
  };
}
