// Compiles every catalogued kernel with nvcc for sm_90 (CI has nvcc but no GPU), so a generator that
// emits invalid CUDA C fails here and never reaches a GPU. Skips with a reason where nvcc is missing.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { kernelCatalog } from '../../../../src/backend/cuda/kernels/catalog.js';
import { compiledSource } from '../../../../src/backend/cuda/runtime/kernel.js';
import { timelineOptions } from '../../../../src/backend/cuda/runtime/timeline.js';
import { compileAll, findNvcc } from './launch-helpers.js';

const nvcc = findNvcc();
const run = promisify(execFile);

test('the catalog lists every family with unique kernel sources', () => {
  const entries = kernelCatalog();
  const families = new Set(entries.map((e) => e.family));
  assert.deepEqual([...families].sort(), ['adam', 'attention', 'beam-attention', 'beam-topk', 'cross-entropy', 'decode-advance', 'decode-attention', 'dropout', 'elementwise', 'embed-tokens', 'embedding', 'feed-tokens', 'fill-copy', 'flash-backward', 'flash-backward-wgmma', 'flash-forward', 'flash-forward-wgmma', 'gated-activation', 'gather-columns', 'gemm-skinny', 'gemm-stream', 'gemv', 'gemv-int4-mma', 'gemv-int8', 'gemv-mlp', 'gemv-mma', 'gptq-round-block', 'int4-clip-groups', 'layernorm', 'mask-logits', 'permute', 'qkv-rope-append', 'quant-int4', 'quant-int8', 'random', 'residual-norm', 'sample-tokens', 'scale-columns', 'softmax', 'sum-squares', 'tanh-activation', 'vocab-shard']);
  const sources = new Set(entries.map((e) => e.source));
  assert.equal(sources.size, entries.length, 'two catalog entries generate identical source');
  for (const e of entries) assert.match(e.source, new RegExp(`extern "C" __global__ void\\b[^;{]*\\b${e.name}\\(`), `${e.family}: kernel '${e.name}' not defined in its source`);
});

test('no kernel tests a constexpr constant with the preprocessor (#if NAME would read it as 0)', () => {
  for (const e of kernelCatalog()) {
    const constexprs = new Set([...e.source.matchAll(/constexpr (?:int|bool) ([A-Za-z_]\w*) =/g)].map((m) => m[1]!));
    for (const m of e.source.matchAll(/^\s*#\s*(?:if|elif)\b(.*)$/gm)) {
      const names = [...m[1]!.matchAll(/[A-Za-z_]\w*/g)].map((n) => n[0]).filter((n) => constexprs.has(n));
      assert.deepEqual(names, [], `${e.family}/${e.name}: '#${m[0]!.trim().slice(1)}' tests constexpr ${names.join(', ')}`);
    }
  }
});

test('every catalogued kernel compiles with nvcc -arch=sm_90 (sm_90a where it uses wgmma)', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 60 * 60_000 }, async () => {
  const entries = kernelCatalog();
  const failures = await compileAll(nvcc!, entries.map((e) => ({ ...e, name: `${e.family}/${e.name}` })), Math.max(1, Math.min(4, cpus().length)));
  assert.deepEqual(failures, [], `${failures.length} of ${entries.length} kernels failed to compile:\n${failures.join('\n\n')}`);
});

// Timeline builds (runtime/timeline.ts, FUSEFORMER_TIMELINE=1): GRID_DEPENDENCY_WAIT (and _ONE) also stamps the time.
// One kernel of every family that waits on its grid dependency, built the way the runtime builds them.
test('timeline builds compile: a kernel of every family that waits on the kernel before it', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 20 * 60_000 }, async () => {
  const waiting = kernelCatalog().filter((e) => /GRID_DEPENDENCY_WAIT(_ONE)?\(\);/.test(e.source));
  const firstOfFamily = waiting.filter((e, i) => waiting.findIndex((o) => o.family === e.family) === i);
  assert.ok(firstOfFamily.length >= 10, `only ${firstOfFamily.length} families wait on the grid dependency`);
  const names = new Map(firstOfFamily.map((e) => [`${e.family}/${e.name}`, e.name]));
  const failures = await compileAll(nvcc!, firstOfFamily.map((e) => ({ ...e, name: `${e.family}/${e.name}` })),
    Math.max(1, Math.min(4, cpus().length)), (name) => timelineOptions(names.get(name)!));
  assert.deepEqual(failures, [], `${failures.length} of ${firstOfFamily.length} timeline kernels failed to compile:\n${failures.join('\n\n')}`);
});

test('the wgmma families (and only they) ask for sm_90a', () => {
  const specific = new Set(kernelCatalog().filter((e) => e.archSpecific).map((e) => e.family));
  assert.deepEqual([...specific].sort(), ['flash-backward-wgmma', 'flash-forward-wgmma']);
  for (const e of kernelCatalog()) assert.equal(e.archSpecific === true, /wgmma\.mma_async/.test(e.source), `${e.family}/${e.name}`);
});

// A kernel launched programmatically may run while the kernel before it still writes its inputs; ptxas moves
// non-coherent loads (ld.global.nc) across griddepcontrol.wait, so such a kernel must read what earlier kernels
// write by coherent loads (runtime/kernel.ts compiledSource defines __restrict__ away for it). Its PTX may keep
// .nc only for the streamed weights (weight-stream.ts: .L1::no_allocate), explicit __ldg of constants, and
// libdevice's own tables (sin/cos range reduction: __cudart_i2opi_f).
test('kernels that wait on the kernel before them read no input through the non-coherent path (one of each family, and the 4-row INT4 GEMV whose x loads ptxas had moved above the wait)', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 20 * 60_000 }, async () => {
  const waiting = kernelCatalog().filter((e) => e.gridDependencyWait === true);
  const chosen = waiting.filter((e, i) => waiting.findIndex((o) => o.family === e.family) === i || e.name === 'int4_gemv_mma_bf16_nt4_k2048_g128_ft1_kw8_u1_none');
  assert.ok(chosen.length >= 15, `only ${chosen.length} families launch programmatically`);
  assert.ok(chosen.some((e) => e.name === 'int4_gemv_mma_bf16_nt4_k2048_g128_ft1_kw8_u1_none'), 'the 4-row INT4 GEMV is catalogued');
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-ptx-'));
  try {
    const problems: string[] = [];
    for (const e of chosen) {
      const file = join(dir, `${e.name}.cu`);
      writeFileSync(file, compiledSource(e));
      await run(nvcc!, ['-ptx', `-arch=${e.archSpecific ? 'sm_90a' : 'sm_90'}`, '-std=c++17', '-w', '-o', `${file}.ptx`, file], { maxBuffer: 16 << 20 });
      const ptx = readFileSync(`${file}.ptx`, 'utf8');
      const allowed = (line: string) => line.includes('.L1::no_allocate') || e.source.includes('__ldg(') || ptx.includes('__cudart_i2opi_f');
      const stray = ptx.split('\n').filter((line) => /\bld\.global\.nc\b/.test(line) && !allowed(line));
      if (stray.length > 0) problems.push(`${e.family}/${e.name}: ${stray.length} non-coherent loads, e.g. ${stray[0]!.trim()}`);
      if (e.name === 'int4_gemv_mma_bf16_nt4_k2048_g128_ft1_kw8_u1_none') {
        const afterWait = ptx.slice(ptx.indexOf('griddepcontrol.wait'));
        assert.match(afterWait, /\n\s*ld\.global\.v4\.u32\s/, 'its x rows are read by coherent loads after the wait');
      }
    }
    assert.deepEqual(problems, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
