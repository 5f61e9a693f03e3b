// RoPE frequencies for each rope_type against their definitions in transformers' modeling_rope_utils.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ropeFrequencies } from '../../src/infer/rope.js';
import type { LlamaConfig } from '../../src/models/llama.js';
import { LLAMA_PRESETS } from '../../src/models/llama.js';

const base: LlamaConfig = { ...LLAMA_PRESETS['llama-1.2B']!, ropeScaling: null };
const plain = (c: LlamaConfig) => Array.from({ length: c.headDim / 2 }, (_, i) => 1 / c.ropeTheta ** ((2 * i) / c.headDim));
const close = (a: number, b: number) => Math.abs(a - b) <= 1e-6 * Math.abs(b);

test('default and linear: 1/θ^(2i/d), divided by the factor', () => {
  const d = ropeFrequencies(base, 100);
  assert.equal(d.scale, 1);
  plain(base).forEach((f, i) => assert.ok(close(d.invFreq[i]!, f), `pair ${i}`));
  const linear = ropeFrequencies({ ...base, ropeScaling: { type: 'linear', factor: 4 } }, 100);
  plain(base).forEach((f, i) => assert.ok(close(linear.invFreq[i]!, f / 4), `pair ${i}`));
});

test('llama3 (Llama 3.2 1B): short wavelengths kept, long ones divided by 32, a monotone blend between', () => {
  const config = LLAMA_PRESETS['llama-1.2B']!;
  const r = ropeFrequencies(config, 4096), f = plain(config);
  const wavelength = (x: number) => (2 * Math.PI) / x;
  let blended = 0;
  f.forEach((x, i) => {
    const w = wavelength(x);
    if (w < 8192 / 4) assert.ok(close(r.invFreq[i]!, x), `pair ${i} kept`);
    else if (w > 8192 / 1) assert.ok(close(r.invFreq[i]!, x / 32), `pair ${i} divided`);
    else {
      blended++;
      assert.ok(r.invFreq[i]! < x && r.invFreq[i]! > x / 32, `pair ${i} blended`);
    }
    if (i > 0) assert.ok(r.invFreq[i]! < r.invFreq[i - 1]!, 'frequencies decrease');
  });
  assert.ok(blended > 0);
});

test('yarn: extrapolated high frequencies, interpolated low ones, cos/sin scaled by 0.1·ln(factor) + 1', () => {
  const config: LlamaConfig = { ...base, maxPositions: 4096, ropeScaling: { type: 'yarn', factor: 4, betaFast: 32, betaSlow: 1 } };
  const r = ropeFrequencies(config, 100), f = plain(config);
  assert.ok(Math.abs(r.scale - (0.1 * Math.log(4) + 1)) < 1e-12);
  assert.ok(close(r.invFreq[0]!, f[0]!));
  assert.ok(close(r.invFreq[31]!, f[31]! / 4));
  const explicit = ropeFrequencies({ ...config, ropeScaling: { type: 'yarn', factor: 4, betaFast: 32, betaSlow: 1, attentionFactor: 0.7 } }, 100);
  assert.equal(explicit.scale, 0.7);
});

test('dynamic: plain RoPE within the original context, refused beyond it', () => {
  const config: LlamaConfig = { ...base, maxPositions: 2048, ropeScaling: { type: 'dynamic', factor: 2 } };
  plain(config).forEach((x, i) => assert.ok(close(ropeFrequencies(config, 2048).invFreq[i]!, x)));
  assert.throws(() => ropeFrequencies(config, 2049), /rope_scaling "dynamic".*2049 positions passes the original context of 2048/);
});
