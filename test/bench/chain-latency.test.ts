// bench/chain-latency.ts: the chain kernels' synchronisation as each mode states it, and that they compile.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CHAIN_MODES, chainKernelSource, chainResetSource } from '../../bench/chain-latency.js';
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

const nvcc = findNvcc();
test('the chain kernels and the reset compile with nvcc -arch=sm_90 (as the runtime compiles them)', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 10 * 60_000 }, async () => {
  const sources = [...CHAIN_MODES.map((m) => chainKernelSource(m)), chainResetSource()].map((k) => ({ ...k, source: compiledSource(k) }));
  assert.deepEqual(await compileAll(nvcc!, sources, 2), []);
});
