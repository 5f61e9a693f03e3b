// The in-process communicator (worker-thread ranks over shared memory): every collective against its
// definition at world sizes 1, 2 and 4, a failing rank releasing its peers, and shape errors.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runInProcessRanks } from '../../src/dist/in-process.js';

const fixtures = new URL('./rank-fixtures.js', import.meta.url);

for (const w of [1, 2, 4]) {
  test(`collectives at world size ${w} match their definitions on every rank`, async () => {
    const n = 5;
    const results = await runInProcessRanks<{ n: number }, Record<string, number[]>>(w, fixtures, 'collectives', { n });
    const ranks = Array.from({ length: w }, (_, r) => r);
    const rankSum = ranks.reduce((a, r) => a + r, 0);
    results.forEach((res, r) => {
      assert.deepEqual(res['sum'], Array.from({ length: n }, (_, i) => rankSum * 10 + w * i), `sum on rank ${r}`);
      assert.deepEqual(res['avg'], Array.from({ length: n }, (_, i) => rankSum / w + i * 0.5), `avg on rank ${r}`);
      assert.deepEqual(res['ints'], Array.from({ length: n }, (_, i) => rankSum * 1000 + w * i), `i32 sum on rank ${r}`);
      assert.deepEqual(res['gathered'], ranks.flatMap((q) => Array.from({ length: n }, (_, i) => q * 100 + i)), `allGather on rank ${r}`);
      const factor = ranks.reduce((a, q) => a + q + 1, 0);
      assert.deepEqual(res['scattered'], Array.from({ length: n }, (_, i) => factor * (r * n + i)), `reduceScatter on rank ${r}`);
      assert.deepEqual(res['bcast'], Array.from({ length: n }, (_, i) => 7 + i), `broadcast on rank ${r}`);
    });
  });
}

test('a rank that throws releases its peers, and the error names it', async () => {
  await assert.rejects(runInProcessRanks(3, fixtures, 'oneRankThrows', null, { timeoutMs: 20_000 }), /rank 1: .*rank one broke on purpose/);
});

test('a malformed collective is refused with the shapes named', async () => {
  const messages = await runInProcessRanks<null, string>(2, fixtures, 'badGather', null);
  for (const m of messages) assert.match(m, /allGather: output \[3\] must hold worldSize \(2\) × input \[3\] elements/);
});

test('the NCCL communicator passes device pointers, NCCL counts and the current stream', async () => {
  const { NcclCommunicator } = await import('../../src/dist/communicator.js');
  const { CudaTensor } = await import('../../src/backend/cuda/runtime/tensor.js');
  const { CpuBackend } = await import('../../src/backend/cpu/index.js');
  const calls: unknown[][] = [];
  const record = (name: string) => (...args: unknown[]) => { calls.push([name, ...args]); };
  const fakeComm = {
    rank: 1, worldSize: 4, allReduce: record('allReduce'), allGather: record('allGather'),
    reduceScatter: record('reduceScatter'), broadcast: record('broadcast'), destroy: record('destroy'),
  };
  const fakeBackend = { name: 'cuda', runtime: { current: { handle: 77n } } };
  const comm = new NcclCommunicator(fakeBackend as never, fakeComm as never);
  const t = (ptr: bigint, n: number, dtype: 'f32' | 'bf16' = 'bf16') => new CudaTensor(ptr, [n], dtype, null);
  comm.allReduce(t(1000n, 8), 'avg');
  comm.allGather(t(2000n, 3), t(3000n, 12));
  comm.reduceScatter(t(4000n, 12), t(5000n, 3));
  comm.broadcast(t(6000n, 5), 2);
  comm.destroy();
  assert.deepEqual(calls, [
    ['allReduce', 1000n, 1000n, 8, 'bf16', 'avg', 77n],
    ['allGather', 2000n, 3000n, 3, 'bf16', 77n],
    ['reduceScatter', 4000n, 5000n, 3, 'bf16', 'sum', 77n],
    ['broadcast', 6000n, 6000n, 5, 'bf16', 2, 77n],
    ['destroy'],
  ]);
  assert.throws(() => comm.allGather(t(1n, 3), t(2n, 6)), /output \[6\] must hold worldSize \(4\) × input \[3\] elements/);
  assert.throws(() => comm.reduceScatter(t(1n, 12, 'f32'), t(2n, 3)), /input is f32 but output is bf16/);
  assert.throws(() => comm.allReduce(new CpuBackend().empty([2], 'f32')), /on the cpu backend; NCCL needs CUDA tensors/);
});
