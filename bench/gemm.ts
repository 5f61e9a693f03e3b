// GEMM benchmark: for the shapes of GPT-2 small training (8 × 1024 tokens), decoding and a few
// squares, cuBLASLt's best algorithm (every heuristic candidate timed) against a full gemm() call
// through our wrapper, with the heuristic's first choice and with autotuning. The wrapper is on
// target when it is within 5 % of the best. All timings are CUDA-event medians per GEMM.
//
//   node dist/bench/gemm.js [--repeats 20] [--json out.json]

import { parseArgs } from 'node:util';
import { writeFileSync } from 'node:fs';
import type { GemmArgs, GemmEpilogue } from '../src/backend/backend.js';
import { GemmRunner } from '../src/backend/cuda/gemm.js';
import { probeCuda } from '../src/cuda/probe.js';
import type { FloatDType } from '../src/dtype.js';
import type { Tensor } from '../src/tensor.js';
import { Rng } from '../src/testing/random.js';

interface Shape {
  what: string;
  dtype: FloatDType;
  batch?: number;
  M: number;
  N: number;
  K: number;
  transA?: boolean;
  transB?: boolean;
  epilogue?: GemmEpilogue;
  preActivation?: boolean;
}

const TOKENS = 8 * 1024;
const SHAPES: Shape[] = [
  { what: 'QKV projection', dtype: 'bf16', M: TOKENS, N: 2304, K: 768, transB: true, epilogue: 'bias' },
  { what: 'attention output', dtype: 'bf16', M: TOKENS, N: 768, K: 768, transB: true, epilogue: 'bias' },
  { what: 'FC1 + GELU', dtype: 'bf16', M: TOKENS, N: 3072, K: 768, transB: true, epilogue: 'gelu_bias', preActivation: true },
  { what: 'FC2', dtype: 'bf16', M: TOKENS, N: 768, K: 3072, transB: true, epilogue: 'bias' },
  { what: 'FC2 dX + dGELU + dbias', dtype: 'bf16', M: TOKENS, N: 3072, K: 768, epilogue: 'dgelu_bgrad' },
  { what: 'FC1 dW + dbias', dtype: 'bf16', M: 3072, N: 768, K: TOKENS, transA: true, epilogue: 'bgrad_a' },
  { what: 'LM head', dtype: 'bf16', M: TOKENS, N: 50257, K: 768, transB: true },
  { what: 'attention Q·Kᵀ', dtype: 'bf16', batch: 96, M: 1024, N: 1024, K: 64, transB: true },
  { what: 'attention P·V', dtype: 'bf16', batch: 96, M: 1024, N: 64, K: 1024 },
  { what: 'decode LM head', dtype: 'bf16', M: 1, N: 50257, K: 768, transB: true },
  { what: 'decode Linear', dtype: 'bf16', M: 8, N: 768, K: 768, transB: true, epilogue: 'bias' },
  { what: 'square', dtype: 'bf16', M: 4096, N: 4096, K: 4096 },
  { what: 'square', dtype: 'f16', M: 4096, N: 4096, K: 4096, transB: true },
  { what: 'square', dtype: 'f32', M: 2048, N: 2048, K: 2048 },
];

const TARGET = 0.05;

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { repeats: { type: 'string', default: '20' }, json: { type: 'string' } } });
  const repeats = Number(values.repeats);
  const probe = probeCuda();
  if (!probe.available) {
    console.log(`bench/gemm: skipped, no usable CUDA GPU (${probe.reason})`);
    return;
  }
  const { CudaBackend } = await import('../src/backend/cuda/index.js');
  const backend = CudaBackend.create();
  const workspaceBytes = 32 << 20;
  const tunedWorkspace = backend.runtime.alloc(workspaceBytes);
  const plain = new GemmRunner(backend.runtime.stream.handle, backend.runtime.alloc(workspaceBytes).ptr, workspaceBytes, { autotune: false });
  const tuned = new GemmRunner(backend.runtime.stream.handle, tunedWorkspace.ptr, workspaceBytes, { autotune: true });
  console.log(`${backend.description}, cuBLASLt ${plain.libraryVersion}; ${repeats} rounds per timing`);
  console.log('shape'.padEnd(58) + 'best ms   TFLOP/s  heuristic#0   wrapper   autotuned');

  const rng = new Rng(20261129);
  const rows: object[] = [];
  let missed = 0;
  for (const s of SHAPES) {
    const lead = s.batch ? [s.batch] : [];
    const made: Tensor[] = [];
    // Inputs are random (a GEMM on constant data draws less power and can run faster than on real data);
    // outputs are written before they are read, so they need no initial values.
    const tensor = (shape: number[], input = true) => {
      const full = [...lead, ...shape];
      const t = backend.empty(full, s.dtype);
      if (input) backend.randomFill({ out: t, distribution: 'normal', std: 0.05, seed: BigInt(Math.floor(rng.next() * 2 ** 32)), offset: 0n });
      made.push(t);
      return t;
    };
    const vector = (n: number, input = true) => tensor([n], input);
    const args: GemmArgs = {
      a: tensor(s.transA ? [s.K, s.M] : [s.M, s.K]),
      b: tensor(s.transB ? [s.N, s.K] : [s.K, s.N]),
      out: tensor([s.M, s.N], false),
      transA: s.transA ?? false,
      transB: s.transB ?? false,
      epilogue: s.epilogue ?? 'none',
    };
    if (s.epilogue === 'bias' || s.epilogue === 'relu_bias' || s.epilogue === 'gelu_bias') args.bias = vector(s.N);
    if (s.preActivation || s.epilogue === 'dgelu' || s.epilogue === 'dgelu_bgrad') args.preActivation = tensor([s.M, s.N]);
    if (s.epilogue === 'dgelu_bgrad') args.biasGrad = vector(s.N, false);
    if (s.epilogue === 'bgrad_a') args.biasGrad = vector(s.M, false);
    backend.synchronize();

    const batched = s.batch !== undefined;
    const candidates = batched ? plain.timeBatchedCandidates(args, repeats) : plain.timeCandidates(args, repeats);
    const best = Math.min(...candidates.map((c) => c.medianMs));
    const wrapper = batched ? plain.timeBatchedGemm(args, repeats) : plain.timeGemm(args, repeats);
    if (batched) tuned.batchedGemm(args); else tuned.gemm(args);
    const autotuned = batched ? tuned.timeBatchedGemm(args, repeats) : tuned.timeGemm(args, repeats);
    const flops = 2 * (s.batch ?? 1) * s.M * s.N * s.K;
    const pct = (ms: number) => `${ms.toFixed(4)} (${ms / best - 1 >= 0 ? '+' : ''}${((ms / best - 1) * 100).toFixed(1)}%)`;
    const onTarget = autotuned <= best * (1 + TARGET);
    if (!onTarget) missed++;
    const name = `${s.what}: ${s.dtype} ${s.batch ? `${s.batch}×` : ''}${s.M}×${s.N}×${s.K} ${s.transA ? 'T' : 'N'}${s.transB ? 'T' : 'N'} ${s.epilogue ?? 'none'}${s.preActivation ? '+pre' : ''}`;
    console.log(`${name.padEnd(58)}${best.toFixed(4).padEnd(10)}${(flops / best / 1e9).toFixed(0).padEnd(9)}${pct(candidates[0]!.medianMs).padEnd(20)}` +
      `${pct(wrapper).padEnd(20)}${pct(autotuned)}${onTarget ? '' : '  <- over 5%'}`);
    rows.push({ ...s, bestMs: best, heuristicFirstMs: candidates[0]!.medianMs, wrapperMs: wrapper, autotunedMs: autotuned, candidatesMs: candidates.map((c) => c.medianMs) });
    for (const t of made) backend.free(t);
  }
  console.log(missed === 0
    ? `the autotuned wrapper is within ${TARGET * 100}% of cuBLASLt's best on every shape`
    : `the autotuned wrapper misses the ${TARGET * 100}% target on ${missed} shape(s)`);
  if (values.json) writeFileSync(values.json, JSON.stringify({ device: backend.description, cublasLt: plain.libraryVersion, repeats, rows }, null, 2));
  plain.dispose();
  tuned.dispose();
  if (missed > 0) process.exitCode = 1;
}

await main();
