// Where the GPU suites run: the CUDA GPU, or with FUSEFORMER_TEST_EMULATE=1 the kernel emulator
// (src/testing/emulator, docs/emulator.md) — the same CudaBackend, its kernels run on the CPU and its cuBLASLt
// GEMMs on the CPU backend — for the suites whose kernels it can run (no wgmma, TMA, clusters or timing).

import type { CudaBackend } from '../../src/backend/cuda/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { emulatedCudaBackend, emulatorUnavailable } from '../../src/testing/emulator/host.js';

export const emulated = process.env['FUSEFORMER_TEST_EMULATE'] === '1';

/** The suites' skip reason: no usable GPU (or, emulated, no g++ / CUDA headers); false when they run. */
export function gpuSkip(): string | false {
  if (emulated) return emulatorUnavailable() ?? false;
  const probe = probeCuda();
  return probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;
}

/** A CUDA backend on the GPU, or on the emulator with FUSEFORMER_TEST_EMULATE=1. */
export async function createGpuBackend(): Promise<CudaBackend> {
  if (emulated) return emulatedCudaBackend().backend;
  const { CudaBackend } = await import('../../src/backend/cuda/index.js');
  return CudaBackend.create();
}
