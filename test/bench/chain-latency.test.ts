// bench/chain-latency.ts: the chain kernels' synchronisation as each mode states it, and that they compile.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CHAIN_MODES, chainKernelSource, chainResetSource, formatChainTable, weightVectorsPerThread } from '../../bench/chain-latency.js';
import { compiledSource } from '../../src/backend/cuda/runtime/kernel.js';
import { compileAll, findNvcc } from '../backend/cuda/kernels/launch-helpers.js';

/** The body of a kernel source: what follows its signature. */
const body = (mode: (typeof CHAIN_MODES)[number]) => {
  const s = chainKernelSource(mode).source;
  return s.slice(s.indexOf('extern "C"'));
};

test('each chain mode learns that the kernel before it is done its own way; the trigger where the mode says', () => {
  assert.equal(chainKernelSource('stream').gridDependencyWait, false, 'stream: ordinary launches');
  assert.doesNotMatch(body('stream'), /GRID_DEPENDENCY|acquire|release/);
  for (const mode of ['pdl', 'pdl-early', 'flag', 'flag-early'] as const) assert.equal(chainKernelSource(mode).gridDependencyWait, true, `${mode}: launched programmatically`);
  const pdl = body('pdl'), early = body('pdl-early');
  assert.ok(pdl.indexOf('GRID_DEPENDENCY_WAIT()') < pdl.indexOf('in[') && pdl.indexOf('in[') < pdl.indexOf('GRID_DEPENDENCY_TRIGGER()'), 'pdl: wait, read, then trigger');
  assert.ok(early.indexOf('GRID_DEPENDENCY_WAIT()') < early.indexOf('GRID_DEPENDENCY_TRIGGER()') && early.indexOf('GRID_DEPENDENCY_TRIGGER()') < early.indexOf('in['), 'pdl-early: trigger right after the wait');
  for (const mode of ['flag', 'flag-early'] as const) {
    const s = body(mode);
    assert.doesNotMatch(s, /GRID_DEPENDENCY_WAIT/, `${mode}: no grid-dependency wait`);
    assert.ok(s.indexOf('ld.acquire.gpu') < s.indexOf('in['), `${mode}: the acquire spin before the read`);
    assert.ok(s.indexOf('out[blockIdx.x]') < s.indexOf('red.release.gpu'), `${mode}: the write before the release count`);
    const trigger = s.indexOf('GRID_DEPENDENCY_TRIGGER()');
    assert.ok(mode === 'flag' ? trigger > s.indexOf('ld.acquire.gpu') : trigger < s.indexOf('ld.acquire.gpu'), `${mode}: trigger ${mode === 'flag' ? 'after' : 'before'} the spin`);
  }
  assert.equal(new Set(CHAIN_MODES.map((m) => chainKernelSource(m).name)).size, CHAIN_MODES.length, 'one kernel name a mode');
});

test('with weights, every mode issues its weight loads (coherent, past L1) before it learns the previous kernel is done, and keeps them alive', () => {
  for (const mode of CHAIN_MODES) {
    const full = chainKernelSource(mode, 9).source, s = full.slice(full.indexOf('extern "C"'));
    assert.match(chainKernelSource(mode, 9).name, /_w9$/);
    const load = s.indexOf('ld.global.L1::no_allocate.v4.u32'), sync = Math.max(s.indexOf('GRID_DEPENDENCY_WAIT()'), s.indexOf('ld.acquire.gpu'));
    assert.ok(load > 0, `${mode}: weight loads`);
    if (mode !== 'stream') assert.ok(load < sync, `${mode}: the weights before the wait or the spin`);
    assert.match(s, /uint4 wv\[9\]/);
    assert.match(s, /sink\[blockIdx\.x\] = acc/, 'the loads feed a store the compiler cannot drop');
  }
  assert.doesNotMatch(chainKernelSource('pdl').source, /wv\[/, 'none without weights');
});

test('weight vectors a thread: the bytes over blocks × 256 threads × 16 bytes, rounded up; the table marks skipped and stale rows', () => {
  assert.equal(weightVectorsPerThread(0, 132), 0);
  assert.equal(weightVectorsPerThread(1_200_000, 132), 3);
  assert.equal(weightVectorsPerThread(4_700_000, 132), 9);
  assert.equal(weightVectorsPerThread(4_700_000, 1), 1148);
  const rows = [
    { mode: 'pdl' as const, blocks: 132, bytes: 0, usPerKernel: 2.5, check: 'ok' },
    { mode: 'flag' as const, blocks: 132, bytes: 0, usPerKernel: 1.25, check: '3 of 132 blocks wrong' },
    { mode: 'pdl' as const, blocks: 132, bytes: 9 * 132 * 256 * 16, usPerKernel: 3.5, check: 'ok' },
  ];
  const table = formatChainTable(rows, ['pdl', 'flag'], [1, 132], [0, 4_700_000]);
  assert.match(table, /no weights:\n\| mode \| 1 blocks \| 132 blocks \|/);
  assert.match(table, /\| pdl \| — \| 2\.50 \|/);
  assert.match(table, /\| flag \| — \| 1\.25 \(wrong\) \|/);
  assert.match(table, /4\.7 MB of weights a kernel:[\s\S]*\| pdl \| — \| 3\.50 \|/);
});

const nvcc = findNvcc();
test('the chain kernels and the reset compile with nvcc -arch=sm_90 (as the runtime compiles them)', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 10 * 60_000 }, async () => {
  const sources = [...CHAIN_MODES.flatMap((m) => [chainKernelSource(m), chainKernelSource(m, 32)]), chainResetSource()].map((k) => ({ ...k, source: compiledSource(k) }));
  assert.deepEqual(await compileAll(nvcc!, sources, 2), []);
});
