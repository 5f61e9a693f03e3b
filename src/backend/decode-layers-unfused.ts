// decodeLayers as the chain of unfused ops it stands for (backend.ts has the contract): the CPU backend's
// implementation, and the reference the CUDA megakernel is checked against. It is what
// DecoderForward.blocks() runs for one sequence with qkvRopeAppend + decodeAttention over a dense cache.

import type { Backend, DecodeLayersArgs, GemmEpilogue } from './backend.js';
import type { Tensor } from '../tensor.js';

/** The unfused chain's intermediates for these arguments' sizes (kept by the caller: a captured graph replays them). */
export interface DecodeLayersScratch {
  readonly qkv: Tensor;
  readonly q: Tensor;
  readonly attn: Tensor;
  readonly y: Tensor;
  readonly up: Tensor;
  readonly act: Tensor;
  readonly mask: Tensor;
  readonly zeroBias: Tensor;
}

export function decodeLayersScratch(b: Backend, args: DecodeLayersArgs): DecodeLayersScratch {
  const { x, layers, heads: Hq, kvHeads: Hkv } = args;
  const dtype = x.dtype, H = x.shape[1]!, d = layers[0]!.kCache.shape[3]!, F = layers[0]!.down.shape[1]!;
  const gated = layers[0]!.up.shape[0] === 2 * F;
  const zeroBias = b.empty([F], dtype);
  b.fill(zeroBias, 0);
  return {
    qkv: b.empty([1, (Hq + 2 * Hkv) * d], dtype), q: b.empty([1, Hq, 1, d], dtype), attn: b.empty([1, Hq, d], dtype), y: b.empty([1, H], dtype),
    up: b.empty([1, gated ? 2 * F : F], dtype), act: b.empty([1, F], dtype), mask: b.empty([1, F], 'u8'), zeroBias,
  };
}

export function decodeLayersUnfused(b: Backend, args: DecodeLayersArgs, scratch: DecodeLayersScratch): void {
  const { x, h, positions, layers, norm, eps, heads: Hq, activation } = args;
  const d = layers[0]!.kCache.shape[3]!, F = layers[0]!.down.shape[1]!;
  const gated = layers[0]!.up.shape[0] === 2 * F;
  const { qkv, q, attn, y, up, act, mask, zeroBias } = scratch;
  // A GEMM epilogue applies the bias before the activation without rounding between, as the fused kernel does.
  const epilogue: GemmEpilogue | null = activation === 'gelu_tanh' ? 'gelu_bias' : activation === 'relu' ? 'relu_bias' : null;
  layers.forEach((layer, l) => {
    const previous = l > 0 ? layers[l - 1]! : undefined;
    b.residualNorm({
      x, norm, eps, out: h, gamma: layer.norm1.gamma, ...(layer.norm1.beta ? { beta: layer.norm1.beta } : {}),
      ...(previous ? { y, ...(previous.downBias ? { bias: previous.downBias } : {}) } : {}),
    });
    b.gemm({ a: h, b: layer.qkv, out: qkv, transB: true });
    b.qkvRopeAppend({
      qkv, positions, q, kCache: layer.kCache, vCache: layer.vCache,
      ...(args.rope ? { rope: args.rope } : {}), ...(layer.qkvBias ? { bias: layer.qkvBias } : {}),
    });
    b.decodeAttention({ q: b.view(q, 0, [1, Hq, d]), kCache: layer.kCache, vCache: layer.vCache, positions, out: attn, ...(args.scale !== undefined ? { scale: args.scale } : {}) });
    b.gemm({ a: b.view(attn, 0, [1, Hq * d]), b: layer.out, out: y, transB: true });
    b.residualNorm({
      x, y, norm, eps, out: h, gamma: layer.norm2.gamma, ...(layer.norm2.beta ? { beta: layer.norm2.beta } : {}),
      ...(layer.outBias ? { bias: layer.outBias } : {}),
    });
    if (gated) {
      b.gatedLinear({ x: h, weight: layer.up, up, out: act, activation, ...(layer.upBias ? { bias: layer.upBias } : {}) });
    } else if (epilogue && layer.upBias) {
      b.gemm({ a: h, b: layer.up, out: act, transB: true, epilogue, bias: layer.upBias });
    } else {
      b.gemm({ a: h, b: layer.up, out: up, transB: true });
      b.biasActivationDropout({ input: up, bias: layer.upBias ?? zeroBias, out: act, mask, activation, p: 0, seed: 0n, offset: 0n });
    }
    b.gemm({ a: act, b: layer.down, out: y, transB: true });
  });
  const last = layers.at(-1)!;
  b.residualNorm({
    x, y, norm, eps, out: h, gamma: args.finalNorm.gamma, ...(args.finalNorm.beta ? { beta: args.finalNorm.beta } : {}),
    ...(last.downBias ? { bias: last.downBias } : {}),
  });
}
