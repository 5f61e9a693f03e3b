// Choosing a backend: CUDA when a usable GPU and its libraries are present, the CPU reference
// otherwise. FUSEFORMER_BACKEND=cpu|cuda forces one (cuda then fails loudly if it cannot start).

import { ArgumentError } from '../errors.js';
import type { Backend } from './backend.js';
import { CpuBackend } from './cpu/index.js';

export type BackendChoice = 'auto' | 'cpu' | 'cuda';

export interface BackendSelection {
  backend: Backend;
  /** Why this backend was chosen (shown by the CLI). */
  reason: string;
}

export async function selectBackend(choice: BackendChoice = (process.env.FUSEFORMER_BACKEND as BackendChoice | undefined) ?? 'auto'): Promise<BackendSelection> {
  if (choice !== 'auto' && choice !== 'cpu' && choice !== 'cuda') {
    throw new ArgumentError(`unknown backend '${String(choice)}': expected auto, cpu or cuda`);
  }
  if (choice === 'cpu') return { backend: new CpuBackend(), reason: 'CPU backend requested' };
  const { probeCuda } = await import('../cuda/probe.js');
  const probe = probeCuda();
  if (!probe.available) {
    if (choice === 'cuda') throw new ArgumentError(`the CUDA backend was requested but cannot start: ${probe.reason}`);
    return { backend: new CpuBackend(), reason: `no usable CUDA GPU (${probe.reason}); using the CPU backend` };
  }
  const { CudaBackend } = await import('./cuda/index.js');
  return { backend: CudaBackend.create(), reason: 'CUDA GPU found' };
}
