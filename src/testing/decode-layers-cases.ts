// decodeLayers cases for the GPU suite (test/gpu/decode-layers.test.ts): the CUDA megakernel against the
// CPU backend's chain of unfused ops, for GPT-2-, Llama- and MQA-shaped stacks of a few layers, at
// positions from the first to one whose keys take two attention splits. Outputs: x (the residual stream
// after the last layer), h (the final norm) and every layer's caches (the new key and value at p).

import type { Activation } from '../backend/backend.js';
import { decodeLayersWorkspaceFloats } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import type { Inputs, OpCase } from './op-cases.js';
import { CaseContext, floats, ints, ropeInvFreq } from './op-cases.js';
import type { Rng } from './random.js';

interface Stack {
  name: string;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  ffn: number;
  layers: number;
  maxLen: number;
  norm: 'layer' | 'rms';
  gated: boolean;
  activation: Activation;
  biases: readonly ('qkv' | 'out' | 'up' | 'down')[];
  rope: boolean;
  positions: readonly number[];
}

export const DECODE_LAYERS_STACKS: readonly Stack[] = [
  { name: 'llama-like', hidden: 512, heads: 8, kvHeads: 2, headDim: 64, ffn: 1376, layers: 3, maxLen: 700, norm: 'rms', gated: true, activation: 'silu', biases: [], rope: true, positions: [0, 37, 600] },
  { name: 'gpt2-like', hidden: 384, heads: 6, kvHeads: 6, headDim: 64, ffn: 1536, layers: 2, maxLen: 96, norm: 'layer', gated: false, activation: 'gelu_tanh', biases: ['qkv', 'out', 'up', 'down'], rope: false, positions: [5, 95] },
  { name: 'mqa d128 qkv-bias', hidden: 264, heads: 2, kvHeads: 1, headDim: 128, ffn: 712, layers: 2, maxLen: 1100, norm: 'rms', gated: true, activation: 'gelu_tanh', biases: ['qkv'], rope: true, positions: [17, 1050] },
];

export function decodeLayersCases(dtype: FloatDType, stacks: readonly Stack[] = DECODE_LAYERS_STACKS): OpCase[] {
  return stacks.flatMap((s) => s.positions.map((position): OpCase => ({
    name: `decodeLayers ${s.name} ${dtype} L=${s.layers} H=${s.hidden} H${s.heads}/${s.kvHeads} d${s.headDim} F=${s.ffn} p=${position}`, dtype,
    // Several layers of 16-bit rounding compound: the unfused chain and the kernel sum in other orders.
    tolerance: dtype === 'bf16' ? 3e-2 : 6e-3,
    inputs: (rng) => stackInputs(rng, s, dtype, position),
    run: (b, inputs) => {
      const c = new CaseContext(b, inputs);
      const { hidden: H, heads: Hq, kvHeads: Hkv, headDim: d, ffn: F } = s;
      const layers = Array.from({ length: s.layers }, (_, l) => {
        const has = (k: Stack['biases'][number]) => s.biases.includes(k);
        const norm = (n: 1 | 2) => ({ gamma: c.in(`l${l}.norm${n}.gamma`), ...(s.norm === 'layer' ? { beta: c.in(`l${l}.norm${n}.beta`) } : {}) });
        return {
          norm1: norm(1), norm2: norm(2), qkv: c.in(`l${l}.qkv`), out: c.in(`l${l}.out`), up: c.in(`l${l}.up`), down: c.in(`l${l}.down`),
          kCache: c.keep(`l${l}.kCache`, c.in(`l${l}.kCache`)), vCache: c.keep(`l${l}.vCache`, c.in(`l${l}.vCache`)),
          ...(has('qkv') ? { qkvBias: c.in(`l${l}.qkvBias`) } : {}), ...(has('out') ? { outBias: c.in(`l${l}.outBias`) } : {}),
          ...(has('up') ? { upBias: c.in(`l${l}.upBias`) } : {}), ...(has('down') ? { downBias: c.in(`l${l}.downBias`) } : {}),
        };
      });
      const workspace = b.empty([decodeLayersWorkspaceFloats({ hidden: H, heads: Hq, kvHeads: Hkv, headDim: d, ffn: F, maxLen: s.maxLen })], 'f32');
      b.fill(workspace, NaN);  // poisoned: nothing may be read from it before this launch writes it
      b.decodeLayers({
        x: c.keep('x', c.in('x')), h: c.out('h', [1, H], dtype), positions: c.in('positions'), layers,
        finalNorm: { gamma: c.in('final.gamma'), ...(s.norm === 'layer' ? { beta: c.in('final.beta') } : {}) },
        norm: s.norm, eps: 1e-5, heads: Hq, kvHeads: Hkv, activation: s.activation, workspace,
        ...(s.rope ? { rope: { invFreq: c.in('invFreq'), scale: 1 } } : {}),
      });
      const results = c.results();
      b.free(workspace);
      // The appended key and value rows on their own (in the whole caches they are a sliver of the norm).
      for (let l = 0; l < s.layers; l++) {
        for (const which of ['k', 'v'] as const) {
          const cache = results[`l${l}.${which}Cache`]!, rows = new Float32Array(Hkv * d);
          for (let g = 0; g < Hkv; g++) for (let i = 0; i < d; i++) rows[g * d + i] = Number(cache[(g * s.maxLen + position) * d + i]);
          results[`l${l}.${which}New`] = rows;
        }
      }
      return results;
    },
  })));
}

function stackInputs(rng: Rng, s: Stack, dtype: FloatDType, position: number): Inputs {
  const { hidden: H, heads: Hq, kvHeads: Hkv, headDim: d, ffn: F } = s;
  const W = (Hq + 2 * Hkv) * d, upRows = s.gated ? 2 * F : F;
  const inputs: Inputs = {
    x: floats(rng, [1, H], dtype, 1), positions: ints([1], [position]), invFreq: ropeInvFreq(d),
    'final.gamma': floats(rng, [H], dtype, 0.5, 1), 'final.beta': floats(rng, [H], dtype, 0.2),
  };
  for (let l = 0; l < s.layers; l++) {
    Object.assign(inputs, {
      [`l${l}.norm1.gamma`]: floats(rng, [H], dtype, 0.5, 1), [`l${l}.norm1.beta`]: floats(rng, [H], dtype, 0.2),
      [`l${l}.norm2.gamma`]: floats(rng, [H], dtype, 0.5, 1), [`l${l}.norm2.beta`]: floats(rng, [H], dtype, 0.2),
      [`l${l}.qkv`]: floats(rng, [W, H], dtype, 2 / Math.sqrt(H)), [`l${l}.qkvBias`]: floats(rng, [W], dtype, 0.3),
      [`l${l}.out`]: floats(rng, [H, Hq * d], dtype, 2 / Math.sqrt(Hq * d)), [`l${l}.outBias`]: floats(rng, [H], dtype, 0.3),
      [`l${l}.up`]: floats(rng, [upRows, H], dtype, 2 / Math.sqrt(H)), [`l${l}.upBias`]: floats(rng, [upRows], dtype, 0.3),
      [`l${l}.down`]: floats(rng, [H, F], dtype, 2 / Math.sqrt(F)), [`l${l}.downBias`]: floats(rng, [H], dtype, 0.3),
      [`l${l}.kCache`]: floats(rng, [1, Hkv, s.maxLen, d], dtype, 2), [`l${l}.vCache`]: floats(rng, [1, Hkv, s.maxLen, d], dtype, 1),
    });
  }
  return inputs;
}
