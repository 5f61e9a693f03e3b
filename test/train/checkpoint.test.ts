import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { SafetensorsReader, writeSafetensors } from '../../src/io/safetensors.js';
import {
  checkpointPath, decodeRngOffsets, encodeRngOffsets, latestCheckpoint, listCheckpoints, loadCheckpoint,
  pruneCheckpoints, saveCheckpoint, type Checkpoint, type TensorExpectation,
} from '../../src/train/checkpoint.js';
import { CausalLMLoader } from '../../src/train/data.js';
import { createDynamicLossScaler } from '../../src/train/loss-scaler.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-checkpoint-'));
after(() => rmSync(root, { recursive: true, force: true }));

const spec: TensorExpectation[] = [
  { name: 'transformer.wte.weight', dtype: 'f32', shape: [4, 3] },
  { name: 'transformer.h.0.ln_1.bias', dtype: 'bf16', shape: [3] },
  { name: 'position_ids', dtype: 'i32', shape: [2] },
];

function sample(step: number): Checkpoint {
  const scaler = createDynamicLossScaler();
  scaler.update(true);
  const loader = new CausalLMLoader(Uint16Array.from({ length: 100 }, (_, i) => i), { batchSize: 2, seqLen: 4, seed: 1 });
  loader.next();
  return {
    model: [
      { ...spec[0]!, data: Float32Array.from({ length: 12 }, (_, i) => i / 4 + step) },
      { ...spec[1]!, data: Uint16Array.from([0x3f80, 0xbf80, 0x4000]) },
      { ...spec[2]!, data: Int32Array.from([0, 1]) },
    ],
    optimizer: { m: new Float32Array(64).fill(0.5), v: new Float32Array(64).fill(0.25), master: new Float32Array(64).fill(step) },
    trainer: {
      step, lossScaler: scaler.state(), data: loader.state(),
      rngOffsets: encodeRngOffsets({ dropout: 2n ** 60n + 3n }), config: { model: 'gpt2-tiny', lr: 3e-4 },
    },
  };
}

test('save then load returns the same tensors, optimizer state and trainer state', () => {
  const path = checkpointPath(root, 100);
  assert.ok(path.endsWith('step-00000100'));
  const saved = sample(100);
  saveCheckpoint(path, saved, { files: { 'config.json': '{"model_type":"gpt2"}\n' } });
  assert.deepEqual(readdirSync(path).sort(), ['config.json', 'model.safetensors', 'optimizer.safetensors', 'trainer.json']);
  const loaded = loadCheckpoint(path, { model: spec, optimizerNumel: 64 });
  assert.deepEqual(loaded, saved);
  assert.equal(decodeRngOffsets(loaded.trainer.rngOffsets!)['dropout'], 2n ** 60n + 3n);
  // model.safetensors is a plain HF weight file: only the model's names, format=pt.
  const reader = SafetensorsReader.open(join(path, 'model.safetensors'));
  assert.deepEqual(reader.metadata, { format: 'pt' });
  assert.deepEqual(reader.tensors.map((t) => t.name), spec.map((s) => s.name));
  reader.close();
  assert.equal(JSON.parse(readFileSync(join(path, 'trainer.json'), 'utf8')).version, 1);
  // Loading without asking for the optimizer skips it; no-master state round-trips too.
  assert.equal(loadCheckpoint(path, { model: spec }).optimizer, undefined);
  const noMaster = { ...saved, optimizer: { m: saved.optimizer!.m, v: saved.optimizer!.v } };
  saveCheckpoint(path, noMaster);
  assert.equal(loadCheckpoint(path, { model: spec, optimizerNumel: 64 }).optimizer!.master, undefined);
  assert.throws(() => loadCheckpoint(path, { model: spec, optimizerNumel: 64, master: true }), /optimizer.safetensors: tensor 'master' is missing/);
});

test('overwriting is atomic and leaves no temporary files; a failed save leaves the old checkpoint', () => {
  const path = checkpointPath(root, 200);
  saveCheckpoint(path, sample(200));
  saveCheckpoint(path, sample(201));
  assert.equal(loadCheckpoint(path, { model: spec }).trainer.step, 201);
  const bad = sample(202);
  const broken = { ...bad, trainer: { ...bad.trainer, rngOffsets: { dropout: 5n } as never } };
  assert.throws(() => saveCheckpoint(path, broken), /"rngOffsets.dropout" must be a decimal string .* got the BigInt 5n/);
  const wrongArray = { ...bad, model: [{ ...spec[0]!, data: new Float64Array(12) as never }] };
  assert.throws(() => saveCheckpoint(path, wrongArray), /tensor 'transformer.wte.weight': dtype f32 is stored in a Float32Array, got Float64Array/);
  const bigintElsewhere = { ...bad, trainer: { ...bad.trainer, config: { seed: 1n } } };
  assert.throws(() => saveCheckpoint(path, bigintElsewhere), /trainer.json: the trainer state is not JSON .*BigInt/);
  assert.equal(loadCheckpoint(path, { model: spec }).trainer.step, 201);
  assert.deepEqual(readdirSync(root).filter((n) => n.includes('.tmp-') || n.includes('.old-')), []);
});

test('loading names the tensor and the file on every mismatch', () => {
  const path = checkpointPath(root, 300);
  saveCheckpoint(path, sample(300));
  const model = join(path, 'model.safetensors');
  const expectError = (expected: TensorExpectation[], pattern: RegExp): void => {
    assert.throws(() => loadCheckpoint(path, { model: expected }), (e: Error) => e.message.includes(model) && pattern.test(e.message), pattern.source);
  };
  expectError([...spec, { name: 'lm_head.weight', dtype: 'f32', shape: [4, 3] }], /tensor 'lm_head.weight' is missing/);
  expectError(spec.slice(1), /holds 1 tensor\(s\) the model does not have: 'transformer.wte.weight'/);
  expectError([{ ...spec[0]!, shape: [3, 4] }, spec[1]!, spec[2]!], /tensor 'transformer.wte.weight' has shape \[4, 3\] but \[3, 4\] is expected/);
  expectError([spec[0]!, { ...spec[1]!, dtype: 'f16' }, spec[2]!], /tensor 'transformer.h.0.ln_1.bias' is BF16 but F16 is expected/);
  assert.throws(() => loadCheckpoint(path, { model: spec, optimizerNumel: 65 }), /optimizer.safetensors: tensor 'm' has shape \[64\] but \[65\] is expected/);
  assert.throws(() => loadCheckpoint(join(root, 'nowhere'), { model: spec }), /not a checkpoint directory/);
  // A damaged trainer.json or loss-scaler state.
  const trainer = join(path, 'trainer.json');
  const json = JSON.parse(readFileSync(trainer, 'utf8'));
  writeFileSync(trainer, JSON.stringify({ ...json, version: 9 }));
  assert.throws(() => loadCheckpoint(path, { model: spec }), /trainer.json: checkpoint format version 9 is not supported/);
  writeFileSync(trainer, JSON.stringify({ ...json, lossScaler: { ...json.lossScaler, scale: -1 } }));
  assert.throws(() => loadCheckpoint(path, { model: spec }), /trainer.json: "lossScaler": scale -1 is not valid/);
  writeFileSync(trainer, '{"format": "fuseformer-checkpoint", "ver');
  assert.throws(() => loadCheckpoint(path, { model: spec }), /trainer.json: not readable JSON/);
  // A truncated safetensors file.
  writeSafetensors(model, []);
  writeFileSync(trainer, JSON.stringify(json));
  expectError(spec, /tensor 'transformer.wte.weight' is missing/);
});

test('list, latest and prune find complete checkpoints only', () => {
  const dir = join(root, 'run');
  assert.equal(latestCheckpoint(dir), undefined);
  for (const step of [5, 50, 500]) saveCheckpoint(checkpointPath(dir, step), sample(step));
  mkdirSync(join(dir, 'step-00000600.tmp-999999999-abcd1234')); // a crashed save (no such process)
  mkdirSync(join(dir, 'step-00000700')); // no trainer.json: incomplete
  assert.deepEqual(listCheckpoints(dir).map((c) => c.step), [5, 50, 500]);
  assert.equal(latestCheckpoint(dir), checkpointPath(dir, 500));
  pruneCheckpoints(dir, 2);
  assert.deepEqual(readdirSync(dir).sort(), ['step-00000050', 'step-00000500', 'step-00000700']);
});
