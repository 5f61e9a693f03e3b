// The L2 evict-first hint on streamed weights (weight-stream.ts), without a GPU: the switch, the device code
// with and without the hint, every weight-streaming decode kernel using it, and both forms compiling with
// nvcc (the hinted PTX is checked by ptxas: a wrong qualifier is an error there, not at run time).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { kernelCatalog } from '../../../../src/backend/cuda/kernels/catalog.js';
import { tmaWeightLoadCode, WEIGHT_EVICT_FIRST_DEFAULT, weightEvictFirstFromEnv, WEIGHT_LOAD_COHERENT_DEFAULT, WEIGHT_LOAD_FAMILIES, weightLoadCoherentFromEnv, weightLoadCode, weightStreamOptions } from '../../../../src/backend/cuda/kernels/weight-stream.js';
import { BULK_COPY_LIB, SMEM_ADDRESS_CODE, TENSOR_MAP_LIB } from '../../../../src/backend/cuda/kernels/bulk-copy-lib.js';
import { DEVICE_LIB } from '../../../../src/backend/cuda/kernels/device-lib.js';
import { compileAll, findNvcc } from './launch-helpers.js';

test('FUSEFORMER_WEIGHT_EVICT_FIRST: 1 on, 0 off, unset the default, anything else an error naming it', () => {
  assert.equal(weightEvictFirstFromEnv({ FUSEFORMER_WEIGHT_EVICT_FIRST: '1' }), true);
  assert.equal(weightEvictFirstFromEnv({ FUSEFORMER_WEIGHT_EVICT_FIRST: '0' }), false);
  assert.equal(weightEvictFirstFromEnv({}), WEIGHT_EVICT_FIRST_DEFAULT);
  assert.throws(() => weightEvictFirstFromEnv({ FUSEFORMER_WEIGHT_EVICT_FIRST: 'yes' }), /FUSEFORMER_WEIGHT_EVICT_FIRST must be 0 or 1, got 'yes'/);
});

test('the weight load: past L1 either way; the L2 policy and its cache hint only with the hint', () => {
  const saved = { ...weightStreamOptions };
  weightStreamOptions.coherent = new Set(); // the read-only path in every family
  try {
    const hinted = weightLoadCode('load_w', 'T', 'gemv', { hint: true });
    assert.match(hinted, /createpolicy\.fractional\.L2::evict_first\.b64/);
    assert.match(hinted, /ld\.global\.nc\.L1::no_allocate\.L2::cache_hint\.v4\.u32 \{%0, %1, %2, %3\}, \[%4\], %5;/);
    assert.match(hinted, /uint4 load_w\(const T\* p\)/);
    const plain = weightLoadCode('load_w', 'signed char', 'int8', { hint: false });
    assert.doesNotMatch(plain, /cache_hint|createpolicy/);
    assert.match(plain, /ld\.global\.nc\.L1::no_allocate\.v4\.u32/);
    assert.match(plain, /uint4 load_w\(const signed char\* p\)/);
    assert.match(weightLoadCode('f', 'u32', 'int4', { hint: true, volatile: false }), /\n {2}asm\("ld\.global/, 'a non-volatile load stays non-volatile');
    assert.match(tmaWeightLoadCode(true), /cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes\.L2::cache_hint/);
    assert.doesNotMatch(tmaWeightLoadCode(false), /cache_hint/);
  } finally {
    Object.assign(weightStreamOptions, saved);
  }
});

test('FUSEFORMER_WEIGHT_LOAD_COHERENT: 1 every family, 0 none, a list some; unset the default families; a family on leaves out .nc, hinted or not', () => {
  assert.deepEqual([...weightLoadCoherentFromEnv({})], [...WEIGHT_LOAD_COHERENT_DEFAULT]);
  assert.deepEqual([...weightLoadCoherentFromEnv({ FUSEFORMER_WEIGHT_LOAD_COHERENT: '1' })], [...WEIGHT_LOAD_FAMILIES]);
  assert.deepEqual([...weightLoadCoherentFromEnv({ FUSEFORMER_WEIGHT_LOAD_COHERENT: '0' })], []);
  assert.deepEqual([...weightLoadCoherentFromEnv({ FUSEFORMER_WEIGHT_LOAD_COHERENT: 'gemv, int8' })], ['gemv', 'int8']);
  assert.throws(() => weightLoadCoherentFromEnv({ FUSEFORMER_WEIGHT_LOAD_COHERENT: 'true' }), /FUSEFORMER_WEIGHT_LOAD_COHERENT must be 0, 1 or a comma list of gemv, norm-gemv, .*'true' is none of them/);
  assert.throws(() => weightLoadCoherentFromEnv({ FUSEFORMER_WEIGHT_LOAD_COHERENT: 'gemv,bf16' }), /'bf16' is none of them/);
  const saved = { ...weightStreamOptions };
  try {
    Object.assign(weightStreamOptions, { evictFirst: false, coherent: new Set(['gemv']) });
    assert.match(weightLoadCode('load_w', 'T', 'gemv'), /"ld\.global\.L1::no_allocate\.v4\.u32 \{%0, %1, %2, %3\}, \[%4\];"/);
    assert.match(weightLoadCode('load_w', 'T', 'gemv', { hint: true }), /"ld\.global\.L1::no_allocate\.L2::cache_hint\.v4\.u32/);
    assert.match(weightLoadCode('load_w', 'T', 'int4'), /"ld\.global\.nc\.L1::no_allocate\.v4\.u32/, 'a family not listed keeps .nc');
    Object.assign(weightStreamOptions, { coherent: new Set() });
    assert.match(weightLoadCode('load_w', 'T', 'gemv'), /"ld\.global\.nc\.L1::no_allocate\.v4\.u32/);
  } finally {
    Object.assign(weightStreamOptions, saved);
  }
});

test('each catalogued decode GEMV (16-bit, W8A8, INT4 mma) lets its dependents launch once, after its main loop, not right after its wait', () => {
  const kernels = kernelCatalog().filter((e) => ['gemv', 'gemv-int8', 'gemv-int4-mma'].includes(e.family));
  assert.ok(kernels.length >= 10, `${kernels.length} GEMV kernels in the catalog`);
  const afterWait = (source: string) => source.slice(source.indexOf('GRID_DEPENDENCY_WAIT();')).split('\n').slice(1, 2).join('');
  for (const e of kernels) {
    assert.equal(e.source.match(/GRID_DEPENDENCY_TRIGGER\(\);/g)?.length, 1, `${e.name}: one trigger`);
    assert.doesNotMatch(afterWait(e.source), /GRID_DEPENDENCY_TRIGGER/, `${e.name}: not right after the wait`);
  }
});

// quant-int4's family also holds the prefill GEMM (its weights re-read by every row tile): its GEMV only.
const STREAMING = new Set(['gemv', 'gemv-mma', 'gemv-int8', 'gemv-int4-mma', 'quant-int4', 'gemm-stream']);
function streamingKernels(on: boolean) {
  const saved = weightStreamOptions.evictFirst;
  weightStreamOptions.evictFirst = on;
  try {
    return kernelCatalog().filter((e) => STREAMING.has(e.family) && (e.family !== 'quant-int4' || e.name.startsWith('int4_gemv')));
  } finally {
    weightStreamOptions.evictFirst = saved;
  }
}

test('with the hint every weight-streaming decode kernel loads its weights through it (x keeps the plain copy); without it none does', () => {
  const hinted = streamingKernels(true);
  assert.deepEqual(new Set(hinted.map((e) => e.family)), STREAMING);
  for (const e of hinted) {
    assert.match(e.source, /L2::cache_hint/, `${e.family}/${e.name}`);
    if (e.family === 'gemm-stream') {
      assert.doesNotMatch(e.source, /tma_load_2d\(.*&wmap/, `${e.family}/${e.name}: a weight box copied without the hint`);
      assert.match(e.source, /tma_load_2d\(.*&xmap/, `${e.family}/${e.name}: x boxes keep the plain copy`);
    }
  }
  for (const e of streamingKernels(false)) assert.doesNotMatch(e.source, /cache_hint|createpolicy/, `${e.family}/${e.name}`);
  assert.equal(weightStreamOptions.evictFirst, weightEvictFirstFromEnv(), 'the setting is restored');
});

const nvcc = findNvcc();
test('both forms of both loads, and the coherent forms, compile with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 10 * 60_000 }, async () => {
  const source = (hint: boolean) => String.raw`${DEVICE_LIB}
${SMEM_ADDRESS_CODE}
constexpr unsigned long long BARRIER_TIMEOUT_NS = 2000000000ull;
${BULK_COPY_LIB}
${TENSOR_MAP_LIB}
${tmaWeightLoadCode(hint)}
${weightLoadCode('load_w', 'u32', 'gemv', { hint })}
${weightLoadCode('load_w_nv', 'u32', 'gemv', { hint, volatile: false })}
extern "C" __global__ void weight_stream_${hint ? 'hint' : 'plain'}(const __grid_constant__ TensorMap wmap, const u32* w, uint4* out) {
  __shared__ alignas(128) unsigned char box[4096];
  __shared__ u64 bar;
  if (threadIdx.x == 0) { mbar_init(&bar); mbar_expect(&bar, 4096); tma_load_2d_weight(box, &wmap, 0, 0, &bar); mbar_wait(&bar, 0); }
  __syncthreads();
  const uint4 a = load_w(w + 4 * threadIdx.x), b = load_w_nv(w + 4 * (threadIdx.x + 32));
  out[threadIdx.x] = make_uint4(a.x ^ b.x ^ box[threadIdx.x], a.y ^ b.y, a.z ^ b.z, a.w ^ b.w);
}`;
  const saved = { ...weightStreamOptions };
  const formSource = (name: string, options: Partial<typeof weightStreamOptions>) => {
    try {
      Object.assign(weightStreamOptions, { evictFirst: false, coherent: new Set(), ...options });
      return { name, source: String.raw`${DEVICE_LIB}
${weightLoadCode('load_w', 'u32', 'gemv')}
extern "C" __global__ void ${name}(const u32* w, uint4* out) { out[threadIdx.x] = load_w(w + 4 * threadIdx.x); }` };
    } finally {
      Object.assign(weightStreamOptions, saved);
    }
  };
  const sources = [...[true, false].map((hint) => ({ name: `weight_stream_${hint}`, source: source(hint) })),
    formSource('weight_stream_coherent', { coherent: new Set(['gemv']) }), formSource('weight_stream_coherent_hint', { coherent: new Set(['gemv']), evictFirst: true })];
  const failures = await compileAll(nvcc!, sources, 2);
  assert.deepEqual(failures, []);
});

test('the hinted form of each weight-streaming family compiles with nvcc (the catalog test compiles the default form)', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 20 * 60_000 }, async () => {
  const firstOfFamily = new Map<string, { name: string; source: string }>();
  for (const e of streamingKernels(true)) if (!firstOfFamily.has(e.family)) firstOfFamily.set(e.family, { name: `${e.family}/${e.name}`, source: e.source });
  assert.deepEqual(await compileAll(nvcc!, [...firstOfFamily.values()], 2), []);
});
