// tanhActivation on the CPU reference: tanh(x + bias) per element, with and without the bias, in place,
// rounded to the tensor's dtype; bad arguments rejected naming the op and the argument.

import { test } from 'node:test';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { roundToDType } from '../../../src/dtype.js';
import { assertClose, assertRejects, randomValues } from './helpers.js';

const backend = new CpuBackend();
const read = (t: ReturnType<typeof backend.empty>) => Array.from(backend.download(t));

test('tanhActivation computes tanh(x + bias) per element, also in place', () => {
  const [rows, H] = [3, 5];
  const x = randomValues(21, rows * H, -4, 4), bias = randomValues(22, H);
  const out = backend.empty([rows, H], 'f32');
  backend.tanhActivation({ x: backend.fromArray(x, [rows, H], 'f32'), bias: backend.fromArray(bias, [H], 'f32'), out });
  assertClose(read(out), x.map((v, i) => Math.tanh(v + bias[i % H]!)), 1e-7);
  const inPlace = backend.fromArray(x, [rows, H], 'f32');
  backend.tanhActivation({ x: inPlace, out: inPlace });
  assertClose(read(inPlace), x.map(Math.tanh), 1e-7, 'without bias, in place');
});

test('tanhActivation rounds once to bf16', () => {
  const x = randomValues(23, 2 * 8, -2, 2).map((v) => roundToDType(v, 'bf16'));
  const out = backend.empty([2, 8], 'bf16');
  backend.tanhActivation({ x: backend.fromArray(x, [2, 8], 'bf16'), out });
  assertClose(read(out), x.map((v) => roundToDType(Math.tanh(v), 'bf16')), 0);
});

test('tanhActivation rejects mismatched shapes and dtypes', () => {
  const x = backend.empty([2, 4], 'f32');
  assertRejects(() => backend.tanhActivation({ x, out: backend.empty([2, 3], 'f32') }), 'tanhActivation', 'out');
  assertRejects(() => backend.tanhActivation({ x, bias: backend.empty([3], 'f32'), out: backend.empty([2, 4], 'f32') }), 'tanhActivation', 'bias');
  assertRejects(() => backend.tanhActivation({ x, out: backend.empty([2, 4], 'bf16') }), 'tanhActivation', 'out');
  assertRejects(() => backend.tanhActivation({ x: backend.empty([2, 4], 'i32'), out: backend.empty([2, 4], 'i32') }), 'tanhActivation', 'x');
});
