// `fuseformer rerank`: a cross-encoder's scores (test/fixtures/cross-encoder) and a Qwen3-Reranker-style causal
// LM's (test/fixtures/qwen3-reranker, with its prompts) ranked best first as one JSON object, with --top-n and
// --return-documents; bad options named.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { runRerank } from '../../src/cli/rerank.js';
import { ArgumentError } from '../../src/errors.js';

const FIXTURE = join('test', 'fixtures', 'cross-encoder');
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as { query: string; documents: string[]; models: Record<string, Record<string, number[]>> };

async function captured(argv: string[]): Promise<{ code: number; out: string }> {
  let out = '';
  const code = await runRerank(argv, { out: (text) => { out += text; }, log: () => {} });
  return { code, out };
}

interface Response { model: string; results: { index: number; relevance_score: number; document?: { text: string } }[]; usage: { total_tokens: number } }

test('rerank prints the documents best first with CrossEncoder\'s scores; --top-n and --return-documents', async () => {
  const scores = expected.models['xlm-roberta']!['62']!;
  const argv = ['--model', join(FIXTURE, 'xlm-roberta'), '--query', expected.query, ...expected.documents.flatMap((d) => ['--document', d]), '--backend', 'cpu', '--dtype', 'f32', '--max-length', '62'];
  const { code, out } = await captured([...argv, '--top-n', '3', '--return-documents']);
  assert.equal(code, 0);
  const response = JSON.parse(out) as Response;
  const best = scores.map((s, i) => ({ s, i })).sort((a, b) => b.s - a.s).slice(0, 3);
  assert.deepEqual(response.results.map((r) => r.index), best.map((b) => b.i));
  response.results.forEach((r) => {
    assert.ok(Math.abs(r.relevance_score - scores[r.index]!) < 1e-6);
    assert.equal(r.document?.text, expected.documents[r.index]);
  });
  assert.ok(response.usage.total_tokens > 0);
  const all = JSON.parse((await captured(argv)).out) as Response;
  assert.equal(all.results.length, expected.documents.length);
  assert.equal(all.results[0]!.document, undefined);
});

test('rerank names what is missing or wrong', async () => {
  const rejects = (argv: string[], pattern: RegExp) => assert.rejects(captured(argv), (e: unknown) => e instanceof ArgumentError && pattern.test(e.message), String(pattern));
  const model = join(FIXTURE, 'bert');
  await rejects(['--query', 'q', '--document', 'd'], /--model DIR is required/);
  await rejects(['--model', model, '--document', 'd'], /--query TEXT is required/);
  await rejects(['--model', model, '--query', 'q'], /--document TEXT is required/);
  await rejects(['--model', model, '--query', 'q', '--document', 'd', '--top-n', '0'], /--top-n must be an integer of at least 1, got '0'/);
  await rejects(['--model', model, '--query', 'q', '--document', 'd', '--max-length', '3'], /--max-length must be an integer of at least 4/);
  await assert.rejects(captured(['--model', join('test', 'fixtures', 'roberta', 'roberta'), '--query', 'q', '--document', 'd', '--backend', 'cpu']), /no sequence-classification head/);
  await assert.rejects(captured(['--model', model, '--query', 'q', '--document', 'd', '--backend', 'cpu', '--max-shared-prefix', '0']), /maxSharedPrefix applies to decoder rerankers/);
});

const DECODER = join('test', 'fixtures', 'qwen3-reranker');
const decoderExpected = JSON.parse(readFileSync(join(DECODER, 'expected.json'), 'utf8')) as { query: string; documents: string[]; causal: { cases: { prompt_name: string | null; scores: number[] }[] } };

test('rerank runs a Qwen3-Reranker-style causal LM: --prompt-name and --prompt as its instruction, --chat-template in place of its own', async () => {
  const argv = ['--model', join(DECODER, 'causal'), '--query', decoderExpected.query, ...decoderExpected.documents.flatMap((d) => ['--document', d]), '--backend', 'cpu', '--dtype', 'f32'];
  for (const c of decoderExpected.causal.cases) {
    const { code, out } = await captured([...argv, ...(c.prompt_name ? ['--prompt-name', c.prompt_name] : [])]);
    assert.equal(code, 0);
    const response = JSON.parse(out) as Response;
    assert.deepEqual(response.results.map((r) => r.index), c.scores.map((s, i) => ({ s, i })).sort((a, b) => b.s - a.s).map((b) => b.i), `${c.prompt_name}: best first`);
    response.results.forEach((r) => assert.ok(Math.abs(r.relevance_score - c.scores[r.index]!) < 1e-6, `${c.prompt_name}: document ${r.index}`));
  }
  const byText = JSON.parse((await captured([...argv, '--prompt', 'Find what whales eat'])).out) as Response;
  byText.results.forEach((r) => assert.ok(Math.abs(r.relevance_score - decoderExpected.causal.cases[2]!.scores[r.index]!) < 1e-6));
  // Every pair computed whole (no shared prefix): the same scores.
  const whole = JSON.parse((await captured([...argv, '--max-shared-prefix', '0'])).out) as Response;
  whole.results.forEach((r) => assert.ok(Math.abs(r.relevance_score - decoderExpected.causal.cases[0]!.scores[r.index]!) < 1e-6, `--max-shared-prefix 0: document ${r.index}`));
  const rejects = (extra: string[], pattern: RegExp) => assert.rejects(captured([...argv, ...extra]), (e: unknown) => e instanceof ArgumentError && pattern.test(e.message), String(pattern));
  await rejects(['--prompt', 'x', '--prompt-name', 'web'], /--prompt and --prompt-name: give one/);
  await rejects(['--prompt-name', 'nope'], /no prompt named 'nope'; the model's prompts are 'web', 'whales'/);
  await rejects(['--chat-template', '{{ messages[0].content }}'], /does not render the pair's document role/);
  await rejects(['--chat-template', 'no-such-file.jinja'], /--chat-template: 'no-such-file.jinja' is no file, nor a template/);
  await rejects(['--attention', 'flash'], /attention path is for BERT cross-encoders/);
  await rejects(['--max-shared-prefix', '1.5'], /--max-shared-prefix must be an integer of at least 0, got '1.5'/);
});
