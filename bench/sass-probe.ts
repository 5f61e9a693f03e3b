// `node dist/bench/sass-probe.js [--out DIR] [--match REGEX]`: cubins of GPT-2 124M's and Llama 1.2B's
// batch-1 decode GEMVs (the planner's picks, compiled as the runtime compiles them), each with plain weight
// loads, evict-first hinted ones and coherent ones, in the plain and
// the timeline build (-DFUSEFORMER_TIMELINE), compiled here with nvcc (no GPU needed) into DIR (default
// sass-probe/, untracked). Disassemble them here with `bash bench/sass-local.sh sass-probe/*.cubin`, or on
// the device (carry sass-probe) with `bash bench/gpu-pending.sh sass`: what a build option changed in the
// machine code — e.g. where ptxas put the grid-dependency wait among the weight loads (docs/perf.md,
// "Session 30").

import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { GemvNorm, GemvSpec } from '../src/backend/cuda/kernels/gemv.js';
import { gemvSource, planGemv } from '../src/backend/cuda/kernels/gemv.js';
import { WEIGHT_LOAD_FAMILIES, weightStreamOptions } from '../src/backend/cuda/kernels/weight-stream.js';
import type { GemmEpilogue } from '../src/backend/backend.js';
import { timelineOptions } from '../src/backend/cuda/runtime/timeline.js';
import { compiledSource } from '../src/backend/cuda/runtime/kernel.js';

const { values } = parseArgs({ options: { out: { type: 'string', default: 'sass-probe' }, match: { type: 'string' } } });
const layer: GemvNorm = { kind: 'layer', residual: true, bias: true };
const rms: GemvNorm = { kind: 'rms', residual: true, bias: false, preload: true };
// [tag, N, K, epilogue, gate, norm]: a batch-1 step's GEMVs as the decode forward launches them.
const shapes: [string, number, number, GemmEpilogue, GemvSpec['gate'], GemvNorm | undefined][] = [
  ['gpt2-qkv', 2304, 768, 'none', undefined, layer], ['gpt2-o', 768, 768, 'none', undefined, undefined],
  ['gpt2-fc', 3072, 768, 'gelu_bias', undefined, layer], ['gpt2-proj', 768, 3072, 'none', undefined, undefined],
  ['llama-qkv', 3072, 2048, 'none', undefined, rms], ['llama-gated', 8192, 2048, 'none', { activation: 'silu', bias: false }, rms],
  ['llama-down', 2048, 8192, 'none', undefined, undefined],
];
const nvcc = process.env['NVCC'] ?? '/usr/local/cuda/bin/nvcc';
rmSync(values.out, { recursive: true, force: true });
mkdirSync(values.out, { recursive: true });
const saved = { ...weightStreamOptions };
let count = 0;
try {
  for (const [tag, N, K, epilogue, gate, norm] of shapes) {
    if (values.match && !new RegExp(values.match).test(tag)) continue;
    // plain loads, evict-first hinted ones and plain loads by the coherent path (FUSEFORMER_WEIGHT_LOAD_COHERENT)
    for (const form of ['plain', 'hint', 'coherent'] as const) {
      weightStreamOptions.evictFirst = form === 'hint';
      weightStreamOptions.coherent = new Set(form === 'coherent' ? WEIGHT_LOAD_FAMILIES : []);
      const kernel = gemvSource(planGemv('bf16', 1, N, K, epilogue, gate, 132, norm).spec), { name } = kernel;
      for (const timeline of [false, true]) {
        const base = join(values.out, `${tag}-${form}-${timeline ? 'timeline' : 'build'}`);
        writeFileSync(`${base}.cu`, compiledSource(kernel)); // as the runtime compiles it
        execFileSync(nvcc, ['-cubin', '-arch=sm_90', '-std=c++17', '-w', ...(timeline ? timelineOptions(name) : []), '-o', `${base}.cubin`, `${base}.cu`]);
        rmSync(`${base}.cu`);
        count++;
      }
    }
    console.log(`${tag}: ${gemvSource(planGemv('bf16', 1, N, K, epilogue, gate, 132, norm).spec).name}`);
  }
} finally {
  Object.assign(weightStreamOptions, saved);
}
console.log(`${count} cubins in ${values.out}/ (plain / evict-first hinted / coherent loads × plain / timeline build)`);
