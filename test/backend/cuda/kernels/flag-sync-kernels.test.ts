// The kernels ported to flag release (runtime/flag-sync.ts, FUSEFORMER_FLAG_SYNC=1): whatever their shape,
// a block learns that the kernel before it is done only through FLAG_SYNC_WAIT, and every warp counts itself
// done once at every exit, after that wait — the invariant the step counter's correctness rests on.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { kernelCatalog } from '../../../../src/backend/cuda/kernels/catalog.js';
import { timelineOptions } from '../../../../src/backend/cuda/runtime/timeline.js';
import { compileAll, findNvcc } from './launch-helpers.js';

const ported = kernelCatalog().filter((e) => e.flagSync === true);

/** The kernel function's text: from its extern "C" to the end of the source. */
function kernelBody(source: string): string {
  return source.slice(source.indexOf('extern "C"'));
}

test('the decode GEMVs (16-bit, W8A8, INT4) and decode attention are ported; each ported kernel also waits programmatically', () => {
  assert.deepEqual([...new Set(ported.map((e) => e.family))].sort(), ['decode-attention', 'gemv', 'gemv-int4-mma', 'gemv-int8']);
  for (const e of ported) assert.equal(e.gridDependencyWait, true, `${e.family}/${e.name}`);
});

test('a ported kernel: FLAG_SYNC_PARAM ends its parameters, FLAG_SYNC_WAIT is its only wait and comes before any exit, FLAG_SYNC_DONE precedes every return and ends it', () => {
  for (const e of ported) {
    const body = kernelBody(e.source), what = `${e.family}/${e.name}`;
    assert.match(body, /FLAG_SYNC_PARAM\) \{/, `${what}: the launcher's arguments`);
    assert.equal(body.split('FLAG_SYNC_WAIT();').length - 1, 1, `${what}: one wait`);
    assert.doesNotMatch(body, /GRID_DEPENDENCY_WAIT(_ONE)?\(\);/, `${what}: no other wait`);
    const wait = body.indexOf('FLAG_SYNC_WAIT();');
    const returns = [...body.matchAll(/return;/g)].map((m) => m.index!);
    for (const at of returns) {
      assert.ok(at > wait, `${what}: a return before the wait (a warp must never count before it has waited)`);
      assert.match(body.slice(Math.max(0, at - 40), at), /FLAG_SYNC_DONE\(\);\s*$/, `${what}: a return without FLAG_SYNC_DONE before it`);
    }
    assert.match(body, /FLAG_SYNC_DONE\(\);\n\}\n?$/, `${what}: the end counts too`);
  }
});

const nvcc = findNvcc();
test('the ported kernels\' flag-release builds compile with nvcc (every bf16 and f16 one)', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 20 * 60_000 }, async () => {
  const sixteen = ported.filter((e) => /_(bf16|f16)_/.test(e.name));
  assert.ok(sixteen.length >= 10, `${sixteen.length} kernels`);
  assert.deepEqual(await compileAll(nvcc!, sixteen.map((e) => ({ ...e, name: `${e.family}/${e.name}` })), 2, () => ['-DFUSEFORMER_FLAG_SYNC']), []);
});

test('a ported kernel of each family also compiles as a timeline build with flag release (the stamp where the spin returns)', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 10 * 60_000 }, async () => {
  const first = ported.filter((e, i) => ported.findIndex((o) => o.family === e.family) === i);
  const names = new Map(first.map((e) => [`${e.family}/${e.name}`, e.name]));
  assert.deepEqual(await compileAll(nvcc!, first.map((e) => ({ ...e, name: `${e.family}/${e.name}` })), 2, (name) => ['-DFUSEFORMER_FLAG_SYNC', ...timelineOptions(names.get(name)!)]), []);
});
