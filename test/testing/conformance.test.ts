// The op-case harness the GPU suites share (src/testing/conformance.ts), checked on two CPU backends:
// a case passes against itself and names the outputs that differ when one backend is wrong;
// FUSEFORMER_TEST_OPS selects cases by substrings of their names.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { caseFailures, casesSelectedByEnv } from '../../src/testing/conformance.js';
import { inferOpCases } from '../../src/testing/infer-op-cases.js';

const feed = inferOpCases(['f32']).find((c) => c.name.startsWith('feedTokens'))!;

test('caseFailures: none against the reference itself; the differing output named when a backend is wrong', () => {
  const cpu = new CpuBackend();
  assert.deepEqual(caseFailures(feed, cpu, new CpuBackend(), 7), []);
  // A backend whose feedTokens also overwrites the first row's token.
  class Wrong extends CpuBackend {
    override feedTokens(args: Parameters<Backend['feedTokens']>[0]): void {
      super.feedTokens(args);
      this.fill(this.view(args.tokens, 0, [1]), 123456);
    }
  }
  const wrong = new Wrong();
  const failed = caseFailures(feed, wrong, cpu, 7);
  assert.equal(failed.length, 1);
  assert.match(failed[0]!, /^tokens: /);
});

test('casesSelectedByEnv: every case without FUSEFORMER_TEST_OPS, else those naming one of its substrings', () => {
  const cases = [{ name: 'feedTokens rows=5' }, { name: 'decodeAdvance rows=5' }, { name: 'paged decodeAttention B=2' }];
  assert.deepEqual(casesSelectedByEnv(cases, {}), { cases, words: [] });
  assert.deepEqual(casesSelectedByEnv(cases, { FUSEFORMER_TEST_OPS: ' feedTokens , decodeAttention' }).cases.map((c) => c.name), ['feedTokens rows=5', 'paged decodeAttention B=2']);
  assert.deepEqual(casesSelectedByEnv(cases, { FUSEFORMER_TEST_OPS: 'nothing' }).cases, []);
});
