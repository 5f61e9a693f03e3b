// Tensor-parallel serving (serve/replicated-engine.ts, `fuseformer serve --tp`) on GPUs through NCCL.
//   - One GPU (skips without a GPU or libnccl): a world-size-1 NCCL group runs the ReplicatedLeader
//     (its messages broadcast through NCCL, the forward's all-reduces issued) through the schedule of
//     test/dist/tp-serve.test.ts on a tiny Llama GQA folder: the tokens equal a plain ServingEngine's on
//     the same GPU (the plain engine unpipelined, as the leader's steps are), and no KV block is left.
//   - Two GPUs (skips below two): `fuseformer launch --gpus 2 -- fuseformer serve --tp 2` on loopback;
//     greedy completions from rank 0's HTTP server equal a one-GPU server's (f32), seeded sampling is
//     answered, and SIGINT to the launcher shuts both ranks down with status 0.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { CudaBackend } from '../../src/backend/cuda/index.js';
import { ncclAvailable } from '../../src/cuda/nccl.js';
import { probeCuda } from '../../src/cuda/probe.js';
import { initNcclProcessGroup } from '../../src/dist/process-group.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { ServingEngine } from '../../src/serve/engine.js';
import { ReplicatedLeader, replicatedServingEngine } from '../../src/serve/replicated-engine.js';
import { InferenceServer } from '../../src/serve/server.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';
import type { ScheduledRequest } from '../dist/tp-serve-fixtures.js';
import { runSchedule } from '../dist/tp-serve-fixtures.js';
import './report-as-you-go.js';

const probe = probeCuda();
const gpus = probe.devices?.length ?? 0;
const skip = !probe.available ? `no usable CUDA GPU: ${probe.reason}` : !ncclAvailable() ? 'libnccl.so.2 not found' : false;
const skip2 = skip || (gpus < 2 ? `${gpus} GPU visible, 2 needed` : false);
const root = mkdtempSync(join(tmpdir(), 'fuseformer-gpu-tp-serve-'));
after(() => rmSync(root, { recursive: true, force: true }));

const LLAMA = { ...TINY_LLAMA, hidden: 128, heads: 8, kvHeads: 2, headDim: 16, ffn: 192, maxPositions: 128 };
const ENGINE = { maxLen: 96, maxRunning: 4, maxBatchTokens: 32, blockSize: 16 };

function folder(): string {
  const dir = join(root, 'llama');
  writeModelFolder(dir, 'llama', LLAMA, 3);
  return dir;
}

const shared = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 250);
const SAMPLED = { temperature: 0.9, topK: 20, topP: 0.95 };
const REQUESTS: ScheduledRequest[] = [
  { prompt: shared.slice(0, 35), maxTokens: 24, submitAtStep: 0 },
  { prompt: [...shared, 3, 4], maxTokens: 20, sampled: { ...SAMPLED, seed: 7 }, submitAtStep: 0 },
  { prompt: [9, 10], maxTokens: 40, submitAtStep: 1, cancelAtStep: 9 },
  { prompt: shared.slice(0, 20), maxTokens: 30, submitAtStep: 3, cancelAfterTokens: 5 },
  { prompt: Array.from({ length: 50 }, (_, i) => 100 + i), maxTokens: 16, sampled: { ...SAMPLED, seed: 99 }, submitAtStep: 2 },
];

test('world size 1 through NCCL: the replicated leader gives a plain engine\'s tokens', { skip }, async () => {
  const backend = CudaBackend.create(0);
  const comm = await initNcclProcessGroup(backend, { rank: 0, worldSize: 1, localRank: 0, masterAddr: '127.0.0.1', masterPort: 29558 });
  const dir = folder();
  try {
    const plainModel = loadDecoderModel(dir, backend, { dtype: 'f32' }).model;
    // Unpipelined, as the TP engine always is: a pipelined engine reads a step's tokens one call later, so a
    // cancel at step 9 would find one token fewer delivered there than on the leader.
    const plain = new ServingEngine(plainModel, { ...ENGINE, pipeline: false });
    const want = runSchedule(plain, REQUESTS);
    plain.dispose();
    plainModel.free();
    const model = loadDecoderModel(dir, backend, { dtype: 'f32', tensorParallel: comm }).model;
    const leader = new ReplicatedLeader(replicatedServingEngine(model, comm, ENGINE), comm);
    try {
      const got = runSchedule(leader, REQUESTS);
      assert.deepEqual(got.map((o) => [o.tokens, o.reason]), want.map((o) => [o.tokens, o.reason]));
      assert.equal(leader.stats().blocksUsed, 0);
    } finally {
      leader.dispose();
      model.free();
    }
    assert.ok(new Set(want.flatMap((o) => o.tokens)).size > 5, 'the model does not repeat one token');
  } finally {
    comm.destroy();
  }
});

interface Completion { status: number; text?: string; finishReason?: string }

async function complete(base: string, body: Record<string, unknown>): Promise<Completion> {
  const r = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', ...body }) });
  const json = await r.json() as { choices?: { text: string; finish_reason: string }[] };
  return { status: r.status, ...(json.choices ? { text: json.choices[0]!.text, finishReason: json.choices[0]!.finish_reason } : {}) };
}

const BODIES = [
  { prompt: 'Call me Ishmael.', max_tokens: 24, temperature: 0 },
  { prompt: 'Some years ago', max_tokens: 16, temperature: 0 },
  { prompt: [5, 17, 200, 3, 99, 42, 7], max_tokens: 32, temperature: 0 },
];

test('2 GPUs: `fuseformer serve --tp 2` answers greedy completions as one GPU does and shuts down on SIGINT', { skip: skip2, timeout: 300_000 }, async () => {
  const dir = folder();
  // The reference: a one-GPU server in this process.
  const backend = CudaBackend.create(0);
  const model = loadDecoderModel(dir, backend, { dtype: 'f32' }).model;
  const engine = new ServingEngine(model, ENGINE);
  const single = new InferenceServer(engine, loadTokenizer(dir), { modelName: 'tiny' });
  const { port } = await single.listen(0);
  const want = await Promise.all(BODIES.map((b) => complete(`http://127.0.0.1:${port}`, b)));
  await single.close();
  engine.dispose();
  model.free();

  const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
  const child = spawn(process.execPath, [
    main, 'launch', '--gpus', '2', '--master-port', '29536', '--grace-ms', '60000', '--',
    process.execPath, main, 'serve', '--tp', '2', '--model', dir, '--port', '0', '--dtype', 'f32', '--served-name', 'tiny',
    '--max-len', String(ENGINE.maxLen), '--max-running', String(ENGINE.maxRunning), '--max-batch-tokens', String(ENGINE.maxBatchTokens), '--block-size', String(ENGINE.blockSize),
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  try {
    const base = await new Promise<string>((resolve, reject) => {
      child.stderr!.on('data', (d: Buffer) => {
        stderr += d.toString();
        const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(stderr);
        if (m) resolve(m[1]!);
      });
      child.on('exit', (code) => reject(new Error(`the launcher exited with ${code} before rank 0 listened:\n${stderr}`)));
    });
    assert.match(stderr, /2 GPUs, tensor parallel \(NCCL\)/);
    const got = await Promise.all(BODIES.map((b) => complete(base, b)));
    assert.deepEqual(got, want, 'greedy completions of the 2-GPU server equal one GPU\'s (f32)');
    const sampled = await complete(base, { prompt: 'Call me', max_tokens: 12, temperature: 0.8, seed: 5 });
    assert.equal(sampled.status, 200);
    assert.equal(await complete(base, { prompt: 'Call me', max_tokens: 12, temperature: 0.8, seed: 5 }).then((c) => c.text), sampled.text, 'the same seed gives the same text');
    child.kill('SIGINT');
    assert.equal(await exit, 0, `the launcher's status after SIGINT:\n${stderr}`);
    assert.match(stderr, /shutting down/);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
});
