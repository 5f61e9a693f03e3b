// The decoder encoder's shared prefix (infer/shared-prefix.ts): the prefix length it finds, the block tables of
// a suffix pass, and — on the CPU, in f32 — vectors equal to the padded dense pass's, with the prefix computed,
// taken from the cache, or not shared, and packed passes without a prefix equal to padded ones under every
// pooling, for Llama-shaped (RoPE, GQA) and GPT-2-shaped (learned positions) decoders.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { DecoderEncoder } from '../../src/infer/decoder-encoder.js';
import { PREFIX_BLOCK, sharedPrefixLength, suffixRows } from '../../src/infer/shared-prefix.js';
import { Rng } from '../../src/testing/random.js';
import { TINY_GPT2, TINY_LLAMA, writeModelFolder } from './hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-shared-prefix-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** [B, L] ids, sequence s's tokens first, from rows of any lengths. */
function packed(rows: readonly (readonly number[])[]): { ids: Int32Array; lengths: Int32Array; L: number } {
  const L = Math.max(...rows.map((r) => r.length)), ids = new Int32Array(rows.length * L).fill(-1);
  rows.forEach((r, s) => ids.set(r, s * L));
  return { ids, lengths: Int32Array.from(rows, (r) => r.length), L };
}

test('sharedPrefixLength: the common token prefix, short of every last token, at most max, in whole blocks', () => {
  const base = Array.from({ length: 80 }, (_, i) => i + 1);
  const cases: [number[][], number, number][] = [
    [[base, base.slice(0, 60).concat([999])], 1000, 48], // common 60 → 3 blocks
    [[base.slice(0, 40), base], 1000, 32], // the shorter keeps its last token: 39 → 32
    [[base.slice(0, 33), base], 1000, 32], // 32 of 33: exactly two blocks
    [[base, base], 40, 32], // capped by max
    [[base, [7, ...base]], 1000, 0], // differ at the first token
    [[base.slice(0, 20), base], 1000, 16],
  ];
  for (const [rows, max, want] of cases) {
    const { ids, lengths, L } = packed(rows);
    assert.equal(sharedPrefixLength(ids, lengths, L, max), want, JSON.stringify(rows.map((r) => r.length)) + ` max ${max}`);
  }
  assert.equal(PREFIX_BLOCK, 16);
});

test('suffixRows: packed suffix rows at positions P…, every layer\'s table its own prefix blocks then the sequence\'s shared suffix blocks', () => {
  const P = 32, layers = 2;
  const rows = [Array.from({ length: 50 }, (_, i) => i), Array.from({ length: 33 }, (_, i) => i), Array.from({ length: 65 }, (_, i) => i)];
  const { ids, lengths, L } = packed(rows);
  const s = suffixRows(ids, lengths, L, P, layers);
  assert.deepEqual(Array.from(s.cu), [0, 18, 19, 52]);
  assert.deepEqual(Array.from(s.seqKeys), [50, 33, 65]);
  assert.equal(s.maxRows, 33);
  // nP 2, own blocks 2 / 1 / 3: M = 5; prefix blocks 0–3 (2 layers × 2), suffix blocks from 4.
  assert.equal(s.maxBlocks, 5);
  assert.equal(s.blocks, 4 + 2 + 1 + 3);
  const table = (l: number, b: number) => Array.from(s.tables.subarray((l * 3 + b) * 5, (l * 3 + b + 1) * 5));
  assert.deepEqual(table(0, 0), [0, 1, 4, 5, 0]);
  assert.deepEqual(table(1, 0), [2, 3, 4, 5, 0]);
  assert.deepEqual(table(1, 1), [2, 3, 6, 0, 0]);
  assert.deepEqual(table(0, 2), [0, 1, 7, 8, 9]);
  assert.deepEqual(Array.from(s.positions.subarray(18, 20)), [32, 32]);
  assert.deepEqual(Array.from(s.tokens.subarray(0, 3)), [32, 33, 34]);
  assert.deepEqual(Array.from(s.sequenceOf.subarray(17, 20)), [0, 1, 2]);
});

function assertVectorsClose(actual: readonly Float32Array[], wanted: readonly Float32Array[], label: string, tolerance = 2e-5): void {
  assert.equal(actual.length, wanted.length, label);
  actual.forEach((v, i) => v.forEach((x, h) => assert.ok(Math.abs(x - wanted[i]![h]!) <= tolerance, `${label}: vector ${i} element ${h}: ${x} vs ${wanted[i]![h]}`)));
}

for (const [family, config] of [['llama', { ...TINY_LLAMA, maxPositions: 160 }], ['gpt2', { ...TINY_GPT2, maxPositions: 160 }]] as const) {
  test(`a ${family}-shaped decoder encoder: sequences sharing a prefix give the dense pass's vectors — prefix computed, then cached, then replaced`, () => {
    const dir = join(root, family);
    writeModelFolder(dir, family, config, 31, { stripPrefix: true });
    const cpu = new CpuBackend(), rng = new Rng(3);
    const ints = (n: number) => Array.from(rng.ints(n, 0, 256));
    const prefix = ints(45), other = ints(70);
    const batch = (head: number[], sizes: number[]) => sizes.map((n) => [...head, ...ints(n)]);
    const calls = [batch(prefix, [9, 40, 1, 23]), batch(prefix, [5, 17]), [[...prefix, ...ints(3)]], batch(other, [2, 30, 11]), batch(prefix.slice(0, 20), [1, 2])];
    const dense = DecoderEncoder.load(dir, cpu, { dtype: 'f32', maxSharedPrefix: 0, packedPasses: false }).encoder;
    const shared = DecoderEncoder.load(dir, cpu, { dtype: 'f32' }).encoder;
    try {
      const options = { pooling: 'last', normalize: true } as const;
      for (const [i, rows] of calls.entries()) {
        const L = Math.max(...rows.map((r) => r.length)), pad = (r: number[]) => [...r, ...new Array<number>(L - r.length).fill(5)];
        const mask = rows.map((r) => Array.from({ length: L }, (_, l) => (l < r.length ? 1 : 0)));
        assertVectorsClose(shared.embeddings(rows.map(pad), mask, options), dense.embeddings(rows.map(pad), mask, options), `call ${i}`);
      }
      // Call 0 computes 32 tokens, calls 1–2 reuse them (one sequence alone too), call 3 computes another 64,
      // call 4's 20 common tokens are too few to share.
      assert.deepEqual(shared.prefixStats, { passes: 4, computed: 2, cached: 2, savedTokens: 3 * 32 + 2 * 32 + 1 * 32 + 2 * 64 });
      assert.deepEqual(dense.prefixStats, { passes: 0, computed: 0, cached: 0, savedTokens: 0 });
      // Mean pooling never shares (it reads the prefix's rows too).
      const rows = batch(prefix, [4, 8]).map((r) => r.slice(0, 49));
      assertVectorsClose(shared.embeddings(rows, undefined, { pooling: 'mean' }), dense.embeddings(rows, undefined, { pooling: 'mean' }), 'mean');
      assert.equal(shared.prefixStats.passes, 4);
    } finally {
      shared.free();
      dense.free();
    }
    assert.throws(() => DecoderEncoder.load(dir, cpu, { maxSharedPrefix: -1 }), /maxSharedPrefix must be a non-negative integer, got -1/);
  });
}

for (const [family, config] of [['llama', { ...TINY_LLAMA, maxPositions: 160 }], ['gpt2', { ...TINY_GPT2, maxPositions: 160 }]] as const) {
  test(`a ${family}-shaped decoder encoder: packed passes give the padded passes' vectors under every pooling, right or left padded, Dense layers or not`, () => {
    const dir = join(root, `${family}-packed`);
    writeModelFolder(dir, family, config, 37, { stripPrefix: true });
    const cpu = new CpuBackend(), rng = new Rng(5);
    const rows = [40, 3, 17, 1, 29].map((n) => Array.from(rng.ints(n, 0, 256)));
    const L = 41, right = rows.map((r) => [...r, ...new Array<number>(L - r.length).fill(7)]), left = rows.map((r) => [...new Array<number>(L - r.length).fill(7), ...r]);
    const mask = (at: 'left' | 'right') => rows.map((r) => Array.from({ length: L }, (_, l) => Number(at === 'right' ? l < r.length : l >= L - r.length)));
    const packedEncoder = DecoderEncoder.load(dir, cpu, { dtype: 'f32', maxSharedPrefix: 0 }).encoder;
    const padded = DecoderEncoder.load(dir, cpu, { dtype: 'f32', maxSharedPrefix: 0, packedPasses: false }).encoder;
    try {
      assert.equal(packedEncoder.packedPasses, process.env['FUSEFORMER_PACKED_PASSES'] !== '0', 'packed by default');
      assert.equal(padded.packedPasses, false);
      const H = packedEncoder.hidden, weight = cpu.empty([3, H], 'f32'), bias = cpu.empty([3], 'f32');
      cpu.upload(weight, Float32Array.from({ length: 3 * H }, () => rng.next() - 0.5));
      cpu.upload(bias, Float32Array.of(0.1, -0.2, 0.3));
      const dense = [{ weight, bias, activation: 'tanh' as const }];
      for (const pooling of ['mean', 'last', 'cls'] as const) {
        for (const [ids, at] of [[right, 'right'], [left, 'left']] as const) {
          const options = { pooling, normalize: pooling !== 'cls' };
          assertVectorsClose(packedEncoder.embeddings(ids, mask(at), options), padded.embeddings(ids, mask(at), options), `${pooling}, ${at} padded`);
        }
      }
      // Dense layers after mean pooling: the weights are 1/length on the device.
      assertVectorsClose(packedEncoder.embeddings(right, mask('right'), { pooling: 'mean', dense }), padded.embeddings(right, mask('right'), { pooling: 'mean', dense }), 'mean + Dense');
    } finally {
      packedEncoder.free();
      padded.free();
    }
  });
}
