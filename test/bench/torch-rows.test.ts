// bench/torch-rows.ts: the HF decode rows kept from a PyTorch process that died before its summary line.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { torchRows } from '../../bench/torch-rows.js';

test('the rows printed before a crash are read back; the summary line, logs and a cut-off line are not rows', () => {
  const stdout = [
    '{"mode": "eager", "batch": 1, "result": {"ms_per_token": 6.5, "tokens_per_s": 153.8}}',
    'some torch log line',
    '{"mode": "static", "batch": 32, "result": {"error": "RuntimeError: out of memory"}}',
    '{"eager": {"1": {"ms_per_token": 6.5}}}',
    '{"mode": "static-compile", "batch": 1, "resu',
  ].join('\n');
  assert.deepEqual(torchRows(stdout), [
    { mode: 'eager', batch: 1, result: { ms_per_token: 6.5, tokens_per_s: 153.8 } },
    { mode: 'static', batch: 32, result: { error: 'RuntimeError: out of memory' } },
  ]);
  assert.deepEqual(torchRows(''), []);
});
