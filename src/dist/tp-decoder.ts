// Megatron tensor parallelism of the inference decoder (infer/architecture.ts) over w ranks: every
// matrix is stored [out, in], activations [rows, H] are replicated, and each rank holds
//
//   QKV projection   out-rows of its heads: Hq/w query heads, Hkv/w key and value heads (Llama's q, k, v
//                    each split; GPT-2's fused c_attn split within each of its 3 sections), bias likewise
//   attention out    in-columns of its heads [H, Hq·d/w]; the bias [H] replicated
//   MLP up           out-rows: GPT-2's c_fc [F/w, H]; Llama's gate and up [F/w, H] each, still packed
//                    [2F/w, H] so one GEMM and gatedActivation serve the rank's columns; bias likewise
//   MLP down         in-columns [H, F/w]; the bias [H] replicated
//   everything else  (embeddings, LM head, norms) replicated
//
// So the forward is the single-GPU one on local sizes (heads/w, kvHeads/w, ffn/w) plus one all-reduce
// after the attention output GEMM and one after the down GEMM (the partial products Σ_r a_r·W_rᵀ); the
// replicated biases are added once, after the sum, by residualNorm. The KV cache of a rank holds its
// Hkv/w heads. Every rank computes the full logits with the replicated LM head: the inputs are identical
// on every rank (an all-reduce hands every rank the same bits), so with the same seeds every rank
// samples the same tokens and the host loops stay in step.
//
// A weight's shard is expressed on its stored [out, in] matrix; the checkpoint holds GPT-2's Conv1D
// matrices transposed ([in, out]), so reading a shard from a file maps it onto the file's layout
// (shardFileRanges) and only the shard's bytes are read.

import { ArgumentError } from '../errors.js';
import type { DecoderArchitecture, WeightSpec } from '../infer/architecture.js';
import type { Communicator } from './communicator.js';

/** How one stored weight is split: whole on every rank, by output rows (in `sections` equal blocks, each split), or by input columns. */
export type DecoderWeightSplit = { readonly kind: 'replicated' } | { readonly kind: 'out'; readonly sections: number } | { readonly kind: 'in' };

/** A model's place in a tensor-parallel group: the communicator and the whole model's architecture. */
export interface DecoderTensorParallel {
  readonly comm: Communicator;
  /** The unsplit architecture (checkpoint shapes, the random stream's order). */
  readonly full: DecoderArchitecture;
  /** Each weight's split, by name. */
  readonly splits: ReadonlyMap<string, DecoderWeightSplit>;
}

const REPLICATED: DecoderWeightSplit = { kind: 'replicated' };

/** The split of every weight of `arch`, by name (replicated unless a layer's projection names it). */
export function decoderWeightSplits(arch: DecoderArchitecture): Map<string, DecoderWeightSplit> {
  const splits = new Map<string, DecoderWeightSplit>(arch.weights.map((w) => [w.name, REPLICATED]));
  // One fused QKV tensor (GPT-2's c_attn, Phi-3's qkv_proj) holds q, k and v blocks; Llama's are three
  // tensors. One fused gate/up tensor (Phi-3's gate_up_proj) holds two blocks.
  const out = (names: readonly string[] | undefined, fusedSections: number) => {
    for (const name of names ?? []) splits.set(name, { kind: 'out', sections: names!.length === 1 ? fusedSections : 1 });
  };
  for (const layer of arch.layerNames) {
    out(layer.qkv, 3);
    out(layer.qkvBias, 3);
    out(layer.up, arch.gatedMlp ? 2 : 1);
    out(layer.upBias, arch.gatedMlp ? 2 : 1);
    splits.set(layer.out, { kind: 'in' });
    splits.set(layer.down, { kind: 'in' });
  }
  return splits;
}

/** Refuses a world size that does not divide the heads, the key/value heads and the MLP width. */
export function checkDecoderTensorParallel(arch: DecoderArchitecture, worldSize: number): void {
  if (!Number.isInteger(worldSize) || worldSize < 1) throw new ArgumentError(`tensor parallel: world size must be a positive integer, got ${worldSize}`);
  if (arch.heads % worldSize !== 0 || arch.kvHeads % worldSize !== 0) {
    throw new ArgumentError(`tensor parallel: the ${arch.family} model's ${arch.heads} query heads and ${arch.kvHeads} key/value heads cannot be split over ${worldSize} ranks (the world size must divide both)`);
  }
  if (arch.ffn % worldSize !== 0) throw new ArgumentError(`tensor parallel: the ${arch.family} model's MLP width ${arch.ffn} cannot be split over ${worldSize} ranks`);
  // A fused QKV tensor is split in three equal sections: with grouped-query attention its k and v are narrower.
  if (worldSize > 1 && arch.layerNames[0]?.qkv.length === 1 && arch.kvHeads !== arch.heads) {
    throw new ArgumentError(`tensor parallel: the ${arch.family} model stores q, k and v as one tensor with ${arch.kvHeads} key/value heads for ${arch.heads} query heads; splitting it is not supported`);
  }
}

/** The stored [out, in] shape of a weight (a vector is [out, 1]). */
function outIn(spec: WeightSpec): [number, number] {
  return [spec.shape[0]!, spec.shape.length > 1 ? spec.shape[1]! : 1];
}

/** A rank's shard of a stored [out, in] weight: its output-row ranges and input-column ranges. */
function shardRanges(spec: WeightSpec, split: DecoderWeightSplit, rank: number, worldSize: number): { outs: [number, number][]; ins: [number, number][] } {
  const [O, I] = outIn(spec);
  if (split.kind === 'replicated') return { outs: [[0, O]], ins: [[0, I]] };
  if (split.kind === 'in') {
    const width = I / worldSize;
    return { outs: [[0, O]], ins: [[rank * width, (rank + 1) * width]] };
  }
  const section = O / split.sections, part = section / worldSize;
  return { outs: Array.from({ length: split.sections }, (_, s): [number, number] => [s * section + rank * part, s * section + (rank + 1) * part]), ins: [[0, I]] };
}

function shardSpec(spec: WeightSpec, split: DecoderWeightSplit, worldSize: number): WeightSpec {
  if (split.kind === 'replicated') return spec;
  const [O, I] = outIn(spec);
  const [o, i] = split.kind === 'out' ? [O / worldSize, I] : [O, I / worldSize];
  const shape = spec.shape.length === 1 ? [o] : [o, i];
  // Split weights are never padded (only the vocabulary tables are), so the file shape differs only by a transpose.
  return { ...spec, shape, ...(spec.transposed ? { fileShape: [i, o] } : {}) };
}

/** The architecture one rank stores: local heads, key/value heads and MLP width, every split weight at its shard shape. */
export function shardDecoderArchitecture(arch: DecoderArchitecture, worldSize: number): DecoderArchitecture {
  checkDecoderTensorParallel(arch, worldSize);
  const splits = decoderWeightSplits(arch);
  for (const w of arch.weights) {
    const split = splits.get(w.name)!;
    const [O, I] = outIn(w);
    const parts = split.kind === 'out' ? split.sections * worldSize : worldSize;
    if (split.kind !== 'replicated' && (split.kind === 'out' ? O : I) % parts !== 0) {
      throw new ArgumentError(`tensor parallel: weight '${w.name}' [${w.shape.join(', ')}] does not split into ${parts} equal parts`);
    }
  }
  return {
    ...arch, heads: arch.heads / worldSize, kvHeads: arch.kvHeads / worldSize, ffn: arch.ffn / worldSize,
    weights: arch.weights.map((w) => shardSpec(w, splits.get(w.name)!, worldSize)),
  };
}

/** Appends [start, end) to `ranges`, merged with the last range when they touch. */
function pushRange(ranges: [number, number][], start: number, end: number): void {
  const last = ranges[ranges.length - 1];
  if (last && last[1] === start) last[1] = end;
  else ranges.push([start, end]);
}

/**
 * Element ranges of the checkpoint tensor (row-major, in the file's layout: [in, out] when `spec` is
 * stored transposed) that make up rank `rank`'s shard, in the order of the shard's own file layout:
 * concatenated, they are the shard as loadWeight takes it.
 */
export function shardFileRanges(spec: WeightSpec, split: DecoderWeightSplit, rank: number, worldSize: number): [number, number][] {
  const [O, I] = outIn(spec);
  const { outs, ins } = shardRanges(spec, split, rank, worldSize);
  const ranges: [number, number][] = [];
  // The file's rows and columns: [O, I], or [I, O] for a transposed matrix.
  const [rowRanges, colRanges, cols] = spec.transposed ? [ins, outs, O] : [outs, ins, I];
  for (const [r0, r1] of rowRanges) {
    for (let r = r0; r < r1; r++) for (const [c0, c1] of colRanges) pushRange(ranges, r * cols + c0, r * cols + c1);
  }
  return ranges;
}

/**
 * The device gather that cuts rank `rank`'s shard out of the whole stored matrix: viewed as
 * [rows, width], the rows `picks` (in order) are the shard [picks.length, width] row-major.
 */
export function shardRowPicks(spec: WeightSpec, split: DecoderWeightSplit, rank: number, worldSize: number): { rows: number; width: number; picks: Int32Array } {
  const [O, I] = outIn(spec);
  if (split.kind === 'in') {
    // [O, I] as [O·w, I/w]: row o's slice of rank r is row o·w + r.
    return { rows: O * worldSize, width: I / worldSize, picks: Int32Array.from({ length: O }, (_, o) => o * worldSize + rank) };
  }
  const picks: number[] = [];
  for (const [o0, o1] of shardRanges(spec, split, rank, worldSize).outs) for (let o = o0; o < o1; o++) picks.push(o);
  return { rows: O, width: I, picks: Int32Array.from(picks) };
}
