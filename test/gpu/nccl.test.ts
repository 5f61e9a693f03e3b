// NCCL with one GPU: a communicator of world size 1 made through the real rendezvous path, every
// collective through NCCL on the backend's stream (identity at world size 1, which still exercises the
// bindings, the by-value ncclUniqueId and the stream handle), the second-stream overlap (event +
// cuStreamWaitEvent fork and join, eagerly and inside a captured graph), and the tensor-parallel
// (vocab-parallel, clipped), data-parallel and ZeRO-1 GPT-2 through NCCL against the single-GPU model.
// Multi-GPU runs: bench/multi-gpu.ts under `fuseformer launch`.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CudaBackend } from '../../src/backend/cuda/index.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { ncclAvailable, ncclVersion } from '../../src/cuda/nccl.js';
import { DataParallelModel } from '../../src/dist/data-parallel.js';
import { initNcclProcessGroup } from '../../src/dist/process-group.js';
import { TpGpt2Model } from '../../src/dist/tp-gpt2.js';
import type { Gpt2Config } from '../../src/models/gpt2.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { Gpt2Model } from '../../src/models/gpt2-model.js';
import type { HostBatch } from '../../src/train/step-runner.js';
import { StepRunner } from '../../src/train/step-runner.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = !probe.available ? `no usable CUDA GPU: ${probe.reason}` : !ncclAvailable() ? 'libnccl.so.2 not found' : false;

const config: Gpt2Config = {
  ...GPT2_PRESETS['gpt2-tiny']!, vocabSize: 300, maxPositions: 32, hidden: 64, layers: 2, heads: 4, ffn: 256,
  residualDropout: 0, embeddingDropout: 0, attentionDropout: 0,
};
const batch: HostBatch = {
  batch: 2, seqLen: 16,
  tokens: Int32Array.from({ length: 32 }, (_, i) => (i * 37) % 300), targets: Int32Array.from({ length: 32 }, (_, i) => (i * 53 + 7) % 300),
};

test('world size 1 through NCCL: collectives, TP GPT-2 and DP GPT-2 equal the single-GPU model', { skip }, async () => {
  assert.ok(ncclVersion() >= 21000, `NCCL ${ncclVersion()} (bf16 and ncclAvg need ≥ 2.10)`);
  const backend = CudaBackend.create(0);
  const comm = await initNcclProcessGroup(backend, { rank: 0, worldSize: 1, localRank: 0, masterAddr: '127.0.0.1', masterPort: 29555 });
  assert.equal(comm.worldSize, 1);

  const x = backend.fromArray([1, 2, 3, 4], [4], 'f32');
  comm.allReduce(x);
  comm.allReduce(x, 'avg');
  const y = backend.fromArray([0, 0, 0, 0], [4], 'f32');
  comm.allGather(x, y);
  const z = backend.fromArray([9, 9, 9, 9], [4], 'f32');
  comm.reduceScatter(y, z);
  comm.broadcast(z, 0);
  const h = backend.fromArray([1.5, -2, 3, 0.25], [4], 'bf16');
  comm.allReduce(h);
  assert.deepEqual(Array.from(backend.download(y)), [1, 2, 3, 4]);
  assert.deepEqual(Array.from(backend.download(z)), [1, 2, 3, 4]);
  assert.deepEqual(Array.from(backend.download(h)), [1.5, -2, 3, 0.25]);
  assert.throws(() => comm.allGather(x, h), /allGather: input is f32 but output is bf16/);
  assert.throws(() => comm.broadcast(x, 1), /broadcast: root 1 is outside \[0, 1\)/);

  // Overlap: a collective on the communication stream between two compute ops, eagerly and captured.
  const before = backend.fromArray([1, 2, 3, 4], [4], 'f32');
  const after = backend.empty([4], 'f32');
  const forkJoin = () => {
    backend.fill(after, 0);
    comm.overlapped(() => comm.allReduce(before, 'avg'));
    comm.joinOverlapped();
    backend.copy(before, after);
  };
  forkJoin();
  assert.deepEqual(Array.from(backend.download(after)), [1, 2, 3, 4]);
  const graph = backend.captureGraph(forkJoin);
  backend.fill(after, -1);
  graph.replay();
  assert.deepEqual(Array.from(backend.download(after)), [1, 2, 3, 4], 'the captured fork/join replays');
  graph.dispose();

  const single = new Gpt2Model(backend, config, 'f32');
  single.params.initialize(3n);
  const singleRunner = new StepRunner(single, { maxBatch: 2, maxSeqLen: 16, optimizer: { maxGradNorm: 1 } });
  const first = singleRunner.trainStep(batch, 0);
  const loss = first.loss;
  const grads = backend.download(single.params.grads.flat) as Float32Array;

  const tp = new TpGpt2Model(backend, comm, config, 'f32');
  tp.initialize(3n);
  const tpFirst = new StepRunner(tp, { maxBatch: 2, maxSeqLen: 16, optimizer: { maxGradNorm: 1 } }).trainStep(batch, 0);
  const tpLoss = tpFirst.loss;
  assert.ok(Math.abs(tpLoss - loss) < 1e-5, `TP loss ${tpLoss} vs ${loss}`);
  assert.ok(Math.abs(tpFirst.gradNorm - first.gradNorm) < 1e-5 * first.gradNorm, `TP gradient norm ${tpFirst.gradNorm} vs ${first.gradNorm}`);
  const tpGrads = backend.download(tp.params.grads.flat) as Float32Array;
  let diff = 0;
  grads.forEach((g, i) => { diff = Math.max(diff, Math.abs(g - tpGrads[i]!)); });
  assert.ok(diff < 1e-5, `TP gradients differ by ${diff}`);

  const dpInner = new Gpt2Model(backend, config, 'f32');
  dpInner.params.initialize(3n);
  const dpLoss = new StepRunner(new DataParallelModel(dpInner, comm), { maxBatch: 2, maxSeqLen: 16 }).trainStep(batch, 0).loss;
  assert.ok(Math.abs(dpLoss - loss) < 1e-6, `DP loss ${dpLoss} vs ${loss}`);

  // ZeRO-1 inside the runner (graphs on: the reduce-scatter and all-gather are captured) vs plain AdamW.
  const zeroModel = new Gpt2Model(backend, config, 'f32');
  zeroModel.params.initialize(3n);
  const plainModel = new Gpt2Model(backend, config, 'f32');
  plainModel.params.initialize(3n);
  const zeroRunner = new StepRunner(zeroModel, { maxBatch: 2, maxSeqLen: 16, zero: { comm } });
  const plainRunner = new StepRunner(plainModel, { maxBatch: 2, maxSeqLen: 16 });
  for (let i = 0; i < 4; i++) {
    const [z, p] = [zeroRunner.trainStep(batch, 1e-3), plainRunner.trainStep(batch, 1e-3)];
    assert.ok(Math.abs(z.loss - p.loss) < 1e-6, `ZeRO-1 step ${i}: loss ${z.loss} vs ${p.loss}`);
  }
  const [zp, pp] = [zeroModel, plainModel].map((m) => backend.download(m.params.values.flat) as Float32Array);
  let zeroDiff = 0;
  zp!.forEach((x, i) => { zeroDiff = Math.max(zeroDiff, Math.abs(x - pp![i]!)); });
  assert.ok(zeroDiff < 1e-6, `ZeRO-1 parameters differ by ${zeroDiff}`);
  comm.destroy();
});
