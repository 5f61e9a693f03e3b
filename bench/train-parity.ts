// fuseformer's GPT-2 and BERT (masked LM) training steps against Hugging Face transformers
// (GPT2LMHeadModel, BertForMaskedLM; run on the GPU machine):
//  1. the loss and every parameter gradient at the same weights and batch (f32: rel err ≤ 1e-4,
//     bf16: ≤ 1e-2, as ‖ours − theirs‖ / ‖theirs‖ per tensor);
//  2. a loss curve of `steps` AdamW steps from the same init over the same batches (within 1%).
// Needs python3 with torch + transformers (bench/hf_reference.py). Writes a JSON report.
//
// Usage: node dist/bench/train-parity.js [--json out.json] [--steps 200]

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import { SafetensorsReader, writeSafetensors } from '../src/io/safetensors.js';
import type { Gpt2Config } from '../src/models/gpt2.js';
import { gpt2ConfigToJson } from '../src/models/gpt2.js';
import { Gpt2Model } from '../src/models/gpt2-model.js';
import type { BertConfig } from '../src/models/bert.js';
import { bertConfigToJson } from '../src/models/bert.js';
import { BertModel } from '../src/models/bert-model.js';
import type { LanguageModel } from '../src/models/language-model.js';
import type { HostBatch } from '../src/train/step-runner.js';
import { StepRunner } from '../src/train/step-runner.js';
import { gradientErrorFloor, gradientRelError } from '../src/testing/compare.js';

const { values: cli } = parseArgs({ options: { json: { type: 'string' }, steps: { type: 'string', default: '200' } } });
const steps = Number(cli.steps);

const config: Gpt2Config = {
  vocabSize: 5003, maxPositions: 128, hidden: 256, layers: 4, heads: 4, ffn: 1024, layerNormEps: 1e-5,
  activation: 'gelu_tanh', residualDropout: 0, embeddingDropout: 0, attentionDropout: 0, tieWordEmbeddings: true,
};
const B = 8, L = 128;
const optimizer = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, maxGradNorm: 1, masterWeights: true };
const lr = 1e-3;

/**
 * Sequences from a fixed random first-order Markov chain (64 states, 3 equally likely successors each)
 * over a vocabulary subset: learnable down to the chain's entropy, ln 3 ≈ 1.0986 nats. Every step sees
 * a new batch, so the curve tracks learning, not memorisation (whose dynamics amplify rounding).
 */
function markovBatches(count: number): HostBatch[] {
  let s = 12345;
  const rand = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s / 2 ** 32; };
  const states = 64;
  const next = Array.from({ length: states }, () => Array.from({ length: 3 }, () => Math.floor(rand() * states)));
  const tokenOf = Array.from({ length: states }, () => Math.floor(rand() * config.vocabSize));
  const out: HostBatch[] = [];
  for (let b = 0; b < count; b++) {
    const seq = new Int32Array(B * (L + 1));
    for (let r = 0; r < B; r++) {
      let state = Math.floor(rand() * states);
      for (let t = 0; t <= L; t++) { seq[r * (L + 1) + t] = tokenOf[state]!; state = next[state]![Math.floor(rand() * 3)]!; }
    }
    const tokens = new Int32Array(B * L), targets = new Int32Array(B * L);
    for (let r = 0; r < B; r++) for (let t = 0; t < L; t++) { tokens[r * L + t] = seq[r * (L + 1) + t]!; targets[r * L + t] = seq[r * (L + 1) + t + 1]!; }
    out.push({ batch: B, seqLen: L, tokens, targets });
  }
  return out;
}

function bf16Round(x: Float32Array): Float32Array {
  const u = new Uint32Array(x.buffer.slice(0));
  for (let i = 0; i < u.length; i++) u[i] = ((u[i]! + 0x7fff + ((u[i]! >>> 16) & 1)) & 0xffff0000) >>> 0;
  return new Float32Array(u.buffer);
}


const { backend } = await selectBackend();
const batches = markovBatches(Math.max(1, steps));
const report: Record<string, unknown> = { device: backend.description, config, batch: [B, L], steps, lr, optimizer };
let failures = 0;

interface ParityCase {
  readonly name: string;
  readonly kind: 'causal-lm' | 'masked-lm';
  readonly configJson: Record<string, unknown>;
  readonly build: (dtype: FloatDType) => LanguageModel;
  readonly batches: HostBatch[];
}

/**
 * BERT's masked-LM view of the same sequences: 15% of positions replaced by a mask token, the rest
 * ignored. The mask token is 1, not the pad token 0: HF's word embedding has padding_idx = 0 and never
 * updates that row from the lookup, which fuseformer does not replicate (a pad token only ever sits in
 * padded positions, whose gradient is zero anyway).
 */
function maskedBatches(source: HostBatch[]): HostBatch[] {
  let s = 777;
  const rand = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s / 2 ** 32; };
  return source.map((b) => {
    const tokens = b.tokens.slice(), targets = new Int32Array(tokens.length).fill(-100);
    for (let i = 0; i < tokens.length; i++) if (rand() < 0.15) { targets[i] = tokens[i]!; tokens[i] = 1; }
    return { ...b, tokens, targets };
  });
}

const bertConfig: BertConfig = {
  vocabSize: config.vocabSize, hidden: 256, layers: 4, heads: 4, ffn: 1024, activation: 'gelu', maxPositions: 128,
  typeVocabSize: 2, layerNormEps: 1e-12, hiddenDropout: 0, attentionDropout: 0, padTokenId: 0,
};
const CASES: ParityCase[] = [
  { name: 'GPT-2', kind: 'causal-lm', configJson: gpt2ConfigToJson(config), build: (dtype) => new Gpt2Model(backend, config, dtype), batches },
  { name: 'BERT', kind: 'masked-lm', configJson: bertConfigToJson(bertConfig), build: (dtype) => new BertModel(backend, bertConfig, dtype), batches: maskedBatches(batches) },
];

for (const c of CASES) {
  // Initial weights: our own init, rounded to bf16 so both dtypes start from exactly the same values.
  const init = c.build('f32');
  init.params.initialize(42n);
  const weights = new Map([...init.params.download()].map(([name, t]) => [name, { shape: t.shape, data: bf16Round(t.data) }]));
  init.params.free();
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    const dir = mkdtempSync(join(tmpdir(), `fuseformer-parity-${dtype}-`));
    writeFileSync(join(dir, 'config.json'), JSON.stringify(c.configJson));
    writeSafetensors(join(dir, 'model.safetensors'), [...weights].map(([name, t]) => ({ name, dtype: 'F32' as const, shape: t.shape, bytes: new Uint8Array(t.data.buffer) })));
    const toList = (a: Int32Array) => Array.from({ length: B }, (_, r) => Array.from(a.subarray(r * L, (r + 1) * L)));
    writeFileSync(join(dir, 'batch.json'), JSON.stringify({
      kind: c.kind, dtype, tokens: c.batches.map((b) => toList(b.tokens)), targets: c.batches.map((b) => toList(b.targets)),
      steps, lr, beta1: optimizer.beta1, beta2: optimizer.beta2, eps: optimizer.eps,
      weight_decay: optimizer.weightDecay, max_grad_norm: optimizer.maxGradNorm,
    }));
    const python = spawnSync('python3', ['bench/hf_reference.py', dir], { encoding: 'utf8', timeout: 600_000 });
    if (python.status !== 0) throw new Error(`hf_reference.py failed: ${python.stderr || python.error}`);
    const reference = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as { loss: number; curve: number[] };
    const refGrads = SafetensorsReader.open(join(dir, 'reference.safetensors'));

    const model = c.build(dtype);
    model.params.upload(weights, 'parity weights');
    const runner = new StepRunner(model, { maxBatch: B, maxSeqLen: L, optimizer });
    runner.syncMasterFromParams();
    const first = runner.trainStep(c.batches[0]!, 0);
    const tolerance = dtype === 'f32' ? 1e-4 : 1e-2;
    let worst = { name: '', error: 0 };
    const perTensor: Record<string, number> = {};
    const hfGrads = new Map(model.params.names.map((name) => [name, new Float32Array(refGrads.read(name).bytes.slice().buffer)]));
    const floor = gradientErrorFloor(hfGrads.values());
    for (const [name, theirs] of hfGrads) {
      const ours = (backend.download(model.params.param(name).grad) as Float32Array).map((g) => g * first.gradScale);
      // Padded vocabulary rows (beyond HF's) come last and must be exactly zero.
      if (ours.subarray(theirs.length).some((g) => g !== 0)) throw new Error(`${name}: padding rows of the gradient are not zero`);
      const error = gradientRelError(ours.subarray(0, theirs.length), theirs, floor);
      perTensor[name] = error;
      if (!(error <= worst.error)) worst = { name, error };
    }
    const lossError = Math.abs(first.loss - reference.loss) / reference.loss;
    const gradsOk = worst.error <= tolerance && lossError <= tolerance;
    if (!gradsOk) failures++;
    console.log(`${c.name} ${dtype}: loss ours ${first.loss.toFixed(6)} HF ${reference.loss.toFixed(6)} (rel ${lossError.toExponential(2)}); worst gradient ${worst.name} rel err ${worst.error.toExponential(2)} (tolerance ${tolerance}) ${gradsOk ? 'OK' : 'FAIL'}`);
    const entry: Record<string, unknown> = { lossOurs: first.loss, lossHf: reference.loss, lossRelError: lossError, worstGradient: worst, gradientRelErrors: perTensor, ok: gradsOk };

    if (reference.curve.length > 0) {
      // The probe above moved AdamW's moments: start the curve from the same init with a fresh optimizer.
      model.params.upload(weights, 'parity weights');
      const trainer = new StepRunner(model, { maxBatch: B, maxSeqLen: L, optimizer });
      trainer.syncMasterFromParams();
      const curve: number[] = [];
      for (let step = 0; step < steps; step++) curve.push(trainer.trainStep(c.batches[step]!, lr).loss);
      trainer.dispose();
      let worstCurve = 0;
      for (let i = 0; i < steps; i++) worstCurve = Math.max(worstCurve, Math.abs(curve[i]! - reference.curve[i]!) / reference.curve[i]!);
      const finalGap = Math.abs(curve[steps - 1]! - reference.curve[steps - 1]!) / reference.curve[steps - 1]!;
      const curveOk = worstCurve <= 0.01;
      if (!curveOk) failures++;
      console.log(`${c.name} ${dtype} ${steps}-step curve: ours ${curve[0]!.toFixed(4)} → ${curve[steps - 1]!.toFixed(4)}, HF ${reference.curve[0]!.toFixed(4)} → ${reference.curve[steps - 1]!.toFixed(4)}; worst step gap ${(100 * worstCurve).toFixed(2)}%, final ${(100 * finalGap).toFixed(2)}% ${curveOk ? 'OK' : 'FAIL'}`);
      Object.assign(entry, { curveOurs: curve, curveHf: reference.curve, worstCurveGap: worstCurve, finalCurveGap: finalGap, curveOk });
    }
    report[`${c.name} ${dtype}`] = entry;
    runner.dispose();
    model.params.free();
  }
}
report.failures = failures;
if (cli.json) writeFileSync(cli.json, JSON.stringify(report, null, 1));
console.log(failures === 0 ? 'parity: all checks passed' : `parity: ${failures} check(s) failed`);
process.exitCode = failures === 0 ? 0 : 1;
