// The process group of a `--tp N` command (`fuseformer generate`, `fuseformer serve`) run under
// `fuseformer launch --gpus N`: one process per GPU, each opening GPU LOCAL_RANK and joining NCCL through
// the launcher's rendezvous. Everything a wrong invocation can get wrong is checked before any GPU work,
// with the command line that would be right.

import type { Backend } from '../backend/backend.js';
import type { BackendChoice } from '../backend/index.js';
import type { Communicator } from '../dist/communicator.js';
import { initNcclProcessGroup, processGroupEnv } from '../dist/process-group.js';
import { ArgumentError } from '../errors.js';

/** This rank's GPU and NCCL communicator for `fuseformer <command> --tp N` (WORLD_SIZE must be N). */
export async function tensorParallelGroup(command: string, tp: number, choice: BackendChoice | undefined): Promise<{ backend: Backend; comm: Communicator }> {
  const env = processGroupEnv();
  if (env.worldSize !== tp) throw new ArgumentError(`--tp ${tp} needs ${tp} processes, but WORLD_SIZE is ${env.worldSize}: run it as \`fuseformer launch --gpus ${tp} -- fuseformer ${command} --tp ${tp} ...\``);
  if (choice === 'cpu') throw new ArgumentError('--tp runs one process per GPU over NCCL: it needs the CUDA backend, not --backend cpu');
  const { probeCuda } = await import('../cuda/probe.js');
  const probe = probeCuda();
  if (!probe.available) throw new ArgumentError(`--tp needs CUDA GPUs: ${probe.reason}`);
  const { CudaBackend } = await import('../backend/cuda/index.js');
  const backend = CudaBackend.create(env.localRank);
  return { backend, comm: await initNcclProcessGroup(backend, env) };
}

/** Rank 0's seed (a u64 below 2⁶⁴) on every rank. */
export function broadcastSeed(comm: Communicator, seed: bigint): bigint {
  const b = comm.backend;
  const words = b.fromArray(Int32Array.of(Number(seed & 0xffffffffn) | 0, Number(seed >> 32n) | 0), [2], 'i32');
  comm.broadcast(words, 0);
  const [low, high] = b.download(words) as Int32Array;
  b.free(words);
  return BigInt(low! >>> 0) + (BigInt(high! >>> 0) << 32n);
}
