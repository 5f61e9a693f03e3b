// Joining the process group started by `fuseformer launch`: read RANK/WORLD_SIZE/MASTER_* from the
// environment, make the NCCL unique id on rank 0 and share it through the TCP rendezvous, then
// ncclCommInitRank on every rank (which blocks until all ranks have joined). The CUDA backend must
// already be created on this rank's device (ordinal LOCAL_RANK), so its context is current.

import type { CudaBackend } from '../backend/cuda/index.js';
import { NcclComm, ncclGetUniqueId } from '../cuda/nccl.js';
import { ArgumentError } from '../errors.js';
import { NcclCommunicator } from './communicator.js';
import type { DistributedEnv } from './rendezvous.js';
import { distributedEnv, rendezvous } from './rendezvous.js';

/** The launcher's variables, or world size 1 (rank 0, a local rendezvous that is skipped) without them. */
export function processGroupEnv(env: NodeJS.ProcessEnv = process.env): DistributedEnv {
  return distributedEnv(env) ?? { rank: 0, worldSize: 1, localRank: 0, masterAddr: '127.0.0.1', masterPort: 29500 };
}

export async function initNcclProcessGroup(backend: CudaBackend, env: DistributedEnv = processGroupEnv(), timeoutMs?: number): Promise<NcclCommunicator> {
  if (backend.name !== 'cuda') throw new ArgumentError('initNcclProcessGroup: NCCL needs the CUDA backend');
  const id = await rendezvous({ ...env, ...(timeoutMs !== undefined ? { timeoutMs } : {}) }, ncclGetUniqueId);
  return new NcclCommunicator(backend, NcclComm.initRank(id, env.worldSize, env.rank));
}
