// The quantization pipeline end to end on the CPU backend (a small GPT-2, a few training steps): train
// on the embedded corpus, calibrate, quantize with every method, and evaluate held-out perplexity with
// the quantized ops inside the model. A short run barely trains the model, so this checks the pipeline
// — finite results, the quantized path equal to the float path on the dequantized weights, INT8 within
// its target — while `npm run check:quant` on a GPU judges the quality targets on a trained model.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { GPT2_PRESETS } from '../../src/models/gpt2.js';
import { qualityTable, runQuantQuality } from '../../src/quant/quality.js';

test('train → calibrate → quantize (INT8, INT4 RTN/AWQ/GPTQ, GPTQ act-order) → held-out perplexity, on the CPU', { timeout: 20 * 60_000 }, () => {
  const config = { ...GPT2_PRESETS['gpt2-tiny']!, hidden: 64, heads: 2, layers: 2, ffn: 256, maxPositions: 32 };
  const report = runQuantQuality({
    backend: new CpuBackend(), model: { name: 'gpt2 2×64', config }, dtype: 'f32',
    train: { steps: 12, batchSize: 4, seqLen: 32, lr: 5e-3 },
    eval: { batchSize: 4, seqLen: 32, maxBatches: 2 },
    calibration: { samples: 4, seqLen: 32, batchSize: 4 },
    groupSize: 32, variants: ['int8', 'int4-rtn', 'int4-awq', 'int4-gptq', 'int4-gptq-act-order'],
    awq: { grid: 5, searchRows: 32 },
  });
  const table = qualityTable(report);
  assert.ok(Number.isFinite(report.float.perplexity) && report.float.perplexity < 257, table);
  assert.equal(report.evalTokens, 2 * 4 * 32);
  assert.deepEqual(report.rows.map((r) => r.variant), ['int8', 'int4-rtn', 'int4-awq', 'int4-gptq', 'int4-gptq-act-order']);
  for (const r of report.rows) {
    assert.ok(Number.isFinite(r.perplexity), `${r.variant}: ${r.perplexity}\n${table}`);
    assert.ok(Math.abs(r.increase) < 0.05, `${r.variant} changes perplexity by ${(100 * r.increase).toFixed(2)}%\n${table}`);
    if (r.dequantizedPerplexity !== undefined) {
      assert.ok(Math.abs(r.dequantizedPerplexity / r.perplexity - 1) < 1e-5, `${r.variant}: quantized ops ${r.perplexity} vs dequantized float path ${r.dequantizedPerplexity}`);
    }
  }
  assert.equal(report.rows[0]!.pass, true, `INT8 within +1%\n${table}`);
});
