// An independent forward pass of GPT-2 and Llama in plain float64 over host weights (HF names and
// layouts), written from the HF modelling code rather than from the engine: full causal attention over
// the whole sequence, no cache, no fused ops. Logits [L, V] for every position.

import type { Gpt2Config } from '../../src/models/gpt2.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import type { HostWeights } from './hf-folder.js';

type Matrix = Float64Array[];

function rowsOf(w: HostWeights, name: string): Matrix {
  const t = w.get(name);
  if (!t) throw new Error(`reference: no weight ${name}`);
  const [r, c] = t.shape as [number, number];
  return Array.from({ length: r }, (_, i) => Float64Array.from(t.data.subarray(i * c, (i + 1) * c)));
}
function vectorOf(w: HostWeights, name: string): Float64Array {
  const t = w.get(name);
  if (!t) throw new Error(`reference: no weight ${name}`);
  return Float64Array.from(t.data);
}
/** x [n] · W where W is [n, m] (Conv1D layout). */
function matIn(x: Float64Array, w: Matrix): Float64Array {
  const out = new Float64Array(w[0]!.length);
  for (let i = 0; i < x.length; i++) for (let j = 0; j < out.length; j++) out[j]! += x[i]! * w[i]![j]!;
  return out;
}
/** x [n] · Wᵀ where W is [m, n] (torch Linear layout). */
function matOut(x: Float64Array, w: Matrix): Float64Array {
  return Float64Array.from(w, (row) => row.reduce((s, v, i) => s + v * x[i]!, 0));
}
const add = (a: Float64Array, b: Float64Array) => a.map((v, i) => v + b[i]!);
function layerNorm(x: Float64Array, g: Float64Array, b: Float64Array, eps: number): Float64Array {
  const mean = x.reduce((s, v) => s + v, 0) / x.length;
  const variance = x.reduce((s, v) => s + (v - mean) ** 2, 0) / x.length;
  return x.map((v, i) => ((v - mean) / Math.sqrt(variance + eps)) * g[i]! + b[i]!);
}
function rmsNorm(x: Float64Array, g: Float64Array, eps: number): Float64Array {
  const ms = x.reduce((s, v) => s + v * v, 0) / x.length;
  return x.map((v, i) => (v / Math.sqrt(ms + eps)) * g[i]!);
}
const geluTanh = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
const silu = (x: number) => x / (1 + Math.exp(-x));

/** softmax(q·kᵀ/√d)·v for query i over keys 0..i; q, k, v per position [d]. */
function causalAttention(q: Float64Array[], k: Float64Array[], v: Float64Array[], i: number): Float64Array {
  const d = q[i]!.length;
  const scores = Array.from({ length: i + 1 }, (_, j) => q[i]!.reduce((s, x, c) => s + x * k[j]![c]!, 0) / Math.sqrt(d));
  const max = Math.max(...scores);
  const e = scores.map((s) => Math.exp(s - max));
  const sum = e.reduce((a, b) => a + b, 0);
  const out = new Float64Array(d);
  e.forEach((w, j) => { for (let c = 0; c < d; c++) out[c]! += (w / sum) * v[j]![c]!; });
  return out;
}

export function gpt2ReferenceLogits(c: Gpt2Config, w: HostWeights, tokens: readonly number[]): Float64Array[] {
  const C = c.hidden, d = C / c.heads, wte = rowsOf(w, 'transformer.wte.weight'), wpe = rowsOf(w, 'transformer.wpe.weight');
  let xs = tokens.map((t, p) => add(wte[t]!, wpe[p]!));
  for (let l = 0; l < c.layers; l++) {
    const h = `transformer.h.${l}`, v = (n: string) => vectorOf(w, `${h}.${n}`), m = (n: string) => rowsOf(w, `${h}.${n}`);
    const qkv = xs.map((x) => add(matIn(layerNorm(x, v('ln_1.weight'), v('ln_1.bias'), c.layerNormEps), m('attn.c_attn.weight')), v('attn.c_attn.bias')));
    const attn = xs.map((_, i) => {
      const out = new Float64Array(C);
      for (let hd = 0; hd < c.heads; hd++) {
        const part = (which: number) => qkv.map((r) => r.subarray(which * C + hd * d, which * C + (hd + 1) * d));
        out.set(causalAttention(part(0), part(1), part(2), i), hd * d);
      }
      return out;
    });
    xs = xs.map((x, i) => add(add(x, matIn(attn[i]!, m('attn.c_proj.weight'))), v('attn.c_proj.bias')));
    xs = xs.map((x) => {
      const hidden = add(matIn(layerNorm(x, v('ln_2.weight'), v('ln_2.bias'), c.layerNormEps), m('mlp.c_fc.weight')), v('mlp.c_fc.bias')).map(geluTanh);
      return add(add(x, matIn(hidden, m('mlp.c_proj.weight'))), v('mlp.c_proj.bias'));
    });
  }
  const head = c.tieWordEmbeddings ? wte : rowsOf(w, 'lm_head.weight');
  return xs.map((x) => matOut(layerNorm(x, vectorOf(w, 'transformer.ln_f.weight'), vectorOf(w, 'transformer.ln_f.bias'), c.layerNormEps), head));
}

/** HF's default RoPE (rotate_half), frequencies 1/θ^(2i/d); invFreq overrides them (scaled variants). */
/**
 * Phi-3's fused qkv_proj and gate_up_proj split into Llama's q/k/v and gate/up (HF's Phi3Attention and
 * Phi3MLP split them this way: q, k, v rows in order; gate_up's first half is the gate).
 */
function unfusedPhi3(c: LlamaConfig, w: HostWeights): HostWeights {
  const out: HostWeights = new Map(w);
  const rows = (name: string, from: number, count: number) => {
    const t = w.get(name)!, cols = t.shape[1]!;
    return { shape: [count, cols], data: t.data.slice(from * cols, (from + count) * cols) };
  };
  const q = c.heads * c.headDim, kv = c.kvHeads * c.headDim;
  for (let l = 0; l < c.layers; l++) {
    const a = `model.layers.${l}.self_attn`, m = `model.layers.${l}.mlp`;
    out.set(`${a}.q_proj.weight`, rows(`${a}.qkv_proj.weight`, 0, q));
    out.set(`${a}.k_proj.weight`, rows(`${a}.qkv_proj.weight`, q, kv));
    out.set(`${a}.v_proj.weight`, rows(`${a}.qkv_proj.weight`, q + kv, kv));
    out.set(`${m}.gate_proj.weight`, rows(`${m}.gate_up_proj.weight`, 0, c.ffn));
    out.set(`${m}.up_proj.weight`, rows(`${m}.gate_up_proj.weight`, c.ffn, c.ffn));
  }
  return out;
}

export function llamaReferenceLogits(c: LlamaConfig, w: HostWeights, tokens: readonly number[], invFreq?: ArrayLike<number>, ropeScale = 1): Float64Array[] {
  if (c.variant === 'phi3') w = unfusedPhi3(c, w);
  const D = c.headDim, half = D / 2, group = c.heads / c.kvHeads, embed = rowsOf(w, 'model.embed_tokens.weight');
  const freqs = Array.from({ length: half }, (_, i) => (invFreq ? invFreq[i]! : 1 / c.ropeTheta ** ((2 * i) / D)));
  const rotate = (x: Float64Array, p: number) => {
    const out = new Float64Array(D);
    for (let i = 0; i < half; i++) {
      const theta = p * freqs[i]!, cos = Math.cos(theta) * ropeScale, sin = Math.sin(theta) * ropeScale;
      out[i] = x[i]! * cos - x[i + half]! * sin;
      out[i + half] = x[i + half]! * cos + x[i]! * sin;
    }
    return out;
  };
  let xs = tokens.map((t) => Float64Array.from(embed[t]!));
  for (let l = 0; l < c.layers; l++) {
    const p = `model.layers.${l}`, v = (n: string) => vectorOf(w, `${p}.${n}`), m = (n: string) => rowsOf(w, `${p}.${n}`);
    // Qwen2 (qkvBias): biases on q, k and v only.
    const bias = (n: string, size: number) => (c.attentionBias || (c.qkvBias && !n.startsWith('self_attn.o_proj')) ? v(n) : new Float64Array(size));
    const hs = xs.map((x) => rmsNorm(x, v('input_layernorm.weight'), c.rmsNormEps));
    const q = hs.map((h) => add(matOut(h, m('self_attn.q_proj.weight')), bias('self_attn.q_proj.bias', c.heads * D)));
    const k = hs.map((h) => add(matOut(h, m('self_attn.k_proj.weight')), bias('self_attn.k_proj.bias', c.kvHeads * D)));
    const vv = hs.map((h) => add(matOut(h, m('self_attn.v_proj.weight')), bias('self_attn.v_proj.bias', c.kvHeads * D)));
    // Qwen3 (qkNorm): an RMS norm over each query and key head (q_norm / k_norm) before RoPE.
    const headNorm = (x: Float64Array, gamma: Float64Array) => (c.qkNorm ? rmsNorm(x, gamma, c.rmsNormEps) : x);
    const head = (rows: Float64Array[], hd: number, rope: boolean, gamma?: Float64Array) => rows.map((r, pos) => {
      const x = gamma ? headNorm(r.subarray(hd * D, (hd + 1) * D), gamma) : r.subarray(hd * D, (hd + 1) * D);
      return rope ? rotate(x, pos) : x;
    });
    const qGamma = c.qkNorm ? v('self_attn.q_norm.weight') : undefined, kGamma = c.qkNorm ? v('self_attn.k_norm.weight') : undefined;
    const attn = xs.map((_, i) => {
      const out = new Float64Array(c.heads * D);
      for (let hd = 0; hd < c.heads; hd++) {
        const g = Math.floor(hd / group);
        out.set(causalAttention(head(q, hd, true, qGamma), head(k, g, true, kGamma), head(vv, g, false), i), hd * D);
      }
      return out;
    });
    xs = xs.map((x, i) => add(add(x, matOut(attn[i]!, m('self_attn.o_proj.weight'))), bias('self_attn.o_proj.bias', c.hidden)));
    xs = xs.map((x) => {
      const h = rmsNorm(x, v('post_attention_layernorm.weight'), c.rmsNormEps);
      const mb = (n: string, size: number) => (c.mlpBias ? v(n) : new Float64Array(size));
      const gate = add(matOut(h, m('mlp.gate_proj.weight')), mb('mlp.gate_proj.bias', c.ffn)).map(silu);
      const up = add(matOut(h, m('mlp.up_proj.weight')), mb('mlp.up_proj.bias', c.ffn));
      return add(add(x, matOut(gate.map((g, i) => g * up[i]!), m('mlp.down_proj.weight'))), mb('mlp.down_proj.bias', c.hidden));
    });
  }
  const headW = c.tieWordEmbeddings ? embed : rowsOf(w, 'lm_head.weight');
  return xs.map((x) => matOut(rmsNorm(x, vectorOf(w, 'model.norm.weight'), c.rmsNormEps), headW));
}
