import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { ArgumentError, DTypeError, ShapeError } from '../../../src/errors.js';
import type { Tensor } from '../../../src/tensor.js';
import { assertClose, assertRejects, numericGradient, randomValues, weightedSum } from './helpers.js';

const backend = new CpuBackend();
const [B, L, V, H, P] = [2, 3, 5, 4, 6];
const tokens = [1, 4, 1, 0, 1, 3]; // token 1 appears three times: its gradient accumulates
const tokenTable = randomValues(1, V * H);
const positionTable = randomValues(2, P * H);
const [scale, positionOffset, p, seed, offset] = [1.5, 2, 0.25, 42n, 9n];

function forward(tokenValues: readonly number[], positionValues: readonly number[] | undefined, dropout = p, mask?: Tensor) {
  const out = backend.empty([B, L, H], 'f32'), m = mask ?? backend.empty([B, L, H], 'u8');
  backend.embeddingForward({
    tokens: backend.fromArray(tokens, [B, L], 'i32'), tokenTable: backend.fromArray(tokenValues, [V, H], 'f32'),
    ...(positionValues ? { positionTable: backend.fromArray(positionValues, [P, H], 'f32') } : {}),
    positionOffset, scale, out, mask: m, p: dropout, seed, offset,
  });
  return { out: Array.from(backend.download(out)), mask: m };
}

describe('embeddingForward', () => {
  test('out = dropout(scale·tokenTable[token] + positionTable[positionOffset + l])', () => {
    const { out, mask } = forward(tokenTable, positionTable);
    const keep = backend.download(mask);
    assert.ok(keep.includes(0) && keep.includes(1));
    const expected = out.map((_, i) => {
      const [bl, h] = [Math.floor(i / H), i % H];
      const value = scale * tokenTable[tokens[bl]! * H + h]! + positionTable[(positionOffset + (bl % L)) * H + h]!;
      return keep[i] ? value / (1 - p) : 0;
    });
    assertClose(out, expected, 1e-6);
  });

  test('without a position table, and with p = 0, out = scale·tokenTable[token]', () => {
    const { out, mask } = forward(tokenTable, undefined, 0);
    assert.ok(Array.from(backend.download(mask)).every((k) => k === 1));
    assertClose(out, out.map((_, i) => scale * tokenTable[tokens[Math.floor(i / H)]! * H + (i % H)]!), 1e-6);
  });

  test('the mask is the same one any other op draws for (seed, offset)', () => {
    const { mask } = forward(tokenTable, positionTable);
    const other = backend.empty([B * L, H], 'u8');
    backend.biasDropoutResidual({
      input: backend.empty([B * L, H], 'f32'), bias: backend.empty([H], 'f32'), residual: backend.empty([B * L, H], 'f32'),
      out: backend.empty([B * L, H], 'f32'), mask: other, p, seed, offset,
    });
    assert.deepEqual(Array.from(backend.download(mask)), Array.from(backend.download(other)));
  });

  test('validation names the op and the argument', () => {
    const args = () => ({
      tokens: backend.fromArray(tokens, [B, L], 'i32'), tokenTable: backend.empty([V, H], 'f32'), positionTable: backend.empty([P, H], 'f32'),
      out: backend.empty([B, L, H], 'f32'), mask: backend.empty([B, L, H], 'u8'), p: 0.1, seed: 1n, offset: 0n,
    });
    assertRejects(() => backend.embeddingForward({ ...args(), tokens: backend.fromArray([0, 1, 2, 3, 5, 0], [B, L], 'i32') }), 'embeddingForward', 'tokens', ArgumentError);
    assertRejects(() => backend.embeddingForward({ ...args(), positionOffset: 4 }), 'embeddingForward', 'positionTable', ArgumentError);
    assertRejects(() => backend.embeddingForward({ ...args(), tokens: backend.empty([B, L], 'f32') }), 'embeddingForward', 'tokens', DTypeError);
    assertRejects(() => backend.embeddingForward({ ...args(), mask: backend.empty([B, L, H + 1], 'u8') }), 'embeddingForward', 'mask', ShapeError);
    assertRejects(() => backend.embeddingForward({ ...args(), p: 1.5 }), 'embeddingForward', 'p', ArgumentError);
    assertRejects(() => backend.embeddingForward({ ...args(), positionTable: backend.empty([P, H], 'f16') }), 'embeddingForward', 'positionTable', DTypeError);
  });
});

describe('embeddingBackward', () => {
  test('matches finite differences of the forward and accumulates into the tables', () => {
    const w = randomValues(3, B * L * H);
    const { mask } = forward(tokenTable, positionTable);
    const startTokens = randomValues(4, V * H), startPositions = randomValues(5, P * H);
    const dTokenTable = backend.fromArray(startTokens, [V, H], 'f32'), dPositionTable = backend.fromArray(startPositions, [P, H], 'f32');
    backend.embeddingBackward({ tokens: backend.fromArray(tokens, [B, L], 'i32'), dOut: backend.fromArray(w, [B, L, H], 'f32'), mask, p, scale, positionOffset, dTokenTable, dPositionTable });

    const tokenGrad = numericGradient((t) => weightedSum(forward(t, positionTable, p, mask).out, w), tokenTable);
    const positionGrad = numericGradient((q) => weightedSum(forward(tokenTable, q, p, mask).out, w), positionTable);
    assertClose(backend.download(dTokenTable), tokenGrad.map((g, i) => g + startTokens[i]!), 2e-3, 'dTokenTable');
    assertClose(backend.download(dPositionTable), positionGrad.map((g, i) => g + startPositions[i]!), 2e-3, 'dPositionTable');
    // Rows no token or position touched keep their old values exactly.
    assert.deepEqual(Array.from(backend.download(dTokenTable)).slice(2 * H, 3 * H), startTokens.slice(2 * H, 3 * H));
    assert.deepEqual(Array.from(backend.download(dPositionTable)).slice(0, 2 * H), startPositions.slice(0, 2 * H));
  });

  test('validation names the op and the argument', () => {
    const args = () => ({ tokens: backend.fromArray(tokens, [B, L], 'i32'), dOut: backend.empty([B, L, H], 'f32'), mask: backend.empty([B, L, H], 'u8'), p: 0.1, dTokenTable: backend.empty([V, H], 'f32') });
    assertRejects(() => backend.embeddingBackward({ ...args(), dTokenTable: backend.empty([V, H + 1], 'f32') }), 'embeddingBackward', 'dTokenTable', ShapeError);
    assertRejects(() => backend.embeddingBackward({ ...args(), dTokenTable: backend.empty([V, H], 'bf16') }), 'embeddingBackward', 'dTokenTable', DTypeError);
    // f32 tables under 16-bit rows are allowed (they accumulate in f32); 16-bit tables under f32 rows are not.
    assert.doesNotThrow(() => backend.embeddingBackward({ ...args(), dOut: backend.empty([B, L, H], 'bf16') }));
    assertRejects(() => backend.embeddingBackward({ ...args(), p: 2 }), 'embeddingBackward', 'p', ArgumentError);
  });
});
