// `fuseformer serve` with a reranker: a sentence-transformers CrossEncoder over a causal LM or a decoder
// …ForSequenceClassification is routed to /v1/rerank, and `--rerank` routes a plain causal LM there; options
// for other servers are refused by name before any backend starts (the server itself: test/serve/rerank-server.test.ts).

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { runServe, SERVE_USAGE } from '../../src/cli/serve.js';

const RERANKER = join('test', 'fixtures', 'qwen3-reranker');

test('serve refuses options of other servers for rerankers, --rerank ones included', async () => {
  await assert.rejects(runServe(['--model', join(RERANKER, 'causal'), '--pooling', 'last']), /--pooling: '.*causal' is a cross-encoder, served as \/v1\/rerank; the option is for other models/);
  await assert.rejects(runServe(['--model', join(RERANKER, 'seq-cls'), '--max-running', '4']), /--max-running: '.*seq-cls' is a cross-encoder, served as \/v1\/rerank/);
  await assert.rejects(runServe(['--model', join('test', 'fixtures', 'qwen3', 'model'), '--rerank', '--reasoning-parser', 'qwen3']), /--reasoning-parser: '.*model' is served as a reranker \(--rerank\); the option is for other models/);
  await assert.rejects(runServe(['--model', join(RERANKER, 'causal'), '--chat-template', 'no-such-file.jinja']), /--chat-template: 'no-such-file\.jinja' is no file, nor a template/);
  // --max-queue bounds a reranker's queued documents: read and checked, not refused as another server's option.
  await assert.rejects(runServe(['--model', join(RERANKER, 'causal'), '--max-queue', '0']), /--max-queue must be an integer >= 1, got '0'/);
  assert.match(SERVE_USAGE, /--max-queue N {12}documents waiting at most \(default 16384; more get 429\)/);
  assert.match(SERVE_USAGE, /--rerank {17}serve a plain causal LM directory/);
});
