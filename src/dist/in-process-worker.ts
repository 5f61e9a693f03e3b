// The body of one in-process rank (a worker thread started by runInProcessRanks): makes the rank's
// CpuBackend and communicator, runs the rank function, posts its result or its error text.

import { parentPort, workerData } from 'node:worker_threads';
import { CpuBackend } from '../backend/cpu/index.js';
import type { InProcessGroup, RankFunction } from './in-process.js';
import { InProcessCommunicator, markRankFailed } from './in-process.js';

interface RankData {
  readonly group: InProcessGroup;
  readonly rank: number;
  readonly moduleUrl: string;
  readonly exportName: string;
  readonly input: unknown;
}

const data = workerData as RankData;
try {
  const module = (await import(data.moduleUrl)) as Record<string, unknown>;
  const fn = module[data.exportName];
  if (typeof fn !== 'function') throw new Error(`${data.moduleUrl} has no exported function '${data.exportName}'`);
  const comm = new InProcessCommunicator(new CpuBackend(), data.rank, data.group);
  const result: unknown = await (fn as RankFunction<unknown, unknown>)(comm, data.input);
  parentPort!.postMessage({ result });
} catch (err) {
  markRankFailed(data.group, data.rank);
  parentPort!.postMessage({ error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
}
