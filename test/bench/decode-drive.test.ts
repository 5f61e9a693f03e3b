// bench/decode-drive.ts's command line (the run itself needs a GPU).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { driveOptions } from '../../bench/decode-drive.js';

test('decode-drive: defaults, flags, and bad values named by their flag', () => {
  assert.deepEqual(driveOptions([]), { model: 'llama', batch: 1, precision: 'bf16', steps: 4 });
  assert.deepEqual(driveOptions(['--model', 'gpt2', '--batch', '32', '--quant', 'int4-head', '--steps', '2']), { model: 'gpt2', batch: 32, precision: 'int4-head', steps: 2 });
  assert.throws(() => driveOptions(['--model', 'bert']), /--model: 'bert' is not one of gpt2, llama/);
  assert.throws(() => driveOptions(['--quant', 'fp8']), /--quant: 'fp8' is not one of bf16, int4, int8, int4-head, int8-head/);
  assert.throws(() => driveOptions(['--batch', '0']), /--batch: a positive integer, got '0'/);
  assert.throws(() => driveOptions(['--steps', '1.5']), /--steps: a positive integer, got '1.5'/);
});
