// An independent BERT forward pass in plain float64 over host weights (canonical HF names, torch Linear
// layout [out, in]), written from HF's modeling_bert.py rather than from the encoder: per sequence, the
// embeddings' sum and LayerNorm, each layer's self-attention with an additive key mask (padded keys get
// −∞), the post-LN residual blocks, the pooler, and the MLM head. One sequence at a time, no fused ops.

import { geluErf } from '../../src/backend/cpu/activation.js';
import type { BertConfig } from '../../src/models/bert.js';
import type { HostWeights } from './hf-folder.js';

type Vector = Float64Array;

export interface BertReference {
  /** [L][H] per position. */
  readonly hidden: Vector[];
  /** [H], when the weights have a pooler. */
  readonly pooled?: Vector;
  /** [L][V], when the weights have the MLM head. */
  readonly logits?: Vector[];
}

function tensor(w: HostWeights, name: string): { shape: number[]; data: Float32Array } {
  const t = w.get(name);
  if (!t) throw new Error(`reference: no weight ${name}`);
  return t;
}
/** x · Wᵀ + b for W [out, in]. */
function linear(w: HostWeights, name: string, x: Vector): Vector {
  const W = tensor(w, `${name}.weight`), b = tensor(w, `${name}.bias`).data;
  const [out, inp] = W.shape as [number, number];
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = b[o]!;
    for (let i = 0; i < inp; i++) s += W.data[o * inp + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}
function layerNorm(w: HostWeights, name: string, x: Vector, eps: number): Vector {
  const g = tensor(w, `${name}.weight`).data, b = tensor(w, `${name}.bias`).data;
  const mean = x.reduce((s, v) => s + v, 0) / x.length;
  const variance = x.reduce((s, v) => s + (v - mean) ** 2, 0) / x.length;
  return x.map((v, i) => ((v - mean) / Math.sqrt(variance + eps)) * g[i]! + b[i]!);
}
function row(w: HostWeights, name: string, index: number): Vector {
  const t = tensor(w, name), H = t.shape[1]!;
  return Float64Array.from(t.data.subarray(index * H, (index + 1) * H));
}
const add = (a: Vector, b: Vector): Vector => a.map((v, i) => v + b[i]!);

function activation(config: BertConfig): (x: number) => number {
  switch (config.activation) {
    case 'gelu': return geluErf;
    case 'gelu_tanh': return (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
    case 'relu': return (x) => Math.max(0, x);
    case 'silu': return (x) => x / (1 + Math.exp(-x));
  }
}

/**
 * One sequence: ids, token types and the attention mask (1 = token, 0 = padding) of one length L; the
 * untied decoder (cls.predictions.decoder.weight) is used when present, else the word embeddings.
 */
export function bertReference(config: BertConfig, w: HostWeights, ids: readonly number[], mask: readonly number[], types: readonly number[] = ids.map(() => 0)): BertReference {
  const { hidden: H, heads } = config, d = H / heads, eps = config.layerNormEps, act = activation(config);
  let h = ids.map((t, p) => layerNorm(w, 'bert.embeddings.LayerNorm', add(add(row(w, 'bert.embeddings.word_embeddings.weight', t), row(w, 'bert.embeddings.token_type_embeddings.weight', types[p]!)), row(w, 'bert.embeddings.position_embeddings.weight', p)), eps));
  for (let l = 0; l < config.layers; l++) {
    const prefix = `bert.encoder.layer.${l}`, self = `${prefix}.attention.self`;
    const q = h.map((x) => linear(w, `${self}.query`, x)), k = h.map((x) => linear(w, `${self}.key`, x)), v = h.map((x) => linear(w, `${self}.value`, x));
    const context = h.map((_, i) => {
      const out = new Float64Array(H);
      for (let head = 0; head < heads; head++) {
        const o = head * d;
        const scores = k.map((kj, j) => {
          if (mask[j] === 0) return -Infinity;
          let s = 0;
          for (let c = 0; c < d; c++) s += q[i]![o + c]! * kj[o + c]!;
          return s / Math.sqrt(d);
        });
        const max = Math.max(...scores), e = scores.map((s) => Math.exp(s - max)), sum = e.reduce((a, b) => a + b, 0);
        e.forEach((p, j) => { for (let c = 0; c < d; c++) out[o + c]! += (p / sum) * v[j]![o + c]!; });
      }
      return out;
    });
    h = h.map((x, i) => layerNorm(w, `${prefix}.attention.output.LayerNorm`, add(linear(w, `${prefix}.attention.output.dense`, context[i]!), x), eps));
    h = h.map((x) => layerNorm(w, `${prefix}.output.LayerNorm`, add(linear(w, `${prefix}.output.dense`, linear(w, `${prefix}.intermediate.dense`, x).map(act)), x), eps));
  }
  const result: { hidden: Vector[]; pooled?: Vector; logits?: Vector[] } = { hidden: h };
  if (w.has('bert.pooler.dense.weight')) result.pooled = linear(w, 'bert.pooler.dense', h[0]!).map(Math.tanh);
  if (w.has('cls.predictions.transform.dense.weight')) {
    const decoder = w.has('cls.predictions.decoder.weight') ? 'cls.predictions.decoder.weight' : 'bert.embeddings.word_embeddings.weight';
    const bias = tensor(w, 'cls.predictions.bias').data;
    result.logits = h.map((x) => {
      const t = layerNorm(w, 'cls.predictions.transform.LayerNorm', linear(w, 'cls.predictions.transform.dense', x).map(act), eps);
      return Float64Array.from({ length: config.vocabSize }, (_, j) => row(w, decoder, j).reduce((s, e, c) => s + e * t[c]!, bias[j]!));
    });
  }
  return result;
}
