import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { encodeFloats } from '../../src/dtype.js';
import { parseHeader, SafetensorsError, SafetensorsReader, writeSafetensors } from '../../src/io/safetensors.js';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-safetensors-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A file built byte by byte, independently of writeSafetensors. */
function handMade(name: string, header: object | string, data: Uint8Array, lengthOverride?: bigint): string {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header));
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(lengthOverride ?? BigInt(json.length));
  const path = join(dir, name);
  writeFileSync(path, Buffer.concat([length, json, data]));
  return path;
}

test('reads a hand-made file: dtypes, shapes, bytes and metadata', () => {
  const w = encodeFloats([1, -2, 3.5, 0.25, 8, 9], 'f32');
  const b = encodeFloats([0.5, -1.5], 'bf16');
  const path = handMade('hand.safetensors', {
    __metadata__: { format: 'pt' },
    'h.0.w': { dtype: 'F32', shape: [2, 3], data_offsets: [0, 24] },
    'h.0.b': { dtype: 'BF16', shape: [2], data_offsets: [24, 28] },
  }, new Uint8Array([...w, ...b]));
  const r = SafetensorsReader.open(path);
  try {
    assert.deepEqual(r.metadata, { format: 'pt' });
    assert.deepEqual(r.tensors.map((t) => t.name), ['h.0.w', 'h.0.b']);
    const wt = r.read('h.0.w');
    assert.equal(wt.dtype, 'F32');
    assert.deepEqual(wt.shape, [2, 3]);
    assert.deepEqual([...new Float32Array(wt.bytes.slice().buffer)], [1, -2, 3.5, 0.25, 8, 9]);
    assert.deepEqual([...r.read('h.0.b').bytes], [...b]);
    assert.throws(() => r.read('missing'), /no tensor named 'missing'/);
  } finally {
    r.close();
  }
});

test('writeSafetensors round-trips, aligns the data to 8 bytes, and leaves no temporary file', () => {
  const path = join(dir, 'round.safetensors');
  const tensors = [
    { name: 'a', dtype: 'F16' as const, shape: [3], bytes: encodeFloats([1, 2, 3], 'f16') },
    { name: 'empty', dtype: 'F32' as const, shape: [0, 4], bytes: new Uint8Array(0) },
    { name: 'ids', dtype: 'I32' as const, shape: [2], bytes: new Uint8Array(new Int32Array([7, -1]).buffer) },
  ];
  writeSafetensors(path, tensors, { step: '12' });
  const raw = readFileSync(path);
  assert.equal(Number(raw.readBigUInt64LE(0)) % 8, 0);
  const r = SafetensorsReader.open(path);
  try {
    assert.deepEqual(r.metadata, { step: '12' });
    for (const t of tensors) {
      const got = r.read(t.name);
      assert.deepEqual([got.dtype, [...got.shape], [...got.bytes]], [t.dtype, t.shape, [...t.bytes]]);
    }
  } finally {
    r.close();
  }
  assert.deepEqual(readdirSync(dir).filter((f) => f.includes('.tmp-')), []);
});

test('a failed write keeps the existing file intact', () => {
  const path = join(dir, 'keep.safetensors');
  writeSafetensors(path, [{ name: 'x', dtype: 'U8', shape: [2], bytes: new Uint8Array([1, 2]) }]);
  const before = readFileSync(path);
  assert.throws(() => writeSafetensors(path, [{ name: 'x', dtype: 'F32', shape: [2], bytes: new Uint8Array(3) }]), /needs 8 bytes, got 3/);
  assert.deepEqual(readFileSync(path), before);
});

test('malformed files are errors naming the file and the problem', () => {
  const cases: [string, () => string, RegExp][] = [
    ['short', () => { const p = join(dir, 'short'); writeFileSync(p, Buffer.from([1, 2, 3])); return p; }, /too short/],
    ['huge header length', () => handMade('huge', '{}', new Uint8Array(0), 1n << 40n), /exceeds the .* limit/],
    ['header past the end', () => handMade('past', '{}', new Uint8Array(0), 1000n), /runs past the end/],
    ['bad JSON', () => handMade('json', '{"a": ', new Uint8Array(0)), /not valid JSON/],
    ['array header', () => handMade('array', '[]', new Uint8Array(0)), /must be a JSON object/],
    ['unknown dtype', () => handMade('dtype', { a: { dtype: 'F17', shape: [1], data_offsets: [0, 4] } }, new Uint8Array(4)), /unknown dtype "F17"/],
    ['negative shape', () => handMade('neg', { a: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, new Uint8Array(4)), /non-negative integers/],
    ['size mismatch', () => handMade('size', { a: { dtype: 'F32', shape: [2], data_offsets: [0, 4] } }, new Uint8Array(4)), /needs 8 bytes but data_offsets span 4/],
    ['out of bounds', () => handMade('oob', { a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] } }, new Uint8Array(8)), /only 8 bytes of data/],
    ['overlap', () => handMade('overlap', { a: { dtype: 'U8', shape: [4], data_offsets: [0, 4] }, b: { dtype: 'U8', shape: [2], data_offsets: [2, 4] } }, new Uint8Array(4)), /overlaps/],
    ['gap', () => handMade('gap', { a: { dtype: 'U8', shape: [2], data_offsets: [2, 4] } }, new Uint8Array(4)), /unused bytes before tensor 'a'/],
    ['trailing bytes', () => handMade('trail', { a: { dtype: 'U8', shape: [2], data_offsets: [0, 2] } }, new Uint8Array(5)), /3 bytes of data after the last tensor/],
    ['metadata not strings', () => handMade('meta', { __metadata__: { a: 1 } }, new Uint8Array(0)), /'__metadata__.a' must be a string/],
    ['missing file', () => join(dir, 'does-not-exist.safetensors'), /cannot open \(ENOENT\)/],
  ];
  for (const [what, make, message] of cases) {
    const path = make();
    assert.throws(() => SafetensorsReader.open(path), (e: Error) => {
      assert.ok(e instanceof SafetensorsError, `${what}: expected SafetensorsError, got ${e.name}: ${e.message}`);
      assert.match(e.message, message, what);
      assert.ok(e.message.startsWith(path), `${what}: message does not name the file: ${e.message}`);
      return true;
    });
  }
});

test('random corruption of a valid file never crashes: it loads or raises SafetensorsError', () => {
  const path = join(dir, 'fuzz-base.safetensors');
  writeSafetensors(path, [
    { name: 'w', dtype: 'F32', shape: [3, 2], bytes: encodeFloats([1, 2, 3, 4, 5, 6], 'f32') },
    { name: 'b', dtype: 'BF16', shape: [2], bytes: encodeFloats([1, 2], 'bf16') },
  ]);
  const original = readFileSync(path);
  let seed = 12345;
  const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
  for (let trial = 0; trial < 300; trial++) {
    const bytes = Buffer.from(original);
    const flips = 1 + (next() % 4);
    for (let f = 0; f < flips; f++) bytes[next() % Math.min(bytes.length, 120)] = next() & 0xff;
    const cut = trial % 5 === 0 ? next() % bytes.length : bytes.length;
    const fuzzed = join(dir, 'fuzz.safetensors');
    writeFileSync(fuzzed, bytes.subarray(0, cut));
    try {
      const r = SafetensorsReader.open(fuzzed);
      for (const t of r.tensors) assert.equal(r.read(t.name).bytes.length, t.end - t.begin);
      r.close();
    } catch (error) {
      assert.ok(error instanceof SafetensorsError, `trial ${trial}: ${(error as Error).name}: ${(error as Error).message}`);
    }
  }
});

test('parseHeader is usable on its own', () => {
  const { tensors } = parseHeader('{"x":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}', 16, 'mem');
  assert.deepEqual(tensors, [{ name: 'x', dtype: 'I64', shape: [2], begin: 0, end: 16 }]);
});
