// sampleTokens' split probe (FUSEFORMER_SAMPLE_SPLITS): parsed as a positive integer or refused by name, and
// the split count a source bakes in (its slice of the row) follows the spec, one block walking the whole row at 1.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { forcedSplitsFromEnv, sampleTokensKey, sampleTokensSource, sampleTokensSplits } from '../../../../src/backend/cuda/kernels/sample-tokens.js';
import { clusterShapeFromEnv, sampleTokensCluster, sampleTokensClusterFour } from '../../../../src/backend/cuda/kernels/sample-tokens-cluster.js';

test('FUSEFORMER_SAMPLE_SPLITS: unset leaves the planner; a positive integer forces; anything else is named', () => {
  assert.equal(forcedSplitsFromEnv({}), undefined);
  assert.equal(forcedSplitsFromEnv({ FUSEFORMER_SAMPLE_SPLITS: '' }), undefined);
  assert.equal(forcedSplitsFromEnv({ FUSEFORMER_SAMPLE_SPLITS: '1' }), 1);
  assert.equal(forcedSplitsFromEnv({ FUSEFORMER_SAMPLE_SPLITS: '6' }), 6);
  for (const bad of ['0', '-2', '1.5', 'two']) assert.throws(() => forcedSplitsFromEnv({ FUSEFORMER_SAMPLE_SPLITS: bad }), /FUSEFORMER_SAMPLE_SPLITS must be a positive integer/);
});

test('the split count sets the slice each block walks: GPT-2\'s vocabulary in 4 by default, whole at 1', () => {
  assert.equal(sampleTokensSplits(50257, 8, 1024), 4);
  const slice = (splits: number) => Number(/constexpr int SLICE = (\d+);/.exec(sampleTokensSource({ dtype: 'bf16', classes: 50257, vec: 8, threads: 1024, splits }).source)![1]);
  assert.equal(slice(4), Math.ceil(6283 / 4));
  assert.equal(slice(1), 6283);
});

test('the preload probe (FUSEFORMER_SAMPLE_PRELOAD): its own key, the split\'s first vectors requested before the row\'s state', () => {
  const spec = { dtype: 'bf16' as const, classes: 50257, vec: 8, threads: 1024, splits: 4 };
  assert.equal(sampleTokensKey(spec), 'sample_tokens.bf16.v50257.vec8.t1024.s4');
  assert.equal(sampleTokensKey({ ...spec, preload: true }), 'sample_tokens.bf16.v50257.vec8.t1024.s4.pre');
  const source = sampleTokensSource({ ...spec, preload: true }).source;
  assert.match(source, /constexpr bool PRELOAD = true;/);
  // The preload comes before the first read of the row's state.
  assert.ok(source.indexOf('load_first_chunk(logits') < source.indexOf('if (finished[b] != 0) return;'));
  assert.match(sampleTokensSource(spec).source, /constexpr bool PRELOAD = false;/);
});

test('the cluster sampler\'s plan: 8 blocks of 512 threads from 4096 vectors a row, none below; with FUSEFORMER_SAMPLE_CLUSTER_FOUR, 4 blocks below and at many rows of a short row; FUSEFORMER_SAMPLE_CLUSTER_SHAPE parsed or refused by name', () => {
  assert.equal(sampleTokensClusterFour.enabled, process.env['FUSEFORMER_SAMPLE_CLUSTER_FOUR'] !== '0', 'four-block clusters by default');
  const saved = sampleTokensClusterFour.enabled;
  sampleTokensClusterFour.enabled = false;
  try {
    assert.deepEqual(sampleTokensCluster(50257, 8), { cluster: 8, threads: 512 });
    assert.deepEqual(sampleTokensCluster(128256, 8), { cluster: 8, threads: 512 });
    assert.deepEqual(sampleTokensCluster(16384, 1), { cluster: 8, threads: 512 });
    assert.equal(sampleTokensCluster(32000, 8), null, '4000 vectors: the one-block kernel');
    assert.deepEqual(sampleTokensCluster(50257, 8, 32, 132), { cluster: 8, threads: 512 });
    assert.equal(sampleTokensCluster(16383, 8), null);
    sampleTokensClusterFour.enabled = true;
    assert.deepEqual(sampleTokensCluster(16384, 8), { cluster: 4, threads: 512 }, '2048 vectors: four blocks');
    // Many rows: GPT-2's 6.3k vectors split 4 ways once 8 blocks a row pass the SMs; Llama 3's 16k stay at 8.
    assert.deepEqual(sampleTokensCluster(50257, 8, 16, 132), { cluster: 8, threads: 512 });
    assert.deepEqual(sampleTokensCluster(50257, 8, 17, 132), { cluster: 4, threads: 512 });
    assert.deepEqual(sampleTokensCluster(128256, 8, 32, 132), { cluster: 8, threads: 512 });
    assert.equal(sampleTokensCluster(16383, 8), null);
  } finally {
    sampleTokensClusterFour.enabled = saved;
  }
  assert.equal(clusterShapeFromEnv({}), undefined);
  assert.deepEqual(clusterShapeFromEnv({ FUSEFORMER_SAMPLE_CLUSTER_SHAPE: '4,1024' }), { cluster: 4, threads: 1024 });
  for (const bad of ['8', '3,512', '8,500', '8,512,1', 'x']) assert.throws(() => clusterShapeFromEnv({ FUSEFORMER_SAMPLE_CLUSTER_SHAPE: bad }), /FUSEFORMER_SAMPLE_CLUSTER_SHAPE must be C,THREADS/);
});
