// Op cases of the paged attention ops (the serving engine's block pool, backend.ts): qkvRopeAppend,
// decodeAttention and flashAttentionForward with a block table, for the GPU test suite (each runs on CUDA
// and on the CPU reference with the same random inputs, outputs poisoned first; op-cases.ts has the
// harness). Shapes are the awkward ones: grouped-query heads, blocks of 16 and 32 (and 8), contexts that
// end mid-block, tables that list the pool's blocks in a random order with unused entries −1 (a kernel
// that read one would fault or differ), an idle row (position −1), split-K decode, and prefill chunks
// whose start is not a multiple of the block size.

import type { FloatDType } from '../dtype.js';
import { FLOAT_DTYPES } from '../dtype.js';
import type { OpCase } from './op-cases.js';
import { CaseContext, floats, ints, ropeInvFreq } from './op-cases.js';
import type { Rng } from './random.js';


/** A random permutation of [0, n). */
function permutation(rng: Rng, n: number): number[] {
  const p = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rng.next() * (i + 1));
    [p[i], p[j]] = [p[j]!, p[i]!];
  }
  return p;
}

/**
 * Block tables [B, maxBlocks]: sequence b needs ⌈keys[b] / blockSize⌉ blocks (0 for keys ≤ 0), taken without
 * repetition from a random order of the pool; the entries past them are −1.
 */
export function randomBlockTables(rng: Rng, keys: readonly number[], blockSize: number, maxBlocks: number, numBlocks: number): Int32Array {
  const order = permutation(rng, numBlocks), table = new Int32Array(keys.length * maxBlocks).fill(-1);
  let next = 0;
  keys.forEach((n, b) => {
    const need = n > 0 ? Math.ceil(n / blockSize) : 0;
    if (need > maxBlocks || next + need > numBlocks) throw new RangeError(`randomBlockTables: ${n} keys need ${need} blocks; the table has ${maxBlocks} a row and the pool ${numBlocks - next} left`);
    for (let i = 0; i < need; i++) table[b * maxBlocks + i] = order[next++]!;
  });
  return table;
}

function pagedQkvRopeAppendCases(dtype: FloatDType): OpCase[] {
  // B, L (rows a sequence), Hq, Hkv, d, blockSize, maxBlocks, rope, bias
  const shapes: [number, number, number, number, number, number, number, boolean, boolean][] = [
    [5, 1, 32, 8, 64, 16, 6, true, false], [2, 21, 12, 12, 64, 32, 3, false, true], [3, 7, 8, 2, 128, 16, 4, true, true],
    [4, 1, 8, 2, 16, 8, 5, true, false],
  ];
  return shapes.map(([B, L, Hq, Hkv, d, bs, M, rope, bias]): OpCase => {
    const W = (Hq + 2 * Hkv) * d, numBlocks = B * M + 3;
    return {
      name: `paged qkvRopeAppend ${dtype} B=${B} L=${L} Hq=${Hq} Hkv=${Hkv} d=${d} blockSize=${bs}${rope ? ' rope' : ''}${bias ? ' bias' : ''}`, dtype,
      inputs: (rng) => {
        // Sequence b's rows sit at positions start_b .. start_b + L − 1 (a chunk or a decode token, ending
        // anywhere in a block); with L = 1 the second sequence is idle (position −1: nothing is written).
        const starts = Array.from({ length: B }, () => Math.floor(rng.next() * (M * bs - L + 1)));
        const positions = Array.from({ length: B * L }, (_, r) => (L === 1 && r === 1 ? -1 : starts[Math.floor(r / L)]! + (r % L)));
        const keys = starts.map((s, b) => (L === 1 && b === 1 ? 0 : s + L));
        return {
          qkv: floats(rng, [B * L, W], dtype), bias: floats(rng, [W], dtype), positions: ints([B * L], positions),
          invFreq: ropeInvFreq(d),
          kPool: floats(rng, [numBlocks, Hkv, bs, d], dtype), vPool: floats(rng, [numBlocks, Hkv, bs, d], dtype),
          table: ints([B, M], randomBlockTables(rng, keys, bs, M, numBlocks)),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.qkvRopeAppend({
          qkv: c.in('qkv'), positions: c.in('positions'), q: c.out('q', [B, Hq, L, d], dtype),
          kCache: c.keep('kPool', c.in('kPool')), vCache: c.keep('vPool', c.in('vPool')), blockTable: c.in('table'),
          ...(bias ? { bias: c.in('bias') } : {}), ...(rope ? { rope: { invFreq: c.in('invFreq'), scale: 1.25 } } : {}),
        });
        return c.results();
      },
    };
  });
}

function pagedDecodeAttentionCases(dtype: FloatDType): OpCase[] {
  // B, Hq, Hkv, d, blockSize, maxBlocks, splits
  const shapes: [number, number, number, number, number, number, number][] = [
    [5, 32, 8, 64, 16, 20, 1], [5, 32, 8, 64, 16, 20, 4], [3, 12, 12, 64, 32, 9, 1], [2, 32, 8, 128, 32, 70, 8],
    [4, 16, 1, 64, 16, 5, 3], [3, 8, 2, 80, 32, 4, 2], [4, 8, 2, 16, 8, 7, 1],
  ];
  return shapes.map(([B, Hq, Hkv, d, bs, M, splits], i): OpCase => {
    const maxLen = M * bs, numBlocks = B * M + 5, freshKeys = [1, 0, 20][i % 3]!;
    return {
      name: `paged decodeAttention ${dtype} B=${B} Hq=${Hq} Hkv=${Hkv} d=${d} blockSize=${bs} maxLen=${maxLen} splits=${splits} fresh=${freshKeys}`, dtype,
      inputs: (rng) => {
        // Row 0 at the last position, row 1 idle (−1), row 2 at position 0, the rest anywhere.
        const positions = Array.from({ length: B }, (_, b) => (b === 0 ? maxLen - 1 : b === 1 ? -1 : b === 2 ? 0 : Math.floor(rng.next() * maxLen)));
        return {
          q: floats(rng, [B, Hq, d], dtype), k: floats(rng, [numBlocks, Hkv, bs, d], dtype), v: floats(rng, [numBlocks, Hkv, bs, d], dtype),
          positions: ints([B], positions), table: ints([B, M], randomBlockTables(rng, positions.map((p) => p + 1), bs, M, numBlocks)),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.decodeAttention({
          q: c.in('q'), kCache: c.in('k'), vCache: c.in('v'), positions: c.in('positions'), out: c.out('out', [B, Hq, d], dtype), blockTable: c.in('table'),
          ...(splits > 1 ? { partials: b.empty([B, Hq, splits, d + 2], 'f32') } : {}), freshKeys,
        });
        return c.results();
      },
    };
  });
}

/**
 * Paged appendDecodeAttention (the serving engine's decode rows): fused on CUDA where the pipelined variant
 * takes the rows. Row 0 at the last position, row 1 idle (−1: nothing written, out 0), row 2 at position 0;
 * the pools (updated in place) and out are checked, q is scratch.
 */
function pagedAppendDecodeAttentionCases(dtype: FloatDType): OpCase[] {
  // B, Hq, Hkv, d, blockSize, maxBlocks, splits, rope, bias
  const shapes: [number, number, number, number, number, number, number, boolean, boolean][] = [
    [5, 32, 8, 64, 16, 20, 1, true, false], [5, 32, 8, 64, 16, 20, 4, true, false], [3, 12, 12, 64, 32, 9, 2, false, true],
    [4, 8, 2, 32, 8, 7, 1, true, true], [3, 8, 2, 128, 32, 4, 2, true, false],
  ];
  return shapes.map(([B, Hq, Hkv, d, bs, M, splits, rope, bias]): OpCase => {
    const W = (Hq + 2 * Hkv) * d, maxLen = M * bs, numBlocks = B * M + 5;
    return {
      name: `paged appendDecodeAttention ${dtype} B=${B} Hq=${Hq} Hkv=${Hkv} d=${d} blockSize=${bs} maxLen=${maxLen} splits=${splits}${rope ? ' rope' : ''}${bias ? ' bias' : ''}`, dtype,
      inputs: (rng) => {
        const positions = Array.from({ length: B }, (_, b) => (b === 0 ? maxLen - 1 : b === 1 ? -1 : b === 2 ? 0 : Math.floor(rng.next() * maxLen)));
        return {
          qkv: floats(rng, [B, W], dtype), bias: floats(rng, [W], dtype), invFreq: ropeInvFreq(d), positions: ints([B], positions),
          kPool: floats(rng, [numBlocks, Hkv, bs, d], dtype), vPool: floats(rng, [numBlocks, Hkv, bs, d], dtype),
          table: ints([B, M], randomBlockTables(rng, positions.map((p) => p + 1), bs, M, numBlocks)),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.appendDecodeAttention({
          qkv: c.in('qkv'), positions: c.in('positions'), q: b.empty([B, Hq, d], dtype), blockTable: c.in('table'),
          kCache: c.keep('kPool', c.in('kPool')), vCache: c.keep('vPool', c.in('vPool')), out: c.out('out', [B, Hq, d], dtype),
          ...(bias ? { bias: c.in('bias') } : {}), ...(rope ? { rope: { invFreq: c.in('invFreq'), scale: 1.25 } } : {}),
          ...(splits > 1 ? { partials: b.empty([B, Hq, splits, d + 2], 'f32') } : {}),
        });
        return c.results();
      },
    };
  });
}

function pagedFlashForwardCases(dtype: FloatDType): OpCase[] {
  // B, Hq, Hkv, Lq, Lk, d, blockSize, maxBlocks, causal
  const shapes: [number, number, number, number, number, number, number, number, boolean][] = [
    [1, 32, 8, 37, 203, 64, 16, 14, true], [2, 12, 12, 130, 130, 64, 32, 5, true], [1, 8, 2, 19, 83, 128, 32, 3, true],
    [2, 4, 1, 5, 70, 64, 16, 6, false], [1, 4, 2, 200, 245, 72, 16, 16, true], [1, 8, 8, 1, 17, 80, 16, 2, true],
  ];
  return shapes.map(([B, Hq, Hkv, Lq, Lk, d, bs, M, causal]): OpCase => {
    const numBlocks = B * M + 4;
    return {
      name: `paged flashAttentionForward ${dtype} B=${B} Hq=${Hq} Hkv=${Hkv} Lq=${Lq} Lk=${Lk} d=${d} blockSize=${bs}${causal ? ' causal' : ''}`, dtype,
      inputs: (rng) => ({
        q: floats(rng, [B, Hq, Lq, d], dtype), k: floats(rng, [numBlocks, Hkv, bs, d], dtype), v: floats(rng, [numBlocks, Hkv, bs, d], dtype),
        table: ints([B, M], randomBlockTables(rng, new Array<number>(B).fill(Lk), bs, M, numBlocks)),
      }),
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.flashAttentionForward({
          q: c.in('q'), k: c.in('k'), v: c.in('v'), out: c.out('out', [B, Hq, Lq, d], dtype), lse: c.out('lse', [B, Hq, Lq], 'f32'),
          causal, paged: { blockTable: c.in('table'), keys: Lk },
        });
        return c.results();
      },
    };
  });
}

/**
 * A serving step's rows (qkvRopeAppend with tableRows): R rows, each its own sequence (L = 1), row r
 * writing through table row tableRows[r] — a decode region at rows s → s, then segments of consecutive
 * rows of one table row each, an idle row and padding (position −1).
 */
function stepQkvRopeAppendCases(dtype: FloatDType): OpCase[] {
  // slots (table rows), segment counts, Hq, Hkv, d, blockSize, maxBlocks, rope, bias
  const shapes: [number, number[], number, number, number, number, number, boolean, boolean][] = [
    [6, [13, 40], 32, 8, 64, 16, 6, true, false], [4, [3], 12, 12, 64, 32, 3, false, true], [5, [9, 2, 17], 8, 2, 16, 8, 7, true, false],
    // Enough rows × heads for blocks of many heads (headsPerBlock): Llama's 48 heads, GPT-2's 36 (a partial last block).
    [6, [200, 90], 32, 8, 64, 16, 20, true, false], [4, [150], 12, 12, 64, 32, 6, false, true],
  ];
  return shapes.map(([slots, counts, Hq, Hkv, d, bs, M, rope, bias]): OpCase => {
    const W = (Hq + 2 * Hkv) * d, numBlocks = slots * M + 3, S = slots - counts.length, R = S + counts.reduce((a, b) => a + b, 0) + 3;
    return {
      name: `step qkvRopeAppend (tableRows) ${dtype} S=${S} segments ${counts.join('+')} Hq=${Hq} Hkv=${Hkv} d=${d} blockSize=${bs}${rope ? ' rope' : ''}${bias ? ' bias' : ''}`, dtype,
      inputs: (rng) => {
        // Decode rows s < S at a random position of slot s (row 1 idle); segment i in slot S + i from a
        // random start; 3 padding rows (−1) at the end.
        const positions: number[] = [], tableRows: number[] = [], keys = new Array<number>(slots).fill(0);
        for (let s = 0; s < S; s++) {
          const p = s === 1 ? -1 : Math.floor(rng.next() * M * bs);
          positions.push(p);
          tableRows.push(s);
          keys[s] = p + 1;
        }
        counts.forEach((c, i) => {
          const start = Math.floor(rng.next() * (M * bs - c + 1));
          for (let j = 0; j < c; j++) { positions.push(start + j); tableRows.push(S + i); }
          keys[S + i] = start + c;
        });
        for (let j = 0; j < 3; j++) { positions.push(-1); tableRows.push(0); }
        return {
          qkv: floats(rng, [R, W], dtype), bias: floats(rng, [W], dtype), positions: ints([R], positions), tableRows: ints([R], tableRows),
          invFreq: ropeInvFreq(d),
          kPool: floats(rng, [numBlocks, Hkv, bs, d], dtype), vPool: floats(rng, [numBlocks, Hkv, bs, d], dtype),
          table: ints([slots, M], randomBlockTables(rng, keys, bs, M, numBlocks)),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.qkvRopeAppend({
          qkv: c.in('qkv'), positions: c.in('positions'), q: c.out('q', [R, Hq, 1, d], dtype), tableRows: c.in('tableRows'),
          kCache: c.keep('kPool', c.in('kPool')), vCache: c.keep('vPool', c.in('vPool')), blockTable: c.in('table'),
          ...(bias ? { bias: c.in('bias') } : {}), ...(rope ? { rope: { invFreq: c.in('invFreq'), scale: 1 } } : {}),
        });
        return c.results();
      },
    };
  });
}

/**
 * Packed queries over paged keys (a serving step's prompt chunks in one flash attention): segments of
 * awkward lengths (1, past a 128-row tile, an empty one) from random starts in their own table rows
 * (seqRows a permutation of part of the table), causal at the end of their keys; rows past the last
 * segment must keep what they held (out starts from random values).
 */
function packedPagedFlashForwardCases(dtype: FloatDType): OpCase[] {
  // counts, Hq, Hkv, d, blockSize, maxBlocks, causal
  const shapes: [number[], number, number, number, number, number, boolean][] = [
    [[37, 1, 150, 0, 64], 32, 8, 64, 16, 16, true], [[130, 5], 12, 12, 64, 32, 6, true], [[19, 83], 8, 2, 128, 32, 4, true],
    [[7, 33, 2], 4, 1, 72, 16, 5, false], [[3], 8, 8, 16, 8, 3, true],
  ];
  return shapes.map(([counts, Hq, Hkv, d, bs, M, causal]): OpCase => {
    const B = counts.length, tableRows = B + 2, numBlocks = tableRows * M + 4, pad = 5;
    const cu = counts.reduce((acc, c) => [...acc, acc.at(-1)! + c], [0]), totalQ = cu.at(-1)! + pad, maxQ = Math.max(...counts);
    return {
      name: `packed paged flashAttentionForward ${dtype} segments ${counts.join('+')} Hq=${Hq} Hkv=${Hkv} d=${d} blockSize=${bs}${causal ? ' causal' : ''}`, dtype,
      inputs: (rng) => {
        const rows = permutation(rng, tableRows).slice(0, B);
        const keys = counts.map((c) => c + Math.floor(rng.next() * (M * bs - c + 1)));
        const perRow = new Array<number>(tableRows).fill(0);
        rows.forEach((r, b) => { perRow[r] = keys[b]!; });
        return {
          q: floats(rng, [totalQ, Hq, d], dtype), k: floats(rng, [numBlocks, Hkv, bs, d], dtype), v: floats(rng, [numBlocks, Hkv, bs, d], dtype),
          out: floats(rng, [totalQ, Hq, d], dtype), lse: { values: rng.floats(Hq * totalQ, 1, 0), shape: [Hq, totalQ], dtype: 'f32' },
          table: ints([tableRows, M], randomBlockTables(rng, perRow, bs, M, numBlocks)),
          cu: ints([B + 1], cu), seqKeys: ints([B], keys), seqRows: ints([B], rows),
        };
      },
      run: (b, inputs) => {
        const c = new CaseContext(b, inputs);
        b.flashAttentionForward({
          q: c.in('q'), k: c.in('k'), v: c.in('v'), out: c.keep('out', c.in('out')), lse: c.keep('lse', c.in('lse')), causal,
          cuSeqlensQ: c.in('cu'), maxSeqlenQ: maxQ, paged: { blockTable: c.in('table'), seqKeys: c.in('seqKeys'), seqRows: c.in('seqRows') },
        });
        return c.results();
      },
    };
  });
}

export function pagedOpCases(dtypes: readonly FloatDType[] = FLOAT_DTYPES): OpCase[] {
  return dtypes.flatMap((dtype) => [
    ...pagedQkvRopeAppendCases(dtype), ...stepQkvRopeAppendCases(dtype), ...pagedDecodeAttentionCases(dtype), ...pagedAppendDecodeAttentionCases(dtype),
    ...pagedFlashForwardCases(dtype), ...packedPagedFlashForwardCases(dtype),
  ]);
}
