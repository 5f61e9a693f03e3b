// The op-case harness the GPU suites share (src/testing/conformance.ts), checked on two CPU backends:
// a case passes against itself and names the outputs that differ when one backend is wrong;
// FUSEFORMER_TEST_OPS selects cases by substrings of their names.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { caseFailures, casesSelectedByEnv, testShardFromEnv } from '../../src/testing/conformance.js';
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

test('FUSEFORMER_TEST_SHARD=i/n: the shards of the selected cases are disjoint and cover them; a bad value is an error naming it', () => {
  const cases = Array.from({ length: 7 }, (_, i) => ({ name: `case ${i}${i % 2 === 0 ? ' even' : ''}` }));
  const shards = [0, 1, 2].map((i) => casesSelectedByEnv(cases, { FUSEFORMER_TEST_SHARD: `${i}/3` }).cases.map((c) => c.name));
  assert.deepEqual(shards, [['case 0 even', 'case 3', 'case 6 even'], ['case 1', 'case 4 even'], ['case 2 even', 'case 5']]);
  // Sharded after the name filter: the even cases 0, 2, 4, 6 split two ways.
  const even = [0, 1].map((i) => casesSelectedByEnv(cases, { FUSEFORMER_TEST_OPS: 'even', FUSEFORMER_TEST_SHARD: `${i}/2` }).cases.map((c) => c.name));
  assert.deepEqual(even, [['case 0 even', 'case 4 even'], ['case 2 even', 'case 6 even']]);
  assert.equal(testShardFromEnv({}), undefined);
  assert.deepEqual(testShardFromEnv({ FUSEFORMER_TEST_SHARD: ' 1/4 ' }), { index: 1, count: 4 });
  for (const bad of ['2/2', '1/0', '-1/2', '1', 'a/b', '1/2/3']) {
    assert.throws(() => testShardFromEnv({ FUSEFORMER_TEST_SHARD: bad }), /FUSEFORMER_TEST_SHARD must be i\/n with 0 <= i < n/, bad);
  }
});
