// The paged attention ops on the CPU reference (backend.ts: a block table over a pool [numBlocks, Hkv,
// blockSize, d]) against the same ops on the contiguous cache the table describes: the pool is the dense
// cache's rows scattered to randomly ordered blocks, so every output must be identical. Idle rows
// (position −1) and the argument errors are checked too.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import type { Tensor } from '../../../src/tensor.js';
import { Rng } from '../../../src/testing/random.js';
import { randomBlockTables } from '../../../src/testing/paged-op-cases.js';
import { randomValues } from './helpers.js';

const backend = new CpuBackend();
const f32 = (values: readonly number[] | Float32Array, shape: number[]) => backend.fromArray(values, shape, 'f32');
const i32 = (values: readonly number[] | Int32Array, shape: number[]) => backend.fromArray(values, shape, 'i32');
const read = (t: Tensor) => Array.from(backend.download(t));

/** Scatters a dense cache [B, Hkv, maxLen, d] into a pool [numBlocks, Hkv, bs, d] by the table (other rows: `fill`). */
function scatter(dense: number[], table: Int32Array, B: number, Hkv: number, bs: number, M: number, d: number, numBlocks: number, fill: number): number[] {
  const pool = new Array<number>(numBlocks * Hkv * bs * d).fill(fill);
  for (let b = 0; b < B; b++) {
    for (let i = 0; i < M; i++) {
      const block = table[b * M + i]!;
      if (block < 0) continue;
      for (let g = 0; g < Hkv; g++) {
        for (let o = 0; o < bs; o++) {
          for (let c = 0; c < d; c++) pool[((block * Hkv + g) * bs + o) * d + c] = dense[((b * Hkv + g) * M * bs + i * bs + o) * d + c]!;
        }
      }
    }
  }
  return pool;
}

test('paged decodeAttention equals decodeAttention on the cache the block table describes; idle rows give 0', () => {
  const [B, Hq, Hkv, d, bs, M] = [4, 8, 2, 8, 4, 5], maxLen = bs * M, numBlocks = B * M + 3;
  const positions = [maxLen - 1, -1, 6, 0];
  const table = randomBlockTables(new Rng(3), positions.map((p) => p + 1), bs, M, numBlocks);
  const k = randomValues(1, B * Hkv * maxLen * d), v = randomValues(2, B * Hkv * maxLen * d), q = randomValues(4, B * Hq * d);
  const paged = backend.empty([B, Hq, d], 'f32');
  backend.decodeAttention({
    q: f32(q, [B, Hq, d]), kCache: f32(scatter(k, table, B, Hkv, bs, M, d, numBlocks, 99), [numBlocks, Hkv, bs, d]),
    vCache: f32(scatter(v, table, B, Hkv, bs, M, d, numBlocks, 99), [numBlocks, Hkv, bs, d]), positions: i32(positions, [B]), out: paged, blockTable: i32(table, [B, M]),
  });
  const dense = backend.empty([B, Hq, d], 'f32');
  backend.decodeAttention({ q: f32(q, [B, Hq, d]), kCache: f32(k, [B, Hkv, maxLen, d]), vCache: f32(v, [B, Hkv, maxLen, d]), positions: i32(positions.map((p) => Math.max(p, 0)), [B]), out: dense });
  const got = read(paged), want = read(dense);
  for (let b = 0; b < B; b++) {
    const row = got.slice(b * Hq * d, (b + 1) * Hq * d);
    assert.deepEqual(row, b === 1 ? new Array<number>(Hq * d).fill(0) : want.slice(b * Hq * d, (b + 1) * Hq * d), `sequence ${b}`);
  }
});

test('paged qkvRopeAppend writes each row to block table[b, p / bs], offset p mod bs; idle rows write nothing', () => {
  const [B, L, Hq, Hkv, d, bs, M] = [3, 5, 4, 2, 4, 4, 4], maxLen = bs * M, numBlocks = B * M + 2, W = (Hq + 2 * Hkv) * d;
  const starts = [0, 7, 11];
  const positions = Array.from({ length: B * L }, (_, r) => (r === L ? -1 : starts[Math.floor(r / L)]! + (r % L)));
  const table = randomBlockTables(new Rng(5), starts.map((s) => s + L), bs, M, numBlocks);
  const qkv = randomValues(6, B * L * W), invFreq = [0.3, 0.02];
  const rope = { invFreq: f32(invFreq, [2]), scale: 1 };
  const qPaged = backend.empty([B, Hq, L, d], 'f32'), kPool = backend.empty([numBlocks, Hkv, bs, d], 'f32'), vPool = backend.empty([numBlocks, Hkv, bs, d], 'f32');
  backend.fill(kPool, 7);
  backend.fill(vPool, 7);
  backend.qkvRopeAppend({ qkv: f32(qkv, [B * L, W]), positions: i32(positions, [B * L]), rope, q: qPaged, kCache: kPool, vCache: vPool, blockTable: i32(table, [B, M]) });
  // The dense op on the same rows (the idle row moved to an unused position, 15, which is then ignored).
  const qDense = backend.empty([B, Hq, L, d], 'f32'), kDense = backend.empty([B, Hkv, maxLen, d], 'f32'), vDense = backend.empty([B, Hkv, maxLen, d], 'f32');
  backend.fill(kDense, 7);
  backend.fill(vDense, 7);
  backend.qkvRopeAppend({ qkv: f32(qkv, [B * L, W]), positions: i32(positions.map((p) => (p < 0 ? 15 : p)), [B * L]), rope, q: qDense, kCache: kDense, vCache: vDense });
  const idleQ = [...Array(Hq).keys()].flatMap((h) => [...Array(d).keys()].map((c) => ((1 * Hq + h) * L + 0) * d + c));
  const qp = read(qPaged), qd = read(qDense);
  for (let i = 0; i < qp.length; i++) if (!idleQ.includes(i)) assert.equal(qp[i], qd[i], `q element ${i}`);
  for (const [pool, dense] of [[kPool, kDense], [vPool, vDense]] as const) {
    const p = read(pool), dn = read(dense);
    const written = new Set<number>();
    positions.forEach((pos, r) => {
      if (pos < 0) return;
      const b = Math.floor(r / L), block = table[b * M + Math.floor(pos / bs)]!;
      for (let g = 0; g < Hkv; g++) {
        for (let c = 0; c < d; c++) {
          const at = ((block * Hkv + g) * bs + (pos % bs)) * d + c;
          written.add(at);
          assert.equal(p[at], dn[((b * Hkv + g) * maxLen + pos) * d + c], `row ${r} head ${g}`);
        }
      }
    });
    p.forEach((x, i) => { if (!written.has(i)) assert.equal(x, 7, `pool element ${i} was not to be written`); });
  }
});

test('paged flashAttentionForward equals the dense op on the gathered keys (causal chunk at the end of the context)', () => {
  const [B, Hq, Hkv, Lq, Lk, d, bs, M] = [2, 4, 2, 5, 13, 8, 4, 5], numBlocks = B * M + 1;
  const table = randomBlockTables(new Rng(9), [Lk, Lk], bs, M, numBlocks);
  // The dense cache holds M·bs positions; the op reads the first Lk.
  const k = randomValues(10, B * Hkv * M * bs * d), v = randomValues(11, B * Hkv * M * bs * d), q = randomValues(12, B * Hq * Lq * d);
  const prefix = (x: number[]) => {
    const out: number[] = [];
    for (let bg = 0; bg < B * Hkv; bg++) out.push(...x.slice(bg * M * bs * d, bg * M * bs * d + Lk * d));
    return out;
  };
  for (const causal of [true, false]) {
    const out = backend.empty([B, Hq, Lq, d], 'f32'), lse = backend.empty([B, Hq, Lq], 'f32');
    backend.flashAttentionForward({
      q: f32(q, [B, Hq, Lq, d]), k: f32(scatter(k, table, B, Hkv, bs, M, d, numBlocks, 50), [numBlocks, Hkv, bs, d]),
      v: f32(scatter(v, table, B, Hkv, bs, M, d, numBlocks, 50), [numBlocks, Hkv, bs, d]), out, lse, causal, paged: { blockTable: i32(table, [B, M]), keys: Lk },
    });
    const outDense = backend.empty([B, Hq, Lq, d], 'f32'), lseDense = backend.empty([B, Hq, Lq], 'f32');
    backend.flashAttentionForward({ q: f32(q, [B, Hq, Lq, d]), k: f32(prefix(k), [B, Hkv, Lk, d]), v: f32(prefix(v), [B, Hkv, Lk, d]), out: outDense, lse: lseDense, causal });
    assert.deepEqual(read(out), read(outDense), `out (causal ${causal})`);
    assert.deepEqual(read(lse), read(lseDense), `lse (causal ${causal})`);
  }
});

test('the paged ops reject a table entry outside the pool, too many keys, and copies with a table', () => {
  const pool = backend.empty([3, 1, 4, 2], 'f32');
  const q = backend.empty([1, 1, 2], 'f32'), out = backend.empty([1, 1, 2], 'f32');
  assert.throws(() => { backend.decodeAttention({ q, kCache: pool, vCache: pool, positions: i32([5], [1]), out, blockTable: i32([0, 3], [1, 2]) }); backend.synchronize(); }, /decodeAttention: 'blockTable'\[0, 1\] = 3 is outside the pool's \[0, 3\) blocks/);
  assert.throws(() => { backend.decodeAttention({ q, kCache: pool, vCache: pool, positions: i32([8], [1]), out, blockTable: i32([0, 1], [1, 2]) }); backend.synchronize(); }, /'positions'\[0\] = 8 is outside the cache's \[0, 8\)/);
  const q4 = backend.empty([1, 1, 3, 2], 'f32'), lse = backend.empty([1, 1, 3], 'f32');
  assert.throws(() => backend.flashAttentionForward({ q: q4, k: pool, v: pool, out: backend.empty([1, 1, 3, 2], 'f32'), lse, paged: { blockTable: i32([0, 1], [1, 2]), keys: 9 } }), /'paged.keys' = 9 is more than the block table holds \(2 blocks of 4 = 8\)/);
  assert.throws(() => { backend.flashAttentionForward({ q: q4, k: pool, v: pool, out: backend.empty([1, 1, 3, 2], 'f32'), lse, paged: { blockTable: i32([2, -1], [1, 2]), keys: 5 } }); backend.synchronize(); }, /'paged.blockTable'\[0, 1\] = -1 is outside the pool's \[0, 3\) blocks/);
  const qkv = backend.empty([1, 3 * 2], 'f32');
  assert.throws(() => backend.qkvRopeAppend({ qkv, positions: i32([0], [1]), q: backend.empty([1, 1, 1, 2], 'f32'), kCache: pool, vCache: pool, blockTable: i32([0], [1, 1]), kOut: backend.empty([1, 1, 1, 2], 'f32'), vOut: backend.empty([1, 1, 1, 2], 'f32') }), /'kOut' is not used with a block table/);
  assert.throws(() => { backend.qkvRopeAppend({ qkv, positions: i32([2], [1]), q: backend.empty([1, 1, 1, 2], 'f32'), kCache: pool, vCache: pool, blockTable: i32([-1], [1, 1]) }); backend.synchronize(); }, /qkvRopeAppend: 'blockTable'\[0, 0\] = -1 is outside the pool's \[0, 3\) blocks/);
});

test('packed paged flashAttentionForward equals the paged op on each segment alone, through its own table row; rows past the segments keep their values', () => {
  const [Hq, Hkv, d, bs, M] = [4, 2, 8, 4, 6], counts = [5, 1, 0, 9], B = counts.length, rowsInTable = 6, numBlocks = rowsInTable * M + 2;
  const seqRows = [4, 0, 2, 5], keys = [13, 7, 3, 9];
  const perRow = new Array<number>(rowsInTable).fill(0);
  seqRows.forEach((r, b) => { perRow[r] = keys[b]!; });
  const table = randomBlockTables(new Rng(21), perRow, bs, M, numBlocks);
  const cu = counts.reduce((acc, c) => [...acc, acc.at(-1)! + c], [0]), pad = 3, Tq = cu.at(-1)! + pad;
  const q = randomValues(22, Tq * Hq * d), k = f32(randomValues(23, numBlocks * Hkv * bs * d), [numBlocks, Hkv, bs, d]), v = f32(randomValues(24, numBlocks * Hkv * bs * d), [numBlocks, Hkv, bs, d]);
  const before = randomValues(25, Tq * Hq * d);
  for (const causal of [true, false]) {
    const out = f32(before, [Tq, Hq, d]), lse = f32(new Array<number>(Hq * Tq).fill(0.5), [Hq, Tq]);
    backend.flashAttentionForward({
      q: f32(q, [Tq, Hq, d]), k, v, out, lse, causal, cuSeqlensQ: i32(cu, [B + 1]), maxSeqlenQ: Math.max(...counts),
      paged: { blockTable: i32(table, [rowsInTable, M]), seqKeys: i32(keys, [B]), seqRows: i32(seqRows, [B]) },
    });
    const got = read(out), gotLse = read(lse);
    counts.forEach((c, b) => {
      if (c === 0) return;
      // Segment b alone: q [1, Hq, c, d] from its packed rows, the dense-q paged op over its table row.
      const qb = new Array<number>(Hq * c * d), r0 = cu[b]!;
      for (let h = 0; h < Hq; h++) for (let i = 0; i < c; i++) for (let x = 0; x < d; x++) qb[(h * c + i) * d + x] = q[((r0 + i) * Hq + h) * d + x]!;
      const ob = backend.empty([1, Hq, c, d], 'f32'), lb = backend.empty([1, Hq, c], 'f32');
      const row = Array.from(table.subarray(seqRows[b]! * M, (seqRows[b]! + 1) * M));
      backend.flashAttentionForward({ q: f32(qb, [1, Hq, c, d]), k, v, out: ob, lse: lb, causal, paged: { blockTable: i32(row, [1, M]), keys: keys[b]! } });
      const want = read(ob), wantLse = read(lb);
      for (let h = 0; h < Hq; h++) {
        for (let i = 0; i < c; i++) {
          assert.deepEqual(got.slice(((r0 + i) * Hq + h) * d, ((r0 + i) * Hq + h + 1) * d), want.slice((h * c + i) * d, (h * c + i + 1) * d), `segment ${b} head ${h} row ${i}`);
          assert.equal(gotLse[h * Tq + r0 + i], wantLse[h * c + i], `lse segment ${b} head ${h} row ${i}`);
        }
      }
    });
    const tail = Array.from(new Float32Array(before.slice(cu.at(-1)! * Hq * d)));
    assert.deepEqual(got.slice(cu.at(-1)! * Hq * d), tail, 'rows past the last segment keep their values');
    for (let h = 0; h < Hq; h++) for (let r = cu.at(-1)!; r < Tq; r++) assert.equal(gotLse[h * Tq + r], 0.5, 'lse past the last segment');
  }
});

test('qkvRopeAppend with tableRows equals one call per row through that row of the table', () => {
  const [Hq, Hkv, d, bs, M] = [4, 2, 4, 4, 4], tableRowsCount = 3, numBlocks = tableRowsCount * M + 2, W = (Hq + 2 * Hkv) * d;
  const positions = [3, -1, 0, 1, 2, 9, 10, -1], rowsOf = [0, 1, 2, 2, 2, 1, 1, 0], R = positions.length;
  const table = randomBlockTables(new Rng(31), [4, 11, 3], bs, M, numBlocks);
  const qkv = randomValues(32, R * W), rope = { invFreq: f32([0.3, 0.02], [2]), scale: 1 };
  const q = backend.empty([R, Hq, 1, d], 'f32'), kPool = f32(new Array<number>(numBlocks * Hkv * bs * d).fill(7), [numBlocks, Hkv, bs, d]), vPool = f32(new Array<number>(numBlocks * Hkv * bs * d).fill(7), [numBlocks, Hkv, bs, d]);
  backend.qkvRopeAppend({ qkv: f32(qkv, [R, W]), positions: i32(positions, [R]), rope, q, kCache: kPool, vCache: vPool, blockTable: i32(table, [tableRowsCount, M]), tableRows: i32(rowsOf, [R]) });
  const qOne = backend.empty([1, Hq, 1, d], 'f32'), kOne = f32(new Array<number>(numBlocks * Hkv * bs * d).fill(7), [numBlocks, Hkv, bs, d]), vOne = f32(new Array<number>(numBlocks * Hkv * bs * d).fill(7), [numBlocks, Hkv, bs, d]);
  const qWant: number[] = [];
  for (let r = 0; r < R; r++) {
    const row = Array.from(table.subarray(rowsOf[r]! * M, (rowsOf[r]! + 1) * M));
    backend.qkvRopeAppend({ qkv: f32(qkv.slice(r * W, (r + 1) * W), [1, W]), positions: i32([positions[r]!], [1]), rope, q: qOne, kCache: kOne, vCache: vOne, blockTable: i32(row, [1, M]) });
    qWant.push(...read(qOne));
  }
  assert.deepEqual(read(q), qWant, 'query heads');
  assert.deepEqual(read(kPool), read(kOne), 'key pool');
  assert.deepEqual(read(vPool), read(vOne), 'value pool');
  assert.throws(() => { backend.qkvRopeAppend({ qkv: f32(qkv.slice(0, W), [1, W]), positions: i32([0], [1]), q: qOne, kCache: kPool, vCache: vPool, blockTable: i32(table, [tableRowsCount, M]), tableRows: i32([3], [1]) }); backend.synchronize(); }, /'tableRows'\[0\] = 3 is outside the block table's \[0, 3\) rows/);
});

test('packed paged attention rejects a table row, a key count or offsets it cannot use, and arguments of the other layouts', () => {
  const pool = backend.empty([4, 1, 4, 2], 'f32'), table = i32([0, 1, 2, 3], [2, 2]);
  const q = backend.empty([5, 1, 2], 'f32'), out = backend.empty([5, 1, 2], 'f32'), lse = backend.empty([1, 5], 'f32');
  const base = { q, k: pool, v: pool, out, lse, causal: true, maxSeqlenQ: 3 };
  const run = (extra: object) => { backend.flashAttentionForward({ ...base, ...extra } as never); backend.synchronize(); };
  const paged = (seqKeys: number[], seqRows: number[]) => ({ blockTable: table, seqKeys: i32(seqKeys, [seqKeys.length]), seqRows: i32(seqRows, [seqRows.length]) });
  assert.throws(() => run({ cuSeqlensQ: i32([0, 2, 5], [3]), paged: paged([4, 9], [0, 1]) }), /'paged.seqKeys'\[1\] = 9 is outside \[0, 8\]/);
  assert.throws(() => run({ cuSeqlensQ: i32([0, 2, 5], [3]), paged: paged([4, 5], [0, 2]) }), /'paged.seqRows'\[1\] = 2 is outside the block table's \[0, 2\) rows/);
  assert.throws(() => run({ cuSeqlensQ: i32([0, 4, 5], [3]), paged: paged([4, 5], [0, 1]) }), /sequence 0 has 4 queries, more than maxSeqlenQ = 3/);
  assert.throws(() => run({ cuSeqlensQ: i32([0, 3, 2], [3]), paged: paged([4, 5], [0, 1]) }), /'cuSeqlensQ' decreases at 1/);
  assert.throws(() => run({ cuSeqlensQ: i32([0, 2, 5], [3]), cuSeqlensK: i32([0, 2, 5], [3]), paged: paged([4, 5], [0, 1]) }), /'cuSeqlensK' is not used with paged keys/);
  assert.throws(() => run({ cuSeqlensQ: i32([0, 2, 5], [3]), paged: { ...paged([4, 5], [0, 1]), keys: 4 } }), /'paged.keys' is not used with packed queries/);
  assert.throws(() => run({ paged: paged([4, 5], [0, 1]) }), /'paged.seqKeys' \(packed queries\) needs cuSeqlensQ and maxSeqlenQ/);
});
