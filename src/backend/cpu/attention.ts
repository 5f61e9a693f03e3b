// Fused attention (FlashAttention's op pair), written as the plain materialised computation: for each
// query row the scores against every visible key, their softmax, and the weighted sum of values — in
// float64, one row at a time. This is the oracle the tiled CUDA kernels are tested against.
//
// Shapes: q, out, dOut, dq (B, Hq, Lq, d); k, v, dk, dv (B, Hkv, Lk, d); lse f32 (B, Hq, Lq).
// Query head h reads kv head floor(h / (Hq/Hkv)). Key j is visible to query i of batch b when
// j < n_i = min(Lk, keyLengths[b], causal ? i + Lk − Lq + 1 : Lk); a row with n_i ≤ 0 gets out = 0,
// lse = −∞, and contributes nothing to the backward.
// Packed sequences (cuSeqlensQ/K given): q, out, dOut, dq (totalQ, Hq, d); k, v, dk, dv (totalK, Hkv,
// d); lse (Hq, totalQ); sequence b is rows [cuSeqlensQ[b], cuSeqlensQ[b+1]) and [cuSeqlensK[b],
// cuSeqlensK[b+1]), with Lq, Lk its own lengths in the rule above and no keyLengths.
// Dropout: element (row, j) with row the lse index of the query (b·Hq·Lq + h·Lq + i, or packed
// h·totalQ + cuSeqlensQ[b] + i) has index e = row·S + j (S = Lk, or packed maxSeqlenK rounded up to 8)
// and is kept exactly as rng.ts's dropoutMask keeps element e: the same mask the dropout op draws over
// the materialised [B, Hq, Lq, Lk] probabilities.
// Paged keys and values (forward): k, v (numBlocks, Hkv, blockSize, d); key j of sequence b is row j mod
// blockSize of block blockTable[b, ⌊j / blockSize⌋]; otherwise the dense layout with Lk = paged.keys.
// Packed queries over paged keys (paged.seqKeys): q, out (totalQ, Hq, d), lse (Hq, totalQ); sequence b's
// queries are rows [cuSeqlensQ[b], cuSeqlensQ[b+1]), its keys Lk = seqKeys[b] come through table row
// seqRows[b] (default b).

import type { DropoutArgs, FlashAttentionBackwardArgs, FlashAttentionForwardArgs } from '../backend.js';
import type { CheckedPaged, PackedLayout } from '../op-checks/attention.js';
import { checkFlashAttentionBackward, checkFlashAttentionForward } from '../op-checks/index.js';
import { DROPOUT_ELEMENTS_PER_COUNTER, dropoutThreshold, dropoutUniform16, philox4x32 } from '../rng.js';
import { ArgumentError } from '../../errors.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import type { CpuTensor } from './tensor.js';
import { dropoutOffsetAtRun, floatsOf, int32sOf, storeFloats } from './tensor.js';

/** One sequence: its query and key counts, its first packed rows (0 dense), and its valid keys. */
interface Sequence { Lq: number; Lk: number; qStart: number; kStart: number; validKeys: number }

/** Where every (sequence, head, row) lives, for the dense and the packed layout alike. */
interface Layout {
  readonly B: number; readonly Hq: number; readonly Hkv: number; readonly d: number; readonly group: number;
  readonly causal: boolean;
  /** Dropout element row stride S. */
  readonly dropStride: number;
  sequence(b: number): Sequence;
  /** Element offset of row i of query head h (q, out, dOut, dq). */
  qRow(b: number, s: Sequence, h: number, i: number): number;
  /** Element offset of row j of kv head g (k, v, dk, dv). */
  kvRow(b: number, s: Sequence, g: number, j: number): number;
  /** lse index of query row i of head h; also the dropout element row. */
  lseRow(b: number, s: Sequence, h: number, i: number): number;
}

function visibleKeys(causal: boolean, s: Sequence, i: number): number {
  return Math.max(0, Math.min(s.Lk, s.validKeys, causal ? i + (s.Lk - s.Lq) + 1 : s.Lk));
}

function denseLayout(g: { B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; group: number; causal: boolean }, lengths: Int32Array | undefined): Layout {
  const { B, Hq, Hkv, Lq, Lk, d, group, causal } = g;
  return {
    B, Hq, Hkv, d, group, causal, dropStride: Lk,
    sequence: (b) => ({ Lq, Lk, qStart: 0, kStart: 0, validKeys: lengths ? lengths[b]! : Lk }),
    qRow: (b, _s, h, i) => ((b * Hq + h) * Lq + i) * d,
    kvRow: (b, _s, kh, j) => ((b * Hkv + kh) * Lk + j) * d,
    lseRow: (b, _s, h, i) => (b * Hq + h) * Lq + i,
  };
}

function packedLayout(
  op: string, g: { B: number; Hq: number; Hkv: number; d: number; group: number; causal: boolean; totalQ: number; totalK: number; maxSeqlenQ: number; maxSeqlenK: number },
  cuQ: Int32Array, cuK: Int32Array,
): Layout {
  const { B, Hq, Hkv, d, group, causal, totalQ, totalK } = g;
  for (const [name, cu, total, max] of [['cuSeqlensQ', cuQ, totalQ, g.maxSeqlenQ], ['cuSeqlensK', cuK, totalK, g.maxSeqlenK]] as const) {
    if (cu[0] !== 0 || cu[B] !== total) throw new ArgumentError(`${op}: '${name}' must run from 0 to ${total} (the packed rows), got ${cu[0]} .. ${cu[B]}`);
    for (let b = 0; b < B; b++) {
      const len = cu[b + 1]! - cu[b]!;
      if (len < 0 || len > max) throw new ArgumentError(`${op}: sequence ${b} has length ${len} in '${name}'; lengths must be in [0, ${max}] (the max sequence length given)`);
    }
  }
  return {
    B, Hq, Hkv, d, group, causal, dropStride: Math.ceil(g.maxSeqlenK / 8) * 8,
    sequence: (b) => {
      const Lk = cuK[b + 1]! - cuK[b]!;
      return { Lq: cuQ[b + 1]! - cuQ[b]!, Lk, qStart: cuQ[b]!, kStart: cuK[b]!, validKeys: Lk };
    },
    qRow: (_b, s, h, i) => ((s.qStart + i) * Hq + h) * d,
    kvRow: (_b, s, kh, j) => ((s.kStart + j) * Hkv + kh) * d,
    lseRow: (_b, s, h, i) => h * totalQ + s.qStart + i,
  };
}

/** keep(e) for the dropout element index e, as rng.ts's dropoutMask draws it (one Philox call per 8). */
function keepFlags(dropout: DropoutArgs | undefined, offset: bigint): ((e: number) => boolean) | undefined {
  if (!dropout) return undefined;
  const threshold = dropoutThreshold(dropout.p);
  const k0 = Number(dropout.seed & 0xffffffffn), k1 = Number((dropout.seed >> 32n) & 0xffffffffn);
  let group = -1, words: number[] = [];
  return (e) => {
    const g = Math.floor(e / DROPOUT_ELEMENTS_PER_COUNTER);
    if (g !== group) {
      const counter = offset + BigInt(g);
      words = philox4x32(Number(counter & 0xffffffffn), Number((counter >> 32n) & 0xffffffffn), 0, 0, k0, k1);
      group = g;
    }
    return dropoutUniform16(words, e % DROPOUT_ELEMENTS_PER_COUNTER) >= threshold;
  };
}

interface ForwardTensors { q: CpuTensor; k: CpuTensor; v: CpuTensor; out: CpuTensor; lse: CpuTensor; scale: number; dropout: DropoutArgs | undefined }

/** out = dropout(softmax(scale·q·kᵀ + mask))·v, lse = ln Σ exp(scale·q·kᵀ) over visible keys. */
function forward(L: Layout, t: ForwardTensors, offset: bigint): void {
  const qv = floatsOf(t.q), kv = floatsOf(t.k), vv = floatsOf(t.v);
  const d = L.d, scale = t.scale;
  const keep = keepFlags(t.dropout, offset);
  const keepScale = t.dropout ? 1 / (1 - t.dropout.p) : 1;
  // Rows no sequence owns (packed paged queries past cuSeqlensQ[B]) keep what they held.
  const result = Float64Array.from(floatsOf(t.out));
  const lseResult = Float64Array.from(floatsOf(t.lse));
  for (let b = 0; b < L.B; b++) {
    const s = L.sequence(b);
    const scores = new Float64Array(s.Lk);
    for (let h = 0; h < L.Hq; h++) {
      const g = Math.floor(h / L.group);
      for (let i = 0; i < s.Lq; i++) {
        const qa = L.qRow(b, s, h, i), row = L.lseRow(b, s, h, i);
        result.fill(0, qa, qa + d);
        const n = visibleKeys(L.causal, s, i);
        if (n === 0) { lseResult[row] = -Infinity; continue; } // out row stays 0
        let max = -Infinity;
        for (let j = 0; j < n; j++) {
          const ka = L.kvRow(b, s, g, j);
          let dot = 0;
          for (let c = 0; c < d; c++) dot += qv[qa + c]! * kv[ka + c]!;
          scores[j] = scale * dot;
          max = Math.max(max, scores[j]!);
        }
        let sum = 0;
        for (let j = 0; j < n; j++) sum += (scores[j] = Math.exp(scores[j]! - max));
        lseResult[row] = max + Math.log(sum);
        for (let j = 0; j < n; j++) {
          if (keep && !keep(row * L.dropStride + j)) continue;
          const p = (scores[j]! / sum) * keepScale, va = L.kvRow(b, s, g, j);
          for (let c = 0; c < d; c++) result[qa + c]! += p * vv[va + c]!;
        }
      }
    }
  }
  storeFloats(t.out, result);
  storeFloats(t.lse, lseResult);
}

interface BackwardTensors extends ForwardTensors { dOut: CpuTensor; dq: CpuTensor; dk: CpuTensor; dv: CpuTensor }

/** dq, dk, dv of the forward, with P recomputed from q, k and lse and the dropout mask redrawn. */
function backward(L: Layout, t: BackwardTensors, offset: bigint): void {
  const qv = floatsOf(t.q), kv = floatsOf(t.k), vv = floatsOf(t.v), ov = floatsOf(t.out), gv = floatsOf(t.dOut), lv = floatsOf(t.lse);
  const d = L.d, scale = t.scale;
  const keep = keepFlags(t.dropout, offset);
  const keepScale = t.dropout ? 1 / (1 - t.dropout.p) : 1;
  const dqResult = new Float64Array(t.dq.numel), dkResult = new Float64Array(t.dk.numel), dvResult = new Float64Array(t.dv.numel);
  for (let b = 0; b < L.B; b++) {
    const s = L.sequence(b);
    const pd = new Float64Array(s.Lk), dS = new Float64Array(s.Lk);
    for (let h = 0; h < L.Hq; h++) {
      const g = Math.floor(h / L.group);
      for (let i = 0; i < s.Lq; i++) {
        const qa = L.qRow(b, s, h, i), row = L.lseRow(b, s, h, i);
        const n = visibleKeys(L.causal, s, i);
        if (n === 0) continue;
        const rowLse = lv[row]!;
        let D = 0;
        for (let c = 0; c < d; c++) D += gv[qa + c]! * ov[qa + c]!;
        for (let j = 0; j < n; j++) {
          const ka = L.kvRow(b, s, g, j);
          let dot = 0, dP = 0;
          for (let c = 0; c < d; c++) {
            dot += qv[qa + c]! * kv[ka + c]!;
            dP += gv[qa + c]! * vv[ka + c]!;
          }
          const p = Math.exp(scale * dot - rowLse);
          const kept = !keep || keep(row * L.dropStride + j);
          pd[j] = kept ? p * keepScale : 0;
          dS[j] = p * ((kept ? dP * keepScale : 0) - D);
        }
        for (let j = 0; j < n; j++) {
          const ka = L.kvRow(b, s, g, j);
          for (let c = 0; c < d; c++) {
            dqResult[qa + c]! += scale * dS[j]! * kv[ka + c]!;
            dkResult[ka + c]! += scale * dS[j]! * qv[qa + c]!;
            dvResult[ka + c]! += pd[j]! * gv[qa + c]!;
          }
        }
      }
    }
  }
  storeFloats(t.dq, dqResult);
  storeFloats(t.dk, dkResult);
  storeFloats(t.dv, dvResult);
}

/** The dropout arguments' counter offset at run time (offsetBase read then), when dropout is on. */
function offsetAtRun(dropout: DropoutArgs | undefined): () => bigint {
  return dropout ? dropoutOffsetAtRun(dropout) : () => 0n;
}

/** The layout of a checked call: packed (its offsets checked now, at run time) or dense. */
function layoutOf(op: string, c: { B: number; Hq: number; Hkv: number; Lq: number; Lk: number; d: number; group: number; causal: boolean; keyLengths: CpuTensor | undefined; packed: PackedLayout<CpuTensor> | undefined }): Layout {
  if (c.packed) return packedLayout(op, { ...c, ...c.packed }, int32sOf(c.packed.cuSeqlensQ), int32sOf(c.packed.cuSeqlensK));
  return denseLayout(c, c.keyLengths ? int32sOf(c.keyLengths) : undefined);
}

/** The dense layout with keys read through a block table (each used entry checked at run time). */
function pagedLayout(op: string, dense: Layout, Hkv: number, d: number, Lk: number, p: { blockTable: CpuTensor; numBlocks: number; blockSize: number; maxBlocks: number }): Layout {
  const table = int32sOf(p.blockTable);
  for (let b = 0; b < dense.B; b++) {
    for (let i = 0; i < Math.ceil(Lk / p.blockSize); i++) {
      const block = table[b * p.maxBlocks + i]!;
      if (block < 0 || block >= p.numBlocks) throw new ArgumentError(`${op}: 'paged.blockTable'[${b}, ${i}] = ${block} is outside the pool's [0, ${p.numBlocks}) blocks`);
    }
  }
  return {
    ...dense,
    kvRow: (b, _s, kh, j) => ((table[b * p.maxBlocks + Math.floor(j / p.blockSize)]! * Hkv + kh) * p.blockSize + (j % p.blockSize)) * d,
  };
}

/**
 * Packed queries over paged keys: sequence b's query rows from cuSeqlensQ, its seqKeys[b] keys through
 * table row seqRows[b] (offsets, counts, rows and used table entries checked at run time).
 */
function packedPagedLayout(op: string, c: { B: number; Hq: number; Hkv: number; d: number; group: number; causal: boolean }, p: CheckedPaged<CpuTensor>): Layout {
  const { B, Hq, Hkv, d } = c, q = p.packedQ!;
  const cu = int32sOf(q.cuSeqlensQ), keys = int32sOf(q.seqKeys), rows = q.seqRows ? int32sOf(q.seqRows) : undefined;
  const table = int32sOf(p.blockTable), tableRows = p.blockTable.shape[0]!, capacity = p.maxBlocks * p.blockSize;
  const seqRow = (b: number) => (rows ? rows[b]! : b);
  if (cu[0] !== 0 || cu[B]! > q.totalQ) throw new ArgumentError(`${op}: 'cuSeqlensQ' must run from 0 to at most totalQ = ${q.totalQ}, got ${cu[0]} … ${cu[B]}`);
  for (let b = 0; b < B; b++) {
    const lq = cu[b + 1]! - cu[b]!;
    if (lq < 0) throw new ArgumentError(`${op}: 'cuSeqlensQ' decreases at ${b} (${cu[b]} → ${cu[b + 1]})`);
    if (lq > q.maxSeqlenQ) throw new ArgumentError(`${op}: sequence ${b} has ${lq} queries, more than maxSeqlenQ = ${q.maxSeqlenQ}`);
    if (keys[b]! < 0 || keys[b]! > capacity) throw new ArgumentError(`${op}: 'paged.seqKeys'[${b}] = ${keys[b]} is outside [0, ${capacity}] (the table's ${p.maxBlocks} blocks of ${p.blockSize})`);
    if (lq === 0) continue;
    const row = seqRow(b);
    if (row < 0 || row >= tableRows) throw new ArgumentError(`${op}: 'paged.seqRows'[${b}] = ${row} is outside the block table's [0, ${tableRows}) rows`);
    for (let i = 0; i < Math.ceil(keys[b]! / p.blockSize); i++) {
      const block = table[row * p.maxBlocks + i]!;
      if (block < 0 || block >= p.numBlocks) throw new ArgumentError(`${op}: 'paged.blockTable'[${row}, ${i}] = ${block} is outside the pool's [0, ${p.numBlocks}) blocks`);
    }
  }
  return {
    B, Hq, Hkv, d, group: c.group, causal: c.causal, dropStride: 0,
    sequence: (b) => ({ Lq: cu[b + 1]! - cu[b]!, Lk: keys[b]!, qStart: cu[b]!, kStart: 0, validKeys: keys[b]! }),
    qRow: (_b, s, h, i) => ((s.qStart + i) * Hq + h) * d,
    kvRow: (b, _s, kh, j) => ((table[seqRow(b) * p.maxBlocks + Math.floor(j / p.blockSize)]! * Hkv + kh) * p.blockSize + (j % p.blockSize)) * d,
    lseRow: (_b, s, h, i) => h * q.totalQ + s.qStart + i,
  };
}

export function prepareFlashAttentionForward(args: FlashAttentionForwardArgs): CpuWork {
  const check = new CpuCheck('flashAttentionForward');
  const c = checkFlashAttentionForward(check, args);
  const offset = offsetAtRun(c.dropout);
  return check.work(() => {
    const op = 'flashAttentionForward';
    if (c.paged?.packedQ) return forward(packedPagedLayout(op, c, c.paged), c, 0n);
    const dense = layoutOf(op, c);
    forward(c.paged ? pagedLayout(op, dense, c.Hkv, c.d, c.Lk, c.paged) : dense, c, offset());
  });
}

export function prepareFlashAttentionBackward(args: FlashAttentionBackwardArgs): CpuWork {
  const check = new CpuCheck('flashAttentionBackward');
  const c = checkFlashAttentionBackward(check, args);
  const offset = offsetAtRun(c.dropout);
  return check.work(() => backward(layoutOf('flashAttentionBackward', c), c, offset()));
}
