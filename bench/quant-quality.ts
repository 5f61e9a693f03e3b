// `npm run check:quant`: the quantization quality check of issue #7 (src/quant/quality.ts) — held-out
// perplexity of a GPT-2 trained on the embedded corpus, in floating point and with INT8 W8A8, INT4 RTN,
// INT4 AWQ and INT4 GPTQ weights running through the quantized ops. Exits with 1 when a target is
// missed (INT8 ≤ +1%, calibrated INT4 ≤ +4%).
//
//   node dist/bench/quant-quality.js [--backend auto|cpu|cuda] [--model DIR|PRESET] [--hidden N --layers N --heads N]
//        [--steps N --batch-size N --seq-len N --lr X] [--group 128] [--variants int8,int4-rtn,int4-awq,int4-gptq]
//        [--eval-batches N] [--calibration-samples N] [--json PATH]
//
// --model DIR evaluates a trained model directory (a `fuseformer train` checkpoint: model.safetensors +
// config.json); otherwise the preset (default gpt2-tiny, resized by --hidden/--layers/--heads) is trained
// first (defaults: CUDA 2000 steps of 16 × 256 at hidden 256, 6 layers; CPU 60 steps of 8 × 64).

import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { selectBackend, type BackendChoice } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import { ArgumentError } from '../src/errors.js';
import { GPT2_PRESETS } from '../src/models/gpt2.js';
import type { QualityVariant } from '../src/quant/quality.js';
import { QUALITY_VARIANTS, qualityTable, runQuantQuality } from '../src/quant/quality.js';

function int(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new ArgumentError(`--${name} must be a positive integer, got '${value}'`);
  return n;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      backend: { type: 'string' }, model: { type: 'string' }, hidden: { type: 'string' }, layers: { type: 'string' }, heads: { type: 'string' },
      steps: { type: 'string' }, 'batch-size': { type: 'string' }, 'seq-len': { type: 'string' }, lr: { type: 'string' }, dtype: { type: 'string' },
      group: { type: 'string' }, variants: { type: 'string' }, 'eval-batches': { type: 'string' }, 'calibration-samples': { type: 'string' }, json: { type: 'string' },
    },
  });
  const { backend, reason } = await selectBackend(values.backend as BackendChoice | undefined);
  const onGpu = backend.name === 'cuda';
  const dtype = (values.dtype ?? (onGpu ? 'bf16' : 'f32')) as FloatDType;
  const variants = (values.variants ?? QUALITY_VARIANTS.join(',')).split(',') as QualityVariant[];
  for (const v of variants) if (!QUALITY_VARIANTS.includes(v)) throw new ArgumentError(`--variants: unknown '${v}' (${QUALITY_VARIANTS.join(', ')})`);
  const seqLen = int('seq-len', values['seq-len'], onGpu ? 256 : 64);
  let model: Parameters<typeof runQuantQuality>[0]['model'] = values.model ?? 'gpt2-tiny';
  if (!values.model || values.hidden || values.layers || values.heads) {
    const base = GPT2_PRESETS[values.model ?? 'gpt2-tiny'];
    if (!base) throw new ArgumentError(`--hidden/--layers/--heads resize a preset (${Object.keys(GPT2_PRESETS).join(', ')}), not '${values.model}'`);
    const hidden = int('hidden', values.hidden, onGpu ? 256 : base.hidden);
    const config = { ...base, hidden, ffn: 4 * hidden, layers: int('layers', values.layers, onGpu ? 6 : base.layers), heads: int('heads', values.heads, onGpu ? 8 : base.heads), maxPositions: Math.max(base.maxPositions, seqLen) };
    model = { name: `gpt2 ${config.layers}×${config.hidden}`, config };
  }
  process.stderr.write(`check:quant on ${backend.description} (${reason}), ${dtype}\n`);
  const report = runQuantQuality({
    backend, model, dtype,
    train: { steps: int('steps', values.steps, onGpu ? 2000 : 60), batchSize: int('batch-size', values['batch-size'], onGpu ? 16 : 8), seqLen, lr: values.lr ? Number(values.lr) : 3e-3 },
    eval: { batchSize: onGpu ? 16 : 4, seqLen, maxBatches: int('eval-batches', values['eval-batches'], onGpu ? 16 : 4) },
    calibration: { samples: int('calibration-samples', values['calibration-samples'], onGpu ? 64 : 8), seqLen, batchSize: onGpu ? 16 : 4 },
    groupSize: int('group', values.group, 128), variants,
    ...(onGpu ? {} : { awq: { grid: 10, searchRows: 128 } }),
    log: (line) => process.stderr.write(`${line}\n`), progressStream: process.stderr,
  });
  const table = qualityTable(report);
  process.stdout.write(`\n${report.model} on ${report.backend}, ${report.evalTokens} held-out tokens:\n${table}\n`);
  const json = { date: new Date().toISOString(), ...report };
  if (values.json) writeFileSync(values.json, `${JSON.stringify(json, null, 2)}\n`);
  const missed = report.rows.filter((r) => r.pass === false);
  if (missed.length > 0) process.stdout.write(`missed: ${missed.map((r) => r.variant).join(', ')}\n`);
  return missed.length > 0 ? 1 : 0;
}

main().then((code) => { process.exitCode = code; }, (error: unknown) => {
  process.stderr.write(`check:quant: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exitCode = 1;
});
