// Encoder-decoder generation on the CPU backend with a tiny random MarianMTModel directory written in a temp
// dir: loading (HF names, tied-table aliases), the incremental decoder against a full recompute at every step
// of a beam search, beam search with one beam against greedy search, HF's forced EOS and banned pad, results
// independent of how often the host reads (syncEvery), of graphs and of batching, text through tokenizer.json
// or Marian's source.spm / target.spm / vocab.json,
// and errors; pipelined host reads wait for every download they queue.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { generationSettingsFromJson } from '../../src/infer/seq2seq-config.js';
import { loadSeq2Seq, translate, translateText } from '../../src/infer/seq2seq.js';
import type { Translator } from '../../src/infer/seq2seq.js';
import { gpt2ConfigToJson, GPT2_PRESETS } from '../../src/models/gpt2.js';
import { freshSeed, Rng } from '../../src/testing/random.js';
import { EOS, PAD, randomSources, TINY_MARIAN, useMarianTokenizerFiles, WORDS, writeTinyMarian } from './marian-fixture.js';

const cpu = new CpuBackend();
const seed = freshSeed();
const note = `(seed ${seed})`;

function load(options: Parameters<typeof writeTinyMarian>[0] = {}): Translator {
  return loadSeq2Seq(writeTinyMarian({ eosBias: 0.7, ...options }), cpu);
}

test('loads a MarianMTModel directory: config, weights (position tables recomputed), generation settings, tokenizer', () => {
  const t = load();
  assert.deepEqual(t.unusedTensors, []);
  assert.equal(t.model.config.hidden, 16);
  assert.deepEqual(t.generation.bannedTokens, [PAD]);
  assert.deepEqual(t.generation.forcedEosTokenIds, [EOS]);
  assert.equal(t.generation.numBeams, 3);
  assert.equal(t.generation.renormalizeLogits, true);
  assert.ok(t.tokenizer);
  // The shared table under another of HF's names loads the same model, tied or not.
  const sources = randomSources(new Rng(seed), 2, 3, 7);
  for (const tieWordEmbeddings of [false, true]) {
    const config = { ...TINY_MARIAN, tieWordEmbeddings };
    const aliased = load({ config, sharedName: 'model.decoder.embed_tokens.weight' });
    assert.deepEqual(translate(aliased, sources), translate(load({ config }), sources), `tied ${tieWordEmbeddings} ${note}`);
  }
});

test('incremental decoding: every step’s logits equal a full recompute of each beam’s prefix (tied and untied heads)', () => {
  for (const tieWordEmbeddings of [false, true]) {
    const t = load({ seed: seed % 1000, config: { ...TINY_MARIAN, tieWordEmbeddings } });
    const sources = randomSources(new Rng(seed), 3, 2, 9);
    const beams = 3;
    let steps = 0;
    translate(t, sources, {
      numBeams: beams, maxNewTokens: 8,
      observeStep: ({ inputs, logits }) => {
        const rows = inputs.length, Vp = logits.length / rows, V = t.model.config.decoderVocabSize, L = inputs[0]!.length;
        const full = t.model.fullForwardLogits(inputs.map((_, r) => sources[Math.floor(r / beams)]!), inputs);
        let worst = 0;
        for (let r = 0; r < rows; r++) {
          for (let v = 0; v < V; v++) worst = Math.max(worst, Math.abs(logits[r * Vp + v]! - full[(r * L + L - 1) * V + v]!));
        }
        assert.ok(worst < 1e-4, `step at length ${L}: incremental and full logits differ by ${worst} ${note}`);
        steps++;
      },
    });
    assert.ok(steps >= 2, `observed ${steps} steps`);
  }
});

test('beam search with one beam gives greedy search’s sequences (HF stops both at the same point)', () => {
  const rng = new Rng(seed);
  for (const eosBias of [0, 0.7, 1.5]) {
    const t = load({ seed: (seed + Math.round(eosBias * 10)) % 1000, eosBias });
    const sources = randomSources(rng, 4, 2, 9);
    const greedy = translate(t, sources, { numBeams: 1, maxNewTokens: 10 });
    const beam = translate(t, sources, { numBeams: 1, strategy: 'beam', maxNewTokens: 10 });
    assert.deepEqual(beam.map((r) => r.tokens), greedy.map((r) => r.tokens), `eos bias ${eosBias} ${note}`);
    greedy.forEach((g, i) => assert.ok(Math.abs(beam[i]!.score - g.score / g.tokens.length) < 1e-5, `score ${i}: ${beam[i]!.score} vs ${g.score}/${g.tokens.length}`));
  }
});

test('HF semantics: the forced last token is EOS, the banned pad never appears, lengths stay within max_new_tokens', () => {
  const t = load({ eosBias: -3 }); // EOS rarely wins by itself: most sequences reach the forced end
  const sources = randomSources(new Rng(seed), 4, 2, 9);
  for (const numBeams of [1, 2, 4]) {
    for (const r of translate(t, sources, { numBeams, maxNewTokens: 5 })) {
      assert.ok(r.tokens.length >= 1 && r.tokens.length <= 5, `length ${r.tokens.length}`);
      assert.equal(r.tokens[r.tokens.length - 1], EOS, `beams ${numBeams}: ends with EOS ${note}`);
      assert.ok(!r.tokens.includes(PAD), 'the banned pad token');
      assert.equal(r.tokens.indexOf(EOS), r.tokens.length - 1, 'EOS only at the end');
    }
  }
});

test('results do not depend on syncEvery, pipelining, graphs or batching', () => {
  const t = load({ eosBias: 2 });
  const sources = randomSources(new Rng(seed), 5, 1, 12);
  const reference = translate(t, sources, { numBeams: 3, maxNewTokens: 9, syncEvery: 1, graphs: false, pipeline: false });
  for (const options of [{ syncEvery: 1 }, { syncEvery: 4 }, { syncEvery: 4, pipeline: false }, { syncEvery: 7 }, { syncEvery: 3, graphs: false }, { syncEvery: 2, pipeline: false, graphs: false },
    { batchSize: 1 }, { batchSize: 2, syncEvery: 2 }]) {
    const got = translate(t, sources, { numBeams: 3, maxNewTokens: 9, ...options });
    assert.deepEqual(got.map((r) => r.tokens), reference.map((r) => r.tokens), `${JSON.stringify(options)} ${note}`);
    got.forEach((r, i) => assert.ok(Math.abs(r.score - reference[i]!.score) < 1e-5, `${JSON.stringify(options)} score ${i}`));
  }
  // Early stopping and length penalty change the search, not its plumbing.
  const early = translate(t, sources, { numBeams: 3, maxNewTokens: 9, earlyStopping: true, lengthPenalty: 0.6, syncEvery: 1, pipeline: false });
  for (const options of [{ syncEvery: 4 }, { syncEvery: 1 }, { syncEvery: 4, pipeline: false }]) {
    assert.deepEqual(translate(t, sources, { numBeams: 3, maxNewTokens: 9, earlyStopping: true, lengthPenalty: 0.6, ...options }), early, JSON.stringify(options));
  }
  // Greedy search, pipelined or not.
  const greedy = translate(t, sources, { numBeams: 1, maxNewTokens: 9, syncEvery: 1, pipeline: false });
  assert.deepEqual(translate(t, sources, { numBeams: 1, maxNewTokens: 9, syncEvery: 2 }), greedy);
});

test('text in, text out through tokenizer.json', () => {
  const t = load();
  const [out] = translateText(t, ['a b c d']);
  assert.match(out!, /^([a-z]( [a-z])*)?$/, `decoded '${out}'`);
  const ids = translate(t, [[0, 1, 2, 3, EOS]])[0]!.tokens.filter((id) => id < WORDS.length);
  assert.equal(out, ids.map((id) => WORDS[id]).join(' '));
});

test('text in, text out through Marian\'s own files when there is no tokenizer.json (an opus-mt download)', () => {
  const dir = writeTinyMarian({ eosBias: 0.7 });
  rmSync(join(dir, 'tokenizer.json'));
  assert.throws(() => translateText(loadSeq2Seq(dir, cpu), ['a b']), /translateText: the model directory has no tokenizer \(tokenizer\.json, or Marian's source\.spm, target\.spm and vocab\.json\)/);
  useMarianTokenizerFiles(dir);
  const t = loadSeq2Seq(dir, cpu);
  assert.deepEqual(t.tokenizer!.encode('a b  c d'), [0, 1, 2, 3, EOS]);
  const [out] = translateText(t, ['a b  c d']);
  const ids = translate(t, [[0, 1, 2, 3, EOS]])[0]!.tokens.filter((id) => id < WORDS.length);
  assert.equal(out, ids.map((id) => WORDS[id]).join(' '));
});

test('bad input is refused with the problem named', () => {
  const t = load();
  assert.throws(() => translate(t, []), /expected a non-empty list of sources/);
  assert.throws(() => translate(t, [[1, 2], []]), /source 1 is empty/);
  assert.throws(() => translate(t, [[1, 29]]), /source 0 token 1 is 29; expected an id in \[0, 29\)/);
  assert.throws(() => translate(t, [[1]], { maxNewTokens: 41 }), /maxNewTokens 41 needs 41 decoder positions; the model has max_position_embeddings 40/);
  assert.throws(() => translate(t, [[1]], { numBeams: 0 }), /numBeams must be a positive integer/);
  const dir = writeTinyMarian({ generation: { do_sample: true } });
  assert.throws(() => loadSeq2Seq(dir, cpu), /generation_config.json: field "do_sample" is true; expected its default \(sampling/);
  const words = writeTinyMarian({ generation: { bad_words_ids: [[1, 2]] } });
  assert.throws(() => loadSeq2Seq(words, cpu), /field "bad_words_ids" .*longer bad words are not implemented/);
  const gpt2 = mkdtempSync(join(tmpdir(), 'fuseformer-gpt2-'));
  writeFileSync(join(gpt2, 'config.json'), JSON.stringify(gpt2ConfigToJson(GPT2_PRESETS['gpt2-124M']!)));
  assert.throws(() => loadSeq2Seq(gpt2, cpu), /describes a gpt2 model; the encoder-decoder engine runs MarianMTModel/);
  assert.equal(TINY_MARIAN.maxPositions, 40);
});

test('generation settings: HF defaults, lists of EOS ids, max_new_tokens, and refused fields', () => {
  const defaults = generationSettingsFromJson({}, 'g.json', TINY_MARIAN);
  assert.deepEqual(defaults, {
    decoderStartTokenId: PAD, padTokenId: PAD, eosTokenIds: [EOS], numBeams: 1, maxLength: 20, lengthPenalty: 1, earlyStopping: false,
    bannedTokens: [], forcedEosTokenIds: [], renormalizeLogits: false,
  });
  const set = generationSettingsFromJson({ eos_token_id: [EOS, 3], max_new_tokens: 7, early_stopping: 'never', length_penalty: 0.6, num_beams: 5, temperature: 0.3 }, 'g.json', TINY_MARIAN);
  assert.deepEqual([set.eosTokenIds, set.maxNewTokens, set.earlyStopping, set.lengthPenalty, set.numBeams], [[EOS, 3], 7, 'never', 0.6, 5]);
  assert.throws(() => generationSettingsFromJson({ early_stopping: 'sometimes' }, 'g.json', TINY_MARIAN), /field "early_stopping" is "sometimes"; expected true, false or "never"/);
  assert.throws(() => generationSettingsFromJson({ no_repeat_ngram_size: 3 }, 'g.json', TINY_MARIAN), /field "no_repeat_ngram_size" is 3; expected its default \(n-gram blocking/);
  assert.throws(() => generationSettingsFromJson({ eos_token_id: 29 }, 'g.json', TINY_MARIAN), /field "eos_token_id" is 29; expected token ids below the decoder vocabulary \(29\)/);
  // translate's maxNewTokens falls back to the file's max_new_tokens, then max_length − 1.
  const t = load();
  const long = translate(t, [[1, 2, EOS]], { numBeams: 2 })[0]!;
  assert.ok(long.tokens.length <= 11, 'max_length 12 → at most 11 new tokens');
});

test('pipelined reads wait for every download they queue, also for the chunk in flight when the search stops early', () => {
  // On CUDA a download never waited for keeps its page-locked staging buffer busy for good.
  let queued = 0, waited = 0;
  const inner = new CpuBackend();
  const counting = new Proxy(inner, {
    get(target, property) {
      if (property === 'downloadLater') {
        return (tensor: Parameters<CpuBackend['downloadLater']>[0]) => {
          queued++;
          const pending = target.downloadLater(tensor);
          return { wait: () => { waited++; return pending.wait(); } };
        };
      }
      const value = (target as unknown as Record<string | symbol, unknown>)[property];
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  const t = loadSeq2Seq(writeTinyMarian({ eosBias: 8 }), counting);
  const sources = randomSources(new Rng(seed), 4, 2, 10);
  const maxNewTokens = 30;
  const results = translate(t, sources, { numBeams: 3, maxNewTokens, earlyStopping: true, syncEvery: 2 });
  // A full-length search reads 14 chunks (28 forward steps; the forced last token needs none); this one
  // stops within the first, so the second chunk is in flight when it ends — 2 chunks of ids and scores.
  assert.ok(results.every((r) => r.tokens.length <= 2), `the search stopped early: lengths ${results.map((r) => r.tokens.length)} ${note}`);
  assert.equal(queued, 4, `${queued} downloads queued`);
  assert.equal(waited, queued, 'every queued download waited for');
  assert.deepEqual(results, translate(t, sources, { numBeams: 3, maxNewTokens, earlyStopping: true, syncEvery: 2, pipeline: false }));
});
