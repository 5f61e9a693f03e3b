// The package's entry point: package.json's "main" and "types" name files the build writes, and importing it
// gives the public API on a machine without a GPU (nothing CUDA is loaded until selectBackend asks for it).

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

const root = fileURLToPath(new URL('../../../', import.meta.url));

test('package.json main and types exist after the build; the entry exports the public API', async () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { main: string; types: string };
  assert.ok(existsSync(join(root, pkg.main)), `main: ${pkg.main}`);
  assert.ok(existsSync(join(root, pkg.types)), `types: ${pkg.types}`);
  const api = await import(join(root, pkg.main)) as Record<string, unknown>;
  for (const name of ['selectBackend', 'CpuBackend', 'loadDecoderModel', 'generateText', 'ServingEngine', 'InferenceServer', 'trainLanguageModel', 'loadTokenizer', 'writeSafetensors', 'ArgumentError', 'BertEncoder', 'loadSeq2Seq', 'quantizeDecoderModel', 'padSequences', 'warmUp', 'quantizeDecoder', 'saveQuantizedModel', 'loadQuantizedModel', 'Embedder', 'DecoderEncoder', 'Reranker', 'EmbeddingServer', 'RerankServer']) {
    assert.equal(typeof api[name], 'function', name);
  }
  const backend = new (api['CpuBackend'] as new () => { name: string })();
  assert.equal(backend.name, 'cpu');
});
