// Shared helpers for the kernel-family tests that run without a GPU: a KernelHost that records
// launches instead of making them, fake device tensors at chosen addresses, and nvcc compilation
// of a family's catalog.

import type { CheckedGemm, GemmProblem } from '../../../../src/backend/cuda/gemm-plan.js';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { DType } from '../../../../src/dtype.js';
import { compiledSource, type CompiledKernel, type KernelArg, type KernelHost, type KernelSource, type LaunchConfig, type TensorMap2d } from '../../../../src/backend/cuda/runtime/kernel.js';
import { kernelArch } from '../../../../src/backend/cuda/runtime/jit.js';
import { CudaTensor } from '../../../../src/backend/cuda/runtime/tensor.js';

export interface RecordedLaunch {
  key: string;
  name: string;
  source: string;
  /** The source declares that it waits for its prerequisites (it may be launched programmatically). */
  gridDependencyWait: boolean;
  config: LaunchConfig;
  args: readonly KernelArg[];
}

/** Records every launch; scratch() and counters() hand out fixed addresses. */
export class RecordingHost implements KernelHost {
  readonly launches: RecordedLaunch[] = [];
  readonly scratchRequests: number[] = [];
  readonly multiProcessorCount = 132;
  readonly maxSharedBytesPerBlock = 227 * 1024;
  static readonly SCRATCH = 0x7000_0000n;
  static readonly COUNTERS = 0x7800_0000n;
  readonly counterRequests: number[] = [];
  /** The device architecture the host reports (none: a pre-Hopper stand-in, so no wgmma kernel is chosen). */
  constructor(readonly arch?: string) {}
  /** Tensor-map kernels where the host says it is a Hopper. */
  get tensorMaps(): boolean { return this.arch === 'sm_90'; }
  /** Thread-block clusters where the host says it is a Hopper. */
  get clusters(): boolean { return this.arch === 'sm_90'; }

  kernel(key: string, build: () => KernelSource): CompiledKernel {
    const { name, source, gridDependencyWait } = build();
    return { name, launch: (config, args) => { this.launches.push({ key, name, source, gridDependencyWait: gridDependencyWait === true, config, args }); } };
  }

  scratch(bytes: number): bigint {
    this.scratchRequests.push(bytes);
    return RecordingHost.SCRATCH;
  }

  counters(count: number): bigint {
    this.counterRequests.push(count);
    return RecordingHost.COUNTERS;
  }
}

/** A device tensor that is never dereferenced; tensors made in a row get distinct 256-aligned addresses. */
let nextAddress = 0x1000_0000n;
export function deviceTensor(shape: readonly number[], dtype: DType, ptr?: bigint): CudaTensor {
  const address = ptr ?? (nextAddress += 0x100_0000n);
  return new CudaTensor(address, shape, dtype, null);
}

/** The value of a launch argument (asserting its type), for checks on what a launcher passed. */
export function argValue(launch: RecordedLaunch, index: number, type: Exclude<KernelArg['type'], 'tensorMap'>): number | bigint {
  const a = launch.args[index];
  if (!a || a.type !== type) throw new Error(`argument ${index} of ${launch.name} is ${a ? a.type : 'missing'}, expected ${type}`);
  return a.value as number | bigint;
}

/** The tensor map a launcher passed as argument `index`. */
export function tensorMapArg(launch: RecordedLaunch, index: number): TensorMap2d {
  const a = launch.args[index];
  if (!a || a.type !== 'tensorMap') throw new Error(`argument ${index} of ${launch.name} is ${a ? a.type : 'missing'}, expected tensorMap`);
  return a.value;
}

export function findNvcc(): string | null {
  for (const candidate of [process.env.NVCC, 'nvcc', '/usr/local/cuda/bin/nvcc']) {
    if (!candidate) continue;
    try { execFileSync(candidate, ['--version'], { stdio: 'ignore' }); return candidate; } catch { /* try the next */ }
  }
  return null;
}

const run = promisify(execFile);

/** Compiles each source to a cubin for sm_90 as the runtime would (compiledSource), `concurrency` at a time (`options(name)`: more nvcc arguments); returns the failures' logs. */
export async function compileAll(nvcc: string, sources: readonly KernelSource[], concurrency = 2, options: (name: string) => readonly string[] = () => []): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-kernels-'));
  const failures: string[] = [];
  try {
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < sources.length) {
        const index = next++;
        const { name } = sources[index]!;
        const file = join(dir, `${index}-${name.replace(/[^\w.-]/g, '_')}.cu`);
        writeFileSync(file, compiledSource(sources[index]!)); // as the runtime compiles it
        try {
          await run(nvcc, ['-cubin', `-arch=${kernelArch('sm_90', sources[index]!)}`, '-std=c++17', ...options(name), '-o', `${file}.cubin`, file], { maxBuffer: 16 << 20 });
        } catch (error) {
          const stderr = (error as { stderr?: string }).stderr ?? String(error);
          failures.push(`${name}:\n${stderr.split('\n').slice(0, 20).join('\n')}`);
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return failures;
}

/**
 * A checked GEMM for the routing rules of the few-row kernels (gemv.ts, gemv-mma.ts, gemm-skinny.ts):
 * bf16 x [M, K] against [N, K] weights (transB), no epilogue, 16-byte-aligned operands, alpha 1, beta 0,
 * `defaults` and `problem` over that; `extra` sets alpha, beta, a's address or a bias.
 */
export function checkedGemm(defaults: Partial<GemmProblem>, problem: Partial<GemmProblem> = {}, extra: { alpha?: number; beta?: number; aPtr?: bigint; bias?: boolean } = {}): CheckedGemm {
  const p: GemmProblem = { dtype: 'bf16', M: 1, N: 2048, K: 2048, batch: 1, transA: false, transB: true, epilogue: 'none', writesPreActivation: false, ...defaults, ...problem };
  const t = (ptr: bigint) => ({ ptr }) as unknown as CheckedGemm['a'];
  return { problem: p, a: t(extra.aPtr ?? 0x1000n), b: t(0x2000n), out: t(0x3000n), ...(extra.bias ? { bias: t(0x4000n) } : {}), alpha: extra.alpha ?? 1, beta: extra.beta ?? 0 };
}

/** What no few-row kernel takes, whatever its row limits: [why, the GEMM] (checked: checkedGemm with the kernel's defaults). */
export function commonGemmRefusals(checked: (problem: Partial<GemmProblem>, extra?: { alpha?: number; beta?: number; aPtr?: bigint; bias?: boolean }) => CheckedGemm): [string, CheckedGemm][] {
  return [
    ['an untransposed weight', checked({ transB: false })],
    ['a batch', checked({ batch: 2 })],
    ['a stored pre-activation', checked({ epilogue: 'gelu_bias', writesPreActivation: true }, { bias: true })],
    ['a backward epilogue', checked({ epilogue: 'dgelu' })],
    ['alpha', checked({}, { alpha: 2 })],
    ['beta', checked({}, { beta: 1 })],
    ['a misaligned a', checked({}, { aPtr: 0x1008n })],
  ];
}
