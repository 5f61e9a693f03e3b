// Decoder rerankers (infer/decoder-reranker.ts through the Reranker) against sentence-transformers 6's
// CrossEncoder.predict on tiny random checkpoints (test/fixtures/qwen3-reranker/make.py): a Qwen3-Reranker-shaped
// causal LM (LogitScore: logit("yes") − logit("no"), the pair rendered by a chat template with query / document
// roles, prompts as the system message, one pair cut with the template's tail restored) and a
// Qwen3ForSequenceClassification (score.weight, the tokenizer's pair, HF's pooling before a trailing pad token);
// the same without sentence-transformers files, under a small pass budget, with Identity activation; the refusals.

import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { ChatPairEncoder } from '../../src/infer/chat-pairs.js';
import { Embedder } from '../../src/infer/embedder.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { Reranker } from '../../src/infer/reranker.js';
import { createTokenizer, loadTokenizer } from '../../src/io/tokenizer.js';

const FIXTURE = join('test', 'fixtures', 'qwen3-reranker');
interface Case { prompt_name: string | null; ids: number[][]; scores: number[] }
interface Model { max_length: number; cases: Case[] }
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as { query: string; documents: string[]; causal: Model & { yes: number; no: number }; seq_cls: Model };
const root = mkdtempSync(join(tmpdir(), 'fuseformer-decoder-rerank-'));
after(() => rmSync(root, { recursive: true, force: true }));

function assertScores(actual: readonly number[], wanted: readonly number[], label: string, tolerance = 1e-6): void {
  assert.equal(actual.length, wanted.length, label);
  actual.forEach((s, i) => assert.ok(Math.abs(s - wanted[i]!) < tolerance, `${label}: document ${i}: ${s} vs ${wanted[i]}`));
}

/** A copy of a fixture directory with `edit` applied (files written or removed). */
function copyOf(name: string, edit: Record<string, string | null>): string {
  const dir = join(root, `${name}-${Object.keys(edit).join('-').replace(/[^a-z]/gi, '')}-${Math.random().toString(36).slice(2, 8)}`);
  cpSync(join(FIXTURE, name), dir, { recursive: true });
  for (const [file, text] of Object.entries(edit)) {
    if (text === null) rmSync(join(dir, file), { recursive: true, force: true });
    else writeFileSync(join(dir, file), text);
  }
  return dir;
}

test('a Qwen3-Reranker-shaped CrossEncoder: logit("yes") − logit("no") through the chat template, the prompts as instructions — CrossEncoder.predict\'s scores and tokens', () => {
  const reranker = Reranker.load(join(FIXTURE, 'causal'), new CpuBackend(), { dtype: 'f32', batchSize: 3 });
  try {
    assert.equal(reranker.maxTokens, expected.causal.max_length);
    assert.deepEqual(Object.keys(reranker.prompts), ['web', 'whales']);
    for (const c of expected.causal.cases) {
      const label = c.prompt_name ?? 'no prompt';
      const options = c.prompt_name ? { promptName: c.prompt_name } : {};
      const prompt = reranker.promptText(options);
      expected.documents.forEach((d, i) => assert.deepEqual(reranker.scorer.encode(expected.query, d, reranker.maxTokens, prompt).ids, c.ids[i], `${label}: pair ${i}'s tokens`));
      const { scores, truncated, tokens } = reranker.rerank(expected.query, expected.documents, options);
      assert.equal(truncated, 1, `${label}: the long document is cut`);
      assert.equal(tokens, c.ids.reduce((n, ids) => n + ids.length, 0));
      assertScores(scores, c.scores, label);
    }
    // A prompt given as text is the same instruction as the named one.
    assertScores(reranker.rerank(expected.query, expected.documents, { prompt: reranker.prompts['whales']! }).scores, expected.causal.cases[2]!.scores, 'prompt text');
  } finally {
    reranker.free();
  }
});

test('a decoder reranker\'s warm-up runs a batch at each warm-up length and leaves the shared-prefix statistics and every score as they were', () => {
  const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as { query: string; documents: string[] };
  const reranker = Reranker.load(join(FIXTURE, 'causal'), new CpuBackend(), { dtype: 'f32', batchSize: 2, maxTokens: 80 });
  try {
    const before = reranker.rerank(expected.query, expected.documents);
    const stats = { ...reranker.scorer.prefixStats! };
    assert.deepEqual(reranker.warmUp(), [16, 32, 64, 80]);
    assert.deepEqual(reranker.scorer.prefixStats, stats);
    assert.deepEqual(reranker.rerank(expected.query, expected.documents), before);
  } finally {
    reranker.free();
  }
});

test('a cut pair keeps the chat template\'s tail: the tokens after the document, written over its end', () => {
  const tokenizer = loadTokenizer(join(FIXTURE, 'causal'));
  const pairs = new ChatPairEncoder(tokenizer, { text: tokenizer.chatTemplate!, source: 'fixture' });
  assert.equal(pairs.format, 'flat');
  const whole = pairs.encode('q', expected.documents[1]!, 10_000);
  assert.equal(whole.truncated, false);
  const cut = pairs.encode('q', expected.documents[1]!, 60);
  assert.equal(cut.truncated, true);
  assert.equal(cut.ids.length, 60);
  const tail = tokenizer.encode('<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n', { addSpecialTokens: false });
  assert.deepEqual(cut.ids.slice(-tail.length), tail, 'the tail after the document');
  assert.deepEqual(whole.ids.slice(-tail.length), tail);
  assert.deepEqual(cut.ids.slice(0, 60 - tail.length), whole.ids.slice(0, 60 - tail.length), 'the head as rendered');
  // restore_suffix: false (processing_kwargs.chat_template) cuts plainly.
  const plain = new ChatPairEncoder(tokenizer, { text: tokenizer.chatTemplate!, source: 'fixture' }, { restore_suffix: false }).encode('q', expected.documents[1]!, 60);
  assert.deepEqual(plain.ids, whole.ids.slice(0, 60));
});

test('a pair of exactly the limit gets the tail written back as sentence-transformers writes it (every row that reaches max_length), uncut', () => {
  // A WordPiece vocabulary without digits: both fillers end in [UNK], so the tail found takes one [UNK] of the
  // document with it (bench:rerank's tokenizer; one 512-token pair differed from sentence-transformers' by 6.2e-3).
  const vocab = ['[UNK]', '<s>', '</s>', 'q', 'a', 'b', 'c', 'x', 'yes'];
  const tokenizer = createTokenizer({
    pre_tokenizer: { type: 'WhitespaceSplit' },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', vocab: Object.fromEntries(vocab.map((t, i) => [t, i])) },
  });
  const template = "<s> {{ messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first }} x {{ messages | selectattr('role', 'eq', 'document') | map(attribute='content') | first }} </s> yes";
  const pairs = new ChatPairEncoder(tokenizer, { text: template, source: 'test' });
  const ids = (text: string) => tokenizer.encode(text, { addSpecialTokens: false });
  const whole = ids('<s> q x a b c </s> yes');
  assert.deepEqual(pairs.encode('q', 'a b c', 100), { ids: whole, truncated: false });
  // At exactly the limit: the tail ([UNK] </s> yes) over the last three tokens, as sentence-transformers does.
  assert.deepEqual(pairs.encode('q', 'a b c', whole.length), { ids: [...whole.slice(0, -3), 0, 2, 8], truncated: false });
  assert.deepEqual(pairs.encode('q', 'a b c', whole.length - 1), { ids: [...whole.slice(0, -4), 0, 2, 8], truncated: true });
});

test('a decoder …ForSequenceClassification: score.weight at the last token that is not the pad id, the tokenizer\'s pair — CrossEncoder.predict\'s scores', () => {
  const reranker = Reranker.load(join(FIXTURE, 'seq-cls'), new CpuBackend(), { dtype: 'f32', batchSize: 2 });
  try {
    const c = expected.seq_cls.cases[0]!;
    assert.equal(reranker.maxTokens, expected.seq_cls.max_length);
    const pad = loadTokenizer(join(FIXTURE, 'seq-cls')).padTokenId;
    expected.documents.forEach((d, i) => {
      const ids = [...c.ids[i]!];
      while (ids[ids.length - 1] === pad) ids.pop(); // HF pools before a trailing pad token; fuseformer drops it
      assert.deepEqual(reranker.scorer.encode(expected.query, d, reranker.maxTokens).ids, ids, `pair ${i}'s tokens`);
    });
    const { scores, truncated } = reranker.rerank(expected.query, expected.documents);
    assert.equal(truncated, 1);
    assertScores(scores, c.scores, 'seq-cls');
    assert.ok(Math.abs(c.scores[4]! - c.scores[0]!) < 1e-6, 'HF scores a document ending in the pad token as the one without it');
  } finally {
    reranker.free();
  }
});

test('without sentence-transformers files a causal LM scores "yes" against "no" as CrossEncoder defaults to; a small pass budget changes no score', () => {
  const bare = copyOf('causal', { 'modules.json': null, '1_LogitScore': null, 'config_sentence_transformers.json': null, 'sentence_bert_config.json': null });
  const reranker = Reranker.load(bare, new CpuBackend(), { dtype: 'f32', maxPassTokens: 230 });
  try {
    assert.equal(reranker.maxTokens, 112, 'the tokenizer\'s model_max_length');
    assertScores(reranker.rerank(expected.query, expected.documents).scores, expected.causal.cases[0]!.scores, 'bare causal LM, 2 pairs a pass');
    assert.throws(() => reranker.rerank(expected.query, expected.documents, { promptName: 'web' }), /no prompt named 'web'; the model has no named prompts/);
  } finally {
    reranker.free();
  }
});

test('a causal reranker computes each query\'s prompt once a pass (its shared prefix): two instructions\' pairs interleaved give CrossEncoder.predict\'s scores, with the prefix shared and not', () => {
  const cases = expected.causal.cases.filter((c) => c.prompt_name !== null);
  for (const maxSharedPrefix of [undefined, 0]) {
    const reranker = Reranker.load(join(FIXTURE, 'causal'), new CpuBackend(), { dtype: 'f32', batchSize: 3, ...(maxSharedPrefix === undefined ? {} : { maxSharedPrefix }) });
    try {
      // Pairs of the two prompts alternate; the reranker batches each prompt's pairs together.
      const pairs = expected.documents.flatMap((document) => cases.map((c) => ({ query: expected.query, document, prompt: reranker.prompts[c.prompt_name!]! })));
      const { scores } = reranker.scorePairs(pairs);
      cases.forEach((c, k) => assertScores(scores.filter((_, i) => i % cases.length === k), c.scores, `${c.prompt_name} (maxSharedPrefix ${maxSharedPrefix ?? 'default'})`));
      const stats = (reranker.scorer as unknown as { encoder: { prefixStats: { passes: number; savedTokens: number } } }).encoder.prefixStats;
      const batches = Math.ceil(expected.documents.length / 3) * cases.length;
      if (maxSharedPrefix === 0) assert.deepEqual([stats.passes, stats.savedTokens], [0, 0]);
      else assert.equal(stats.passes, batches, 'every batch one prompt\'s pairs, its prefix shared');
    } finally {
      reranker.free();
    }
  }
});

test('scorePairsAsync reports each batch as it is read: a packed decoder\'s pairs in their given order (a request\'s finish together), padded passes\' longest first; scorePairs keeps longest first', async () => {
  const documents = [...expected.documents, ...expected.documents.map((d) => `${d} ${d}`)];
  for (const packedPasses of [true, false]) {
    const reranker = Reranker.load(join(FIXTURE, 'causal'), new CpuBackend(), { dtype: 'f32', batchSize: 2, packedPasses });
    try {
      assert.equal(reranker.scorer.packedPasses, packedPasses);
      const pairs = documents.map((document) => ({ query: expected.query, document }));
      const reported: number[][] = [];
      const scored = await reranker.scorePairsAsync(pairs, (indices, sofar) => {
        reported.push([...indices].sort((a, b) => a - b));
        indices.forEach((i) => assert.ok(Number.isFinite(sofar.scores[i]!) && sofar.tokens[i]! > 0, `pair ${i} scored when reported`));
      });
      assert.deepEqual(reported.flat().sort((a, b) => a - b), pairs.map((_, i) => i), 'every pair reported once');
      const size = (i: number) => documents[i]!.length;
      if (packedPasses) assert.deepEqual(reported, Array.from({ length: Math.ceil(pairs.length / 2) }, (_, k) => [2 * k, 2 * k + 1].filter((i) => i < pairs.length)));
      else reported.slice(1).forEach((batch, k) => assert.ok(Math.max(...batch.map(size)) <= Math.min(...reported[k]!.map(size)), 'longest first'));
      assertScores(scored.scores, reranker.scorePairs(pairs).scores, `packedPasses ${packedPasses}`, 1e-6);
    } finally {
      reranker.free();
    }
  }
});

test('activation_fn Identity gives the logit itself; the default prompt applies unless another is named', () => {
  const settings = JSON.parse(readFileSync(join(FIXTURE, 'causal', 'config_sentence_transformers.json'), 'utf8')) as Record<string, unknown>;
  const dir = copyOf('causal', { 'config_sentence_transformers.json': JSON.stringify({ ...settings, activation_fn: 'torch.nn.modules.linear.Identity', default_prompt_name: 'whales' }) });
  const reranker = Reranker.load(dir, new CpuBackend(), { dtype: 'f32' });
  try {
    const logit = (p: number) => Math.log(p / (1 - p));
    assertScores(reranker.rerank(expected.query, expected.documents).scores, expected.causal.cases[2]!.scores.map(logit), 'identity, default prompt "whales"', 1e-5);
    assertScores(reranker.rerank(expected.query, expected.documents, { promptName: 'web' }).scores, expected.causal.cases[1]!.scores.map(logit), 'identity, "web"', 1e-5);
  } finally {
    reranker.free();
  }
});

test('decoder rerankers refuse what they cannot score: a template without the pair roles, unknown tokens and modules, BERT options', () => {
  const cpu = new CpuBackend();
  const chatOnly = { text: "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content if m.role != 'document' else '' }}<|im_end|>\n{% endfor %}", source: 'chat-only.jinja' };
  assert.throws(() => Reranker.load(join(FIXTURE, 'causal'), cpu, { dtype: 'f32', chatTemplate: chatOnly }), /chat-only\.jinja: the chat template does not render the pair's document role .*selectattr\("role", "eq", "document"\)/);
  assert.throws(() => Reranker.load(join(FIXTURE, 'causal'), cpu, { attention: 'flash' }), /attention path is for BERT cross-encoders/);
  assert.throws(() => Reranker.load(join('test', 'fixtures', 'cross-encoder', 'bert'), cpu, { chatTemplate: chatOnly }), /a chat template is for decoder rerankers/);
  const farToken = copyOf('causal', { '1_LogitScore/config.json': JSON.stringify({ true_token_id: 100000, false_token_id: expected.causal.no }) });
  assert.throws(() => Reranker.load(farToken, cpu, { dtype: 'f32' }), /token id 100000 is past tensor 'model\.embed_tokens\.weight'/);
  const modules = JSON.parse(readFileSync(join(FIXTURE, 'causal', 'modules.json'), 'utf8')) as unknown[];
  const pooled = copyOf('causal', { 'modules.json': JSON.stringify([...modules, { idx: 2, name: '2', path: '', type: 'sentence_transformers.base.modules.normalize.Normalize' }]) });
  assert.throws(() => Reranker.load(pooled, cpu, { dtype: 'f32' }), /module 2 is sentence_transformers\.base\.modules\.normalize\.Normalize, which fuseformer rerank does not run/);
  const sigmoid = copyOf('causal', { 'config_sentence_transformers.json': JSON.stringify({ activation_fn: 'torch.nn.modules.activation.Tanh' }) });
  assert.throws(() => Reranker.load(sigmoid, cpu, { dtype: 'f32' }), /activation_fn "torch\.nn\.modules\.activation\.Tanh" is not implemented/);
  const reranker = Reranker.load(join(FIXTURE, 'causal'), cpu, { dtype: 'f32' });
  try {
    assert.throws(() => reranker.rerank('q', ['d'], { promptName: 'nope' }), /rerank: no prompt named 'nope'; the model's prompts are 'web', 'whales'/);
    assert.throws(() => reranker.rerank('q', ['d'], { promptName: 'web', prompt: 'x' }), /give a prompt or a prompt name, not both/);
  } finally {
    reranker.free();
  }
});

test('templates/qwen3-reranker.jinja renders a pair in Qwen3-Reranker\'s model-card format, instruction or not', () => {
  const tokenizer = loadTokenizer(join(FIXTURE, 'causal'));
  const pairs = new ChatPairEncoder(tokenizer, { text: readFileSync(join('templates', 'qwen3-reranker.jinja'), 'utf8'), source: 'qwen3-reranker.jinja' });
  const prefix = '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n';
  const suffix = '<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n';
  const card = (instruction: string, query: string, document: string) => `${prefix}<Instruct>: ${instruction}\n<Query>: ${query}\n<Document>: ${document}${suffix}`;
  const tokens = (text: string) => tokenizer.encode(text, { addSpecialTokens: false });
  assert.deepEqual(pairs.encode('What do whales eat?', 'Krill.', 1000).ids, tokens(card('Given a web search query, retrieve relevant passages that answer the query', 'What do whales eat?', 'Krill.')));
  assert.deepEqual(pairs.encode('What do whales eat?', 'Krill.', 1000, 'Find food').ids, tokens(card('Find food', 'What do whales eat?', 'Krill.')));
});

test('a reranker directory used as an embedder or a generator says it is a reranker', () => {
  assert.throws(() => Embedder.load(join(FIXTURE, 'causal'), new CpuBackend()), /a sentence-transformers CrossEncoder \(a reranker\), not a SentenceTransformer: `fuseformer rerank` scores pairs with it/);
  assert.throws(() => loadDecoderModel(join(FIXTURE, 'seq-cls'), new CpuBackend()), /lacks 1 weight\(s\) .*'lm_head\.weight' .* — it is a …ForSequenceClassification checkpoint .*`fuseformer rerank` scores with it/);
});

