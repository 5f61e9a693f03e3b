import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { BiasDropoutResidualArgs } from '../../../src/backend/backend.js';
import { CpuBackend } from '../../../src/backend/cpu/index.js';
import { ArgumentError } from '../../../src/errors.js';

test('captured ops do not run at capture and run on every replay, reading current inputs', () => {
  const backend = new CpuBackend();
  const x = backend.fromArray([1, 2, 3], [1, 3], 'f32');
  const bias = backend.fromArray([10, 20, 30], [3], 'f32');
  const residual = backend.fromArray([0.5, 0.5, 0.5], [1, 3], 'f32');
  const out = backend.empty([1, 3], 'f32');
  const mask = backend.empty([1, 3], 'u8');
  const doubled = backend.empty([1, 3], 'f32');
  let jsRuns = 0;
  const graph = backend.captureGraph(() => {
    jsRuns++;
    backend.biasDropoutResidual({ input: x, bias, residual, out, mask, p: 0, seed: 1n, offset: 0n });
    backend.gemm({ a: out, b: backend.fromArray([2, 0, 0, 0, 2, 0, 0, 0, 2], [3, 3], 'f32'), out: doubled });
  });
  assert.equal(jsRuns, 1);
  assert.deepEqual(Array.from(backend.download(out)), [0, 0, 0], 'nothing runs until replay');

  graph.replay();
  assert.deepEqual(Array.from(backend.download(out)), [11.5, 22.5, 33.5]);
  assert.deepEqual(Array.from(backend.download(doubled)), [23, 45, 67]);

  backend.upload(x, [-10, -20, -30]);
  graph.replay();
  assert.deepEqual(Array.from(backend.download(out)), [0.5, 0.5, 0.5]);
  assert.deepEqual(Array.from(backend.download(doubled)), [1, 1, 1]);
  assert.equal(jsRuns, 1, 'the closure itself ran once, at capture');
});

test('scalar arguments are frozen at capture, as in a CUDA graph', () => {
  const backend = new CpuBackend();
  const n = 64;
  const input = backend.fromArray(new Array<number>(n).fill(1), [1, n], 'f32');
  const bias = backend.empty([n], 'f32');
  const residual = backend.empty([1, n], 'f32');
  const out = backend.empty([1, n], 'f32');
  const mask = backend.empty([1, n], 'u8');
  const args: BiasDropoutResidualArgs = { input, bias, residual, out, mask, p: 0.5, seed: 7n, offset: 0n };
  const graph = backend.captureGraph(() => backend.biasDropoutResidual(args));
  graph.replay();
  const first = Array.from(backend.download(mask));
  args.offset = 1000n;
  args.p = 0;
  graph.replay();
  assert.deepEqual(Array.from(backend.download(mask)), first);
  assert.ok(first.includes(0), 'p = 0.5 was used, not the later p = 0');
});

test('download and synchronize are refused during capture; errors in fn still end the capture', () => {
  const backend = new CpuBackend();
  const t = backend.empty([2], 'f32');
  assert.throws(() => backend.captureGraph(() => backend.download(t)), /download: not allowed during graph capture/);
  assert.throws(() => backend.captureGraph(() => backend.synchronize()), /synchronize: not allowed during graph capture/);
  backend.fill(t, 3); // capture has ended: this runs at once
  assert.deepEqual(Array.from(backend.download(t)), [3, 3]);
});

test('validation errors surface at capture time, not at replay', () => {
  const backend = new CpuBackend();
  const t = backend.empty([2], 'f32');
  assert.throws(() => backend.captureGraph(() => backend.softmaxForward({ x: t, out: t })), /softmaxForward: 'x' has shape \[2\]/);
});

test('replaying a disposed graph, or one whose tensor was freed, is an error', () => {
  const backend = new CpuBackend();
  const t = backend.empty([2], 'f32');
  const graph = backend.captureGraph(() => backend.fill(t, 1));
  graph.replay();
  backend.free(t);
  assert.throws(() => graph.replay(), (e: unknown) => e instanceof ArgumentError && /'t' of fill was freed after capture/.test(e.message));
  graph.dispose();
  assert.throws(() => graph.replay(), /disposed/);
});

test('a graph replayed inside another capture becomes part of the outer graph', () => {
  const backend = new CpuBackend();
  const t = backend.fromArray([1], [1, 1], 'f32');
  const scratch = backend.empty([1, 1], 'f32');
  const two = backend.fromArray([2], [1, 1], 'f32');
  const double = backend.captureGraph(() => {
    backend.copy(t, scratch);
    backend.gemm({ a: scratch, b: two, out: t });
  });
  const quadruple = backend.captureGraph(() => { double.replay(); double.replay(); });
  assert.deepEqual(Array.from(backend.download(t)), [1]);
  quadruple.replay();
  assert.deepEqual(Array.from(backend.download(t)), [4]);
});
