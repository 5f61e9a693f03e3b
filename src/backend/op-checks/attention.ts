// Argument checks of the fused attention op pair (flashAttentionForward/Backward), shared by the backends.
//   q, out, dOut, dq (B, Hq, Lq, d);  k, v, dk, dv (B, Hkv, Lk, d);  lse f32 (B, Hq, Lq);
//   keyLengths i32 (B), optional. Hq must be a multiple of Hkv (grouped-query attention).
// Packed sequences (cuSeqlensQ given): q, out, dOut, dq (Tq, Hq, d); k, v, dk, dv (Tk, Hkv, d); lse f32
//   (Hq, Tq); cuSeqlensQ, cuSeqlensK i32 (B+1); maxSeqlenQ/K integers; no keyLengths. The sizes returned
//   are then B sequences with Lq, Lk = maxSeqlenQ, maxSeqlenK, and `packed` holds the layout (the CPU
//   also checks the offsets' values; the GPU cannot read them without a synchronisation).
// dropout (optional): p in [0, 1), seed and offset u64 bigints, offsetBase an i32 [2] device tensor;
//   returned as undefined when p = 0.
// Paged keys and values (forward, paged given): q, out (B, Hq, Lq, d); k, v (numBlocks, Hkv, blockSize, d);
//   paged.blockTable i32 (B, maxBlocks); Lk = paged.keys in [1, maxBlocks·blockSize]; no packed sequences,
//   no dropout. `paged` is returned with the pool's sizes (each used table entry in [0, numBlocks) is
//   the CPU's own check).
// Packed queries over paged keys (paged.seqKeys given): q, out (Tq, Hq, d); lse (Hq, Tq); cuSeqlensQ i32
//   (B+1), maxSeqlenQ; paged.seqKeys, paged.seqRows i32 (B); the table (tableRows, maxBlocks) has any
//   number of rows; no cuSeqlensK, maxSeqlenK, keyLengths, paged.keys or dropout. Returned as B sequences,
//   Lq = maxSeqlenQ, Lk = maxBlocks·blockSize, with `paged.packedQ` (the CPU checks the values).

import type { Tensor } from '../../tensor.js';
import type { DropoutArgs, FlashAttentionBackwardArgs, FlashAttentionForwardArgs, PackedSequences } from '../backend.js';
import type { OpCheck } from '../validate.js';

const Q_SHAPE = ['B', 'Hq', 'Lq', 'd'] as const;
const KV_SHAPE = ['B', 'Hkv', 'Lk', 'd'] as const;
const LSE_SHAPE = ['B', 'Hq', 'Lq'] as const;
const PACKED_Q = ['Tq', 'Hq', 'd'] as const;
const PACKED_KV = ['Tk', 'Hkv', 'd'] as const;
const PACKED_LSE = ['Hq', 'Tq'] as const;

interface Common extends PackedSequences { scale?: number; causal?: boolean; keyLengths?: Tensor; dropout?: DropoutArgs }

/** The packed layout: the cuSeqlens tensors, the total rows and the max lengths. */
export interface PackedLayout<T extends Tensor = Tensor> {
  cuSeqlensQ: T;
  cuSeqlensK: T;
  totalQ: number;
  totalK: number;
  maxSeqlenQ: number;
  maxSeqlenK: number;
}

/** Whether the call uses the packed layout (any of its four arguments given; all four are then required). */
function isPacked(check: OpCheck, args: Common): boolean {
  const given = [args.cuSeqlensQ, args.cuSeqlensK, args.maxSeqlenQ, args.maxSeqlenK].filter((x) => x !== undefined).length;
  if (given > 0 && given < 4) check.fail('packed sequences need all of cuSeqlensQ, cuSeqlensK, maxSeqlenQ and maxSeqlenK');
  if (given === 4) check.absent('keyLengths', args.keyLengths, 'with packed sequences (each sequence has its own length)');
  return given === 4;
}

/** Shapes of the four [.., d] roles (q-like and kv-like tensors) and lse, dense or packed. */
function shapes(packed: boolean) {
  return packed ? { q: PACKED_Q, kv: PACKED_KV, lse: PACKED_LSE } : { q: Q_SHAPE, kv: KV_SHAPE, lse: LSE_SHAPE };
}

/** The sizes, the GQA group, and the options with defaults applied (scale = 1/sqrt(d)). */
function common<T extends Tensor>(check: OpCheck<T>, args: Common, packed: boolean, pagedKeys?: number, pagedB?: number, pagedLq?: number) {
  let B: number, Lq: number, Lk: number, layout: PackedLayout<T> | undefined;
  const [Hq, Hkv, d] = ['Hq', 'Hkv', 'd'].map((n) => check.size(n)) as [number, number, number];
  if (packed) {
    const cuSeqlensQ = check.tensor('cuSeqlensQ', args.cuSeqlensQ);
    const cuSeqlensK = check.tensor('cuSeqlensK', args.cuSeqlensK);
    check.dtype('cuSeqlensQ', cuSeqlensQ, ['i32']);
    check.dtype('cuSeqlensK', cuSeqlensK, ['i32']);
    check.shape('cuSeqlensQ', cuSeqlensQ, ['B1']);
    check.shape('cuSeqlensK', cuSeqlensK, ['B1']);
    const B1 = check.size('B1');
    if (B1 < 1) check.fail(`'cuSeqlensQ' needs B + 1 >= 1 entries, got ${B1}`);
    const maxSeqlenQ = args.maxSeqlenQ!, maxSeqlenK = args.maxSeqlenK!;
    check.integer('maxSeqlenQ', maxSeqlenQ);
    check.integer('maxSeqlenK', maxSeqlenK);
    const totalQ = check.size('Tq'), totalK = check.size('Tk');
    if (totalQ >= 2 ** 31 || totalK >= 2 ** 31) check.fail(`packed rows must be fewer than 2^31, got ${totalQ} queries and ${totalK} keys`);
    [B, Lq, Lk] = [B1 - 1, maxSeqlenQ, maxSeqlenK];
    layout = { cuSeqlensQ, cuSeqlensK, totalQ, totalK, maxSeqlenQ, maxSeqlenK };
  } else if (pagedKeys !== undefined) {
    [B, Lq, Lk] = [pagedB ?? check.size('B'), pagedLq ?? check.size('Lq'), pagedKeys];
  } else {
    [B, Lq, Lk] = ['B', 'Lq', 'Lk'].map((n) => check.size(n)) as [number, number, number];
  }
  if (d < 1) check.fail(`the head dimension d must be at least 1, got ${d}`);
  if (Hkv < 1 || Hq % Hkv !== 0) check.fail(`the query heads Hq = ${Hq} must be a positive multiple of the kv heads Hkv = ${Hkv}`);
  const keyLengths = check.optional('keyLengths', args.keyLengths);
  if (keyLengths) {
    check.dtype('keyLengths', keyLengths, ['i32']);
    check.shape('keyLengths', keyLengths, ['B']);
  }
  const scale = args.scale ?? 1 / Math.sqrt(d);
  check.finite('scale', scale);
  const causal = args.causal ?? false;
  if (args.dropout) check.dropout(args.dropout);
  const dropout = args.dropout && args.dropout.p > 0 ? args.dropout : undefined;
  return { B, Hq, Hkv, Lq, Lk, d, group: Hkv > 0 ? Hq / Hkv : 0, keyLengths, scale, causal, dropout, packed: layout };
}

export function checkFlashAttentionForward<T extends Tensor>(check: OpCheck<T>, args: FlashAttentionForwardArgs) {
  if (args.paged && args.paged.seqKeys !== undefined) return checkPackedPaged(check, args);
  const packed = isPacked(check, args);
  const s = shapes(packed);
  const { q, k, v, out, lse } = forwardTensors(check, args, s.q, s.lse);
  if (args.paged) {
    if (packed) check.fail('paged keys and values with packed queries take paged.seqKeys (and cuSeqlensQ, maxSeqlenQ only)');
    if (args.dropout && args.dropout.p > 0) check.fail('paged keys and values do not take dropout (inference only)');
    check.absent('paged.seqRows', args.paged.seqRows, 'with dense queries (sequence b reads table row b)');
    const { blockTable, numBlocks, blockSize, maxBlocks } = checkPool(check, args.paged.blockTable, k, v, 'B');
    const keys = args.paged.keys;
    if (keys === undefined) check.fail("paged keys and values with dense queries need 'paged.keys' (Lk)");
    check.integer('paged.keys', keys, 1);
    if (keys > maxBlocks * blockSize) check.fail(`'paged.keys' = ${keys} is more than the block table holds (${maxBlocks} blocks of ${blockSize} = ${maxBlocks * blockSize})`);
    const c = common(check, args, false, keys);
    return { q, k, v, out, lse, ...c, paged: { blockTable, keys, numBlocks, blockSize, maxBlocks } as CheckedPaged<T> };
  }
  check.shape('k', k, s.kv);
  check.shape('v', v, s.kv);
  return { q, k, v, out, lse, ...common(check, args, packed), paged: undefined as CheckedPaged<T> | undefined };
}

/** The forward's tensors: q, k, v, out of one float dtype, lse f32; q, out and lse of the given shapes. */
function forwardTensors<T extends Tensor>(check: OpCheck<T>, args: FlashAttentionForwardArgs, qShape: readonly string[], lseShape: readonly string[]) {
  const q = check.tensor('q', args.q);
  const k = check.tensor('k', args.k);
  const v = check.tensor('v', args.v);
  const out = check.tensor('out', args.out);
  const lse = check.tensor('lse', args.lse);
  check.float('q', q);
  check.sameDType(['q', 'k', 'v', 'out'], [q, k, v, out]);
  check.dtype('lse', lse, ['f32']);
  check.shape('q', q, qShape);
  check.shape('out', out, qShape);
  check.shape('lse', lse, lseShape);
  return { q, k, v, out, lse };
}

/** The checked pool and table of a paged call; packedQ for packed queries (seqKeys, seqRows, cuSeqlensQ). */
export interface CheckedPaged<T extends Tensor = Tensor> {
  blockTable: T;
  /** Dense: Lk; packed: the most keys a sequence can have (maxBlocks·blockSize). */
  keys: number;
  numBlocks: number;
  blockSize: number;
  maxBlocks: number;
  packedQ?: { cuSeqlensQ: T; totalQ: number; maxSeqlenQ: number; seqKeys: T; seqRows: T | undefined };
}

/** The block pool k, v (numBlocks, Hkv, blockSize, d) and its table i32 (rows, maxBlocks). */
function checkPool<T extends Tensor>(check: OpCheck<T>, table: Tensor, k: T, v: T, rows: string) {
  const blockTable = check.tensor('paged.blockTable', table);
  check.dtype('paged.blockTable', blockTable, ['i32']);
  check.shape('paged.blockTable', blockTable, [rows, 'maxBlocks']);
  check.shape('k', k, ['numBlocks', 'Hkv', 'blockSize', 'd']);
  check.shape('v', v, ['numBlocks', 'Hkv', 'blockSize', 'd']);
  return { blockTable, numBlocks: check.size('numBlocks'), blockSize: check.size('blockSize'), maxBlocks: check.size('maxBlocks') };
}

/** Packed queries over paged keys (backend.ts): q, out (Tq, Hq, d); lse (Hq, Tq); cuSeqlensQ, seqKeys, seqRows per sequence. */
function checkPackedPaged<T extends Tensor>(check: OpCheck<T>, args: FlashAttentionForwardArgs) {
  const paged = args.paged!;
  if (args.cuSeqlensQ === undefined || args.maxSeqlenQ === undefined) check.fail("'paged.seqKeys' (packed queries) needs cuSeqlensQ and maxSeqlenQ");
  check.absent('cuSeqlensK', args.cuSeqlensK, "with paged keys (each sequence's keys are paged.seqKeys)");
  check.absent('maxSeqlenK', args.maxSeqlenK, 'with paged keys');
  check.absent('keyLengths', args.keyLengths, 'with packed queries');
  check.absent('paged.keys', paged.keys, "with packed queries (each sequence's keys are paged.seqKeys)");
  if (args.dropout && args.dropout.p > 0) check.fail('paged keys and values do not take dropout (inference only)');
  const { q, k, v, out, lse } = forwardTensors(check, args, PACKED_Q, PACKED_LSE);
  const pool = checkPool(check, paged.blockTable, k, v, 'tableRows');
  const cuSeqlensQ = check.tensor('cuSeqlensQ', args.cuSeqlensQ);
  check.dtype('cuSeqlensQ', cuSeqlensQ, ['i32']);
  check.shape('cuSeqlensQ', cuSeqlensQ, ['B1']);
  const B1 = check.size('B1');
  if (B1 < 1) check.fail(`'cuSeqlensQ' needs B + 1 >= 1 entries, got ${B1}`);
  const seqKeys = check.tensor('paged.seqKeys', paged.seqKeys);
  check.dtype('paged.seqKeys', seqKeys, ['i32']);
  check.shape('paged.seqKeys', seqKeys, [B1 - 1]);
  const seqRows = check.optional('paged.seqRows', paged.seqRows);
  if (seqRows) {
    check.dtype('paged.seqRows', seqRows, ['i32']);
    check.shape('paged.seqRows', seqRows, [B1 - 1]);
  }
  const maxSeqlenQ = args.maxSeqlenQ;
  check.integer('maxSeqlenQ', maxSeqlenQ);
  const totalQ = check.size('Tq');
  if (totalQ >= 2 ** 31) check.fail(`packed rows must be fewer than 2^31, got ${totalQ} queries`);
  const maxKeys = pool.maxBlocks * pool.blockSize;
  const c = common(check, args, false, maxKeys, B1 - 1, maxSeqlenQ);
  const checked: CheckedPaged<T> = { ...pool, keys: maxKeys, packedQ: { cuSeqlensQ, totalQ, maxSeqlenQ, seqKeys, seqRows } };
  return { q, k, v, out, lse, ...c, paged: checked };
}

export function checkFlashAttentionBackward<T extends Tensor>(check: OpCheck<T>, args: FlashAttentionBackwardArgs) {
  const packed = isPacked(check, args);
  const s = shapes(packed);
  const q = check.tensor('q', args.q);
  const k = check.tensor('k', args.k);
  const v = check.tensor('v', args.v);
  const out = check.tensor('out', args.out);
  const dOut = check.tensor('dOut', args.dOut);
  const lse = check.tensor('lse', args.lse);
  const dq = check.tensor('dq', args.dq);
  const dk = check.tensor('dk', args.dk);
  const dv = check.tensor('dv', args.dv);
  check.float('q', q);
  check.sameDType(['q', 'k', 'v', 'out', 'dOut', 'dq', 'dk', 'dv'], [q, k, v, out, dOut, dq, dk, dv]);
  check.dtype('lse', lse, ['f32']);
  check.shape('q', q, s.q);
  check.shape('k', k, s.kv);
  check.shape('v', v, s.kv);
  check.shape('out', out, s.q);
  check.shape('dOut', dOut, s.q);
  check.shape('lse', lse, s.lse);
  check.shape('dq', dq, s.q);
  check.shape('dk', dk, s.kv);
  check.shape('dv', dv, s.kv);
  return { q, k, v, out, dOut, lse, dq, dk, dv, ...common(check, args, packed) };
}
