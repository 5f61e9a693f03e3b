// decodeFloats and widenHalvesInPlace (the host side of every 16-bit download) against the scalar
// converters, for every bit pattern, from aligned and unaligned byte views.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bf16BitsToF32, decodeFloats, encodeFloats, f16BitsToF32, widenHalvesInPlace } from '../../src/dtype.js';
import { ArgumentError } from '../../src/errors.js';

const everyPattern = (): Uint8Array => {
  const halves = new Uint16Array(65536);
  for (let h = 0; h < 65536; h++) halves[h] = h;
  return new Uint8Array(halves.buffer);
};

const sameValue = (a: number, b: number) => (Number.isNaN(a) ? Number.isNaN(b) : Object.is(a, b));

for (const [dtype, scalar] of [['bf16', bf16BitsToF32], ['f16', f16BitsToF32]] as const) {
  test(`decodeFloats ${dtype}: every bit pattern equals the scalar converter (NaN stays NaN, −0 stays −0)`, () => {
    const out = decodeFloats(everyPattern(), dtype);
    assert.equal(out.length, 65536);
    const wrong: string[] = [];
    for (let h = 0; h < 65536 && wrong.length < 5; h++) {
      if (!sameValue(out[h]!, Math.fround(scalar(h)))) wrong.push(`0x${h.toString(16)}: ${out[h]} vs ${scalar(h)}`);
    }
    assert.deepEqual(wrong, []);
  });

  test(`decodeFloats ${dtype}: a view at an odd byte offset decodes like an aligned copy; odd lengths are refused`, () => {
    const values = [1.5, -2.25, 65504, 3.140625, -0.0, 1e-3];
    const encoded = encodeFloats(values, dtype);
    const shifted = new Uint8Array(encoded.length + 1);
    shifted.set(encoded, 1);
    const view = shifted.subarray(1);
    assert.deepEqual(Array.from(decodeFloats(view, dtype)), Array.from(decodeFloats(encoded.slice(), dtype)));
    // A view into a larger buffer decodes only its own bytes.
    const inner = new Uint8Array(encoded.length + 4);
    inner.set(encoded, 2);
    assert.deepEqual(Array.from(decodeFloats(inner.subarray(2, 2 + encoded.length), dtype)), Array.from(decodeFloats(encoded, dtype)));
    assert.throws(() => decodeFloats(encoded.subarray(0, 3), dtype), (e: unknown) => e instanceof ArgumentError && /3 bytes is not a whole number of/.test((e as Error).message));
  });
}

for (const dtype of ['bf16', 'f16'] as const) {
  test(`widenHalvesInPlace ${dtype}: every bit pattern, in the buffer the halves arrived in, equals decodeFloats`, () => {
    const n = 65536, buffer = new ArrayBuffer(4 * n);
    new Uint8Array(buffer).fill(0xa5, 2 * n);  // the upper half holds garbage, as after a download
    new Uint8Array(buffer, 0, 2 * n).set(everyPattern());
    const out = widenHalvesInPlace(buffer, n, dtype), expected = decodeFloats(everyPattern(), dtype);
    assert.equal(out.buffer, buffer);
    assert.equal(out.length, n);
    let wrong = 0;
    for (let h = 0; h < n; h++) if (!sameValue(out[h]!, expected[h]!)) wrong++;
    assert.equal(wrong, 0);
    // Small counts (the overlap at the start) and zero.
    for (const m of [0, 1, 2, 3, 7]) {
      const b = new ArrayBuffer(4 * m), values = [1.5, -2, 0.25, 3, -0.5, 8, 100].slice(0, m);
      new Uint8Array(b, 0, 2 * m).set(encodeFloats(values, dtype));
      assert.deepEqual(Array.from(widenHalvesInPlace(b, m, dtype)), values);
    }
    assert.throws(() => widenHalvesInPlace(new ArrayBuffer(6), 2, dtype), /2 values need a 8-byte buffer, got 6/);
  });
}
