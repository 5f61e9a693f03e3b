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
