// tokenizer.json / tokenizer_config.json / chat_template.jinja contents that the Hugging Face JS library
// takes on trust: each is refused at load with the file and the field named, or (where only the chat
// endpoint needs it) kept for that endpoint to report, instead of ids that are undefined, text that is
// dropped, or a template from the wrong file.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { createTokenizer, loadTokenizer, TokenizerError } from '../../src/io/tokenizer.js';
import { scratchModelDirs } from './model-files.js';

const modelDir = scratchModelDirs('fuseformer-tokenizer-inputs-');


const BPE_VOCAB = ['<unk>', '<s>', 'h', 'e', 'l', 'o', ' ', 'he', 'll', 'llo', 'hello'];
const BPE_MERGES = ['h e', 'l l', 'll o', 'he llo'];

/** A small BPE tokenizer.json (no pre-tokenizer), with `model` fields and top-level fields replaced as given. */
function bpeJson(model: Record<string, unknown> = {}, top: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    version: '1.0',
    added_tokens: [{ id: 1, content: '<s>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null,
    ...top,
    model: {
      type: 'BPE', unk_token: '<unk>', byte_fallback: false,
      vocab: Object.fromEntries(BPE_VOCAB.map((token, id) => [token, id])), merges: BPE_MERGES,
      ...model,
    },
  };
}

/** An assert.throws matcher: a TokenizerError whose message starts with `prefix` and holds each of `parts`. */
function tokenizerError(prefix: string, ...parts: string[]): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof TokenizerError, `expected a TokenizerError, got ${String(e)}`);
    assert.ok(e.message.startsWith(prefix), `"${e.message}" should start with "${prefix}"`);
    for (const part of parts) assert.ok(e.message.includes(part), `"${e.message}" should mention ${part}`);
    return true;
  };
}

test('the small BPE tokenizer of these tests loads and encodes', () => {
  const bpe = createTokenizer(bpeJson(), {}, 'bpe.json');
  assert.deepEqual(bpe.encode('hello hello'), [10, 6, 10]);
  assert.deepEqual(bpe.encode('hex'), [7, 0], 'an unknown character becomes <unk>');
});

test('added tokens need a non-negative integer id and a string content', () => {
  for (const id of [undefined, '257', -1, 3.5, null]) {
    const json = bpeJson({}, { added_tokens: [{ id: 1, content: '<s>' }, { ...(id !== undefined && { id }), content: '<extra>', special: true }] });
    assert.throws(() => createTokenizer(json, {}, 'bpe.json'), tokenizerError('bpe.json: "added_tokens"[1].id is ', 'non-negative integer'), `id ${String(id)}`);
  }
  assert.throws(() => createTokenizer(bpeJson({}, { added_tokens: [{ id: 11 }] }), {}, 'bpe.json'), tokenizerError('bpe.json: "added_tokens"[0].content is missing'));
  assert.throws(() => createTokenizer(bpeJson({}, { added_tokens: ['<x>'] }), {}, 'bpe.json'), tokenizerError('bpe.json: "added_tokens"[0] is "<x>"'));
  // An id past the model's vocabulary is fine (added tokens may extend it), and encodes to that id.
  const extended = createTokenizer(bpeJson({}, { added_tokens: [{ id: 20, content: '<extra>', special: true }] }), {}, 'bpe.json');
  assert.deepEqual(extended.encode('hello<extra>'), [10, 20]);
  assert.equal(extended.vocabSize, 21);
});

test('the unknown token must be in the vocabulary wherever the model can need it', () => {
  assert.throws(() => createTokenizer(bpeJson({ unk_token: '<UNK>' }), {}, 'bpe.json'),
    tokenizerError('bpe.json: field "model.unk_token" names "<UNK>", which is not in the vocabulary'));
  assert.throws(() => createTokenizer(bpeJson({ unk_token: 7 }), {}, 'bpe.json'), tokenizerError('bpe.json: field "model.unk_token" is 7'));
  // An added token may be the unknown token; a BPE model without one drops unknown text, as Rust's does.
  createTokenizer(bpeJson({ unk_token: '<s>' }), {}, 'bpe.json');
  assert.deepEqual(createTokenizer(bpeJson({ unk_token: null }), {}, 'bpe.json').encode('hex'), [7]);

  // byte_fallback with all 256 <0xNN> tokens never needs the unknown token.
  const bytes = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
  const vocab = Object.fromEntries([...BPE_VOCAB, ...bytes].map((token, id) => [token, id]));
  const byteFallback = createTokenizer(bpeJson({ unk_token: '<UNK>', byte_fallback: true, vocab }), {}, 'bpe.json');
  assert.deepEqual(byteFallback.encode('hex'), [7, BPE_VOCAB.length + 0x78]);
  assert.throws(() => createTokenizer(bpeJson({ unk_token: '<UNK>', byte_fallback: true }), {}, 'bpe.json'), tokenizerError('bpe.json: field "model.unk_token"'));

  const wordPiece = (model: Record<string, unknown>) => ({ model: { type: 'WordPiece', continuing_subword_prefix: '##', vocab: { a: 0, '##b': 1 }, ...model } });
  assert.throws(() => createTokenizer(wordPiece({ unk_token: '[UNK]' }), {}, 'wp.json'), tokenizerError('wp.json: field "model.unk_token" names "[UNK]"'));
  assert.throws(() => createTokenizer(wordPiece({}), {}, 'wp.json'), tokenizerError('wp.json: field "model.unk_token" is missing'));

  const pieces = [['<unk>', 0], ['▁', -2], ['▁hello', -1], ['h', -3]];
  assert.throws(() => createTokenizer({ model: { type: 'Unigram', unk_id: 99, vocab: pieces } }, {}, 'uni.json'), tokenizerError('uni.json: field "model.unk_id" is 99', '0 to 3'));
  assert.throws(() => createTokenizer({ model: { type: 'Unigram', vocab: pieces } }, {}, 'uni.json'), tokenizerError('uni.json: field "model.unk_id" is missing'));
  assert.throws(() => createTokenizer({ model: { type: 'Unigram', unk_id: 0.5, vocab: pieces } }, {}, 'uni.json'), tokenizerError('uni.json: field "model.unk_id" is 0.5'));
  assert.deepEqual(createTokenizer({ model: { type: 'Unigram', unk_id: 0, vocab: pieces } }, {}, 'uni.json').encode('▁hellox'), [2, 0]);
});

test('encode refuses to hand back an id outside the vocabulary', () => {
  // A ByteLevel pre-tokenizer passes the load-time check (byte-level vocabularies hold every byte), but
  // this vocabulary lacks "c": the library would give `undefined` for the unknown token it cannot find.
  const json = bpeJson({ unk_token: '<unk-missing>', merges: [] }, {
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
  });
  const tokenizer = createTokenizer(json, {}, 'byte-level.json');
  assert.deepEqual(tokenizer.encode('hello', { addSpecialTokens: false }), [2, 3, 4, 4, 5]);
  assert.throws(() => tokenizer.encode('hex'), tokenizerError('byte-level.json: encoding produced the token id undefined', 'outside the vocabulary', '"model.unk_token"'));
});

test('BPE merges must agree with the vocabulary, as the Rust library checks at load', () => {
  const merges = (value: unknown) => () => createTokenizer(bpeJson({ merges: value }), {}, 'bpe.json');
  assert.throws(merges(['h e', 'x y']), tokenizerError('bpe.json: "model.merges"[1] merges "x" and "y" into "xy", but "x" is not in "model.vocab"'));
  assert.throws(merges(['h e', 'h l']), tokenizerError('bpe.json: "model.merges"[1] merges "h" and "l" into "hl", but "hl" is not in "model.vocab"'));
  for (const bad of ['onlyone', 'h e l', 'h  e', 7, ['h'], ['h', 'e', 'l'], ['h', 5]]) {
    assert.throws(merges(['l l', bad]), tokenizerError(`bpe.json: "model.merges"[1] is `, '"a b"'), JSON.stringify(bad));
  }
  assert.throws(merges('h e'), tokenizerError('bpe.json: field "model.merges" is "h e"; expected an array'));
  // Pairs, and a mix of both forms, work like the strings.
  const pairs = createTokenizer(bpeJson({ merges: BPE_MERGES.map((merge) => merge.split(' ')) }), {}, 'bpe.json');
  assert.deepEqual(pairs.encode('hello'), [10]);
  const mixed = createTokenizer(bpeJson({ merges: [['h', 'e'], 'l l', ['ll', 'o'], 'he llo'] }), {}, 'bpe.json');
  assert.deepEqual(mixed.encode('hello'), [10]);
  // An empty list is a valid (if unusual) BPE model; a missing one is not, as in Rust.
  assert.deepEqual(createTokenizer(bpeJson({ merges: [] }), {}, 'bpe.json').encode('he'), [2, 3]);
  assert.throws(merges(undefined), tokenizerError('bpe.json: field "model.merges" is missing; expected an array'));
});

test('a BPE continuing-subword prefix, which the JS library ignores, is refused; null or "" (none) load', () => {
  assert.throws(() => createTokenizer(bpeJson({ continuing_subword_prefix: '##' }), {}, 'bpe.json'),
    tokenizerError('bpe.json: field "model.continuing_subword_prefix" is "##"; a BPE model with a continuing-subword prefix is not supported'));
  for (const none of [null, '']) assert.deepEqual(createTokenizer(bpeJson({ continuing_subword_prefix: none }), {}, 'bpe.json').encode('hello'), [10]);
});

test('a merge file from tokenizer.json on disk names the file in the error', () => {
  const dir = modelDir('bad-merges', { 'tokenizer.json': bpeJson({ merges: ['h e', 'zz top'] }) });
  assert.throws(() => loadTokenizer(dir), tokenizerError(`${join(dir, 'tokenizer.json')}: "model.merges"[1]`));
});

test('Split pre-tokenizers and Replace normalizers/decoders need what the library silently does without', () => {
  const load = (top: Record<string, unknown>) => () => createTokenizer(bpeJson({}, top), {}, 'bpe.json');
  const split = (fields: Record<string, unknown>) => ({ type: 'Split', pattern: { String: ' ' }, behavior: 'Isolated', invert: false, ...fields });
  assert.throws(load({ pre_tokenizer: split({ behavior: 'Weird' }) }), tokenizerError('bpe.json: field "pre_tokenizer.behavior" is "Weird"; expected one of Removed, Isolated'));
  assert.throws(load({ pre_tokenizer: { type: 'Sequence', pretokenizers: [split({}), split({ behavior: undefined })] } }),
    tokenizerError('bpe.json: field "pre_tokenizer.pretokenizers[1].behavior" is missing'));
  assert.throws(load({ pre_tokenizer: split({ behavior: 'MergedWithPrevious' }) }), tokenizerError('bpe.json: field "pre_tokenizer.behavior" is "MergedWithPrevious", which this tokenizer does not support'));
  assert.throws(load({ pre_tokenizer: split({ invert: true }) }), tokenizerError('bpe.json: field "pre_tokenizer.invert" is true'));
  assert.throws(load({ pre_tokenizer: split({ pattern: undefined }) }), tokenizerError('bpe.json: field "pre_tokenizer.pattern" is missing; expected {"String": text} or {"Regex": pattern}'));
  assert.deepEqual(createTokenizer(bpeJson({}, { pre_tokenizer: split({}) }), {}, 'bpe.json').encode('hello hello'), [10, 6, 10]);
  assert.deepEqual(createTokenizer(bpeJson({}, { pre_tokenizer: split({ behavior: 'Removed', invert: true, pattern: { Regex: '\\w+' } }) }), {}, 'bpe.json').encode('hello hello'), [10, 10]);

  assert.throws(load({ normalizer: { type: 'Replace', content: 'x' } }), tokenizerError('bpe.json: field "normalizer.pattern" is missing'));
  assert.throws(load({ normalizer: { type: 'Sequence', normalizers: [{ type: 'Replace', pattern: { Regx: ' ' }, content: 'x' }] } }),
    tokenizerError('bpe.json: field "normalizer.normalizers[0].pattern" is an object'));
  assert.throws(load({ normalizer: { type: 'Replace', pattern: { String: ' ' } } }), tokenizerError('bpe.json: field "normalizer.content" is missing'));
  assert.throws(load({ decoder: { type: 'Replace', content: 'x' } }), tokenizerError('bpe.json: field "decoder.pattern" is missing'));
  assert.throws(load({ decoder: { type: 'Sequence', decoders: [{ type: 'Fuse' }, { type: 'Replace', pattern: null, content: ' ' }] } }),
    tokenizerError('bpe.json: field "decoder.decoders[1].pattern" is null'));
  const replacing = createTokenizer(bpeJson({}, { normalizer: { type: 'Replace', pattern: { String: 'x' }, content: 'l' } }), {}, 'bpe.json');
  assert.deepEqual(replacing.encode('hexxo'), [10]);
});

test('chat_template.jinja takes the place of tokenizer_config.json\'s chat_template', () => {
  const dir = modelDir('both-templates', {
    'tokenizer.json': bpeJson(),
    'tokenizer_config.json': { chat_template: 'from the config' },
    'chat_template.jinja': 'from the file',
  });
  const tokenizer = loadTokenizer(dir);
  assert.equal(tokenizer.chatTemplate, 'from the file');
  assert.equal(tokenizer.chatTemplateSource, join(dir, 'chat_template.jinja'));
  assert.equal(tokenizer.definition?.chatTemplateFile, join(dir, 'chat_template.jinja'));

  const configOnly = modelDir('config-template', { 'tokenizer.json': bpeJson(), 'tokenizer_config.json': { chat_template: 'from the config' } });
  assert.equal(loadTokenizer(configOnly).chatTemplateSource, `${join(configOnly, 'tokenizer_config.json')} (field "chat_template")`);
});

test('an unreadable chat_template.jinja is an error naming it', () => {
  const dir = modelDir('template-dir', { 'tokenizer.json': bpeJson() });
  mkdirSync(join(dir, 'chat_template.jinja'));
  assert.throws(() => loadTokenizer(dir), tokenizerError(`${join(dir, 'chat_template.jinja')}: cannot be read (`, 'EISDIR'));
});

test('a list of chat templates without "default" loads; the reason is kept for the chat endpoint', () => {
  const dir = modelDir('no-default', {
    'tokenizer.json': bpeJson(),
    'tokenizer_config.json': { bos_token: '<s>', chat_template: [{ name: 'tool_use', template: 'tools' }, { name: 'rag', template: 'rag' }] },
  });
  const tokenizer = loadTokenizer(dir);
  assert.deepEqual(tokenizer.encode('hello'), [10]);
  assert.equal(tokenizer.bosTokenId, 1);
  assert.equal(tokenizer.chatTemplate, undefined);
  assert.equal(tokenizer.chatTemplateUnavailable,
    `${join(dir, 'tokenizer_config.json')}: field "chat_template" lists templates named "tool_use", "rag" but none named "default", the one chat completions use`);
  // A malformed list or value is still an error at load, as in transformers.
  assert.throws(() => createTokenizer(bpeJson(), { chat_template: [{ name: 'default' }] }, 'bpe.json', 'config.json'),
    tokenizerError('config.json: "chat_template"[0] is an object; expected a string or a list'));
  assert.throws(() => createTokenizer(bpeJson(), { chat_template: 5 }, 'bpe.json', 'config.json'), tokenizerError('config.json: field "chat_template" is 5'));
});

test('the special-tokens map holds every special token tokenizer_config.json names', () => {
  const config = {
    bos_token: '<s>', eos_token: { content: '<s>', __type: 'AddedToken' }, unk_token: '<unk>', pad_token: null,
    sep_token: '[SEP]', cls_token: { content: '[CLS]' }, mask_token: '[MASK]',
    additional_special_tokens: ['<|a|>', { content: '<|b|>', special: true }],
  };
  const tokenizer = createTokenizer(bpeJson(), config, 'bpe.json', 'config.json');
  assert.deepEqual(tokenizer.specialTokensMap, {
    bos_token: '<s>', eos_token: '<s>', unk_token: '<unk>', sep_token: '[SEP]', cls_token: '[CLS]', mask_token: '[MASK]',
    additional_special_tokens: ['<|a|>', '<|b|>'],
  });
  assert.throws(() => createTokenizer(bpeJson(), { sep_token: 3 }, 'bpe.json', 'config.json'), tokenizerError('config.json: field "sep_token" is 3'));
  assert.throws(() => createTokenizer(bpeJson(), { additional_special_tokens: ['<|a|>', {}] }, 'bpe.json', 'config.json'),
    tokenizerError('config.json: field "additional_special_tokens"[1] is an object'));
  assert.throws(() => createTokenizer(bpeJson(), { additional_special_tokens: '<|a|>' }, 'bpe.json', 'config.json'),
    tokenizerError('config.json: field "additional_special_tokens" is "<|a|>"'));
});

test('special_tokens_map.json is laid over tokenizer_config.json as transformers 5 loads it; its errors name it', () => {
  const dir = modelDir('special-map', {
    'tokenizer.json': bpeJson(),
    'tokenizer_config.json': { eos_token: '<unk>', pad_token: '<unk>', additional_special_tokens: ['<|a|>'], chat_template: '{{ bos_token }}{{ eos_token }}' },
    'special_tokens_map.json': { bos_token: { content: '<s>', lstrip: false }, eos_token: '<s>', additional_special_tokens: ['<|a|>', '<|b|>'] },
  });
  const tokenizer = loadTokenizer(dir);
  assert.deepEqual(tokenizer.specialTokensMap, { bos_token: '<s>', eos_token: '<s>', pad_token: '<unk>', additional_special_tokens: ['<|a|>'] }, 'the config\'s own additional list stands');
  assert.equal(tokenizer.bosTokenId, 1, 'the BOS only the map names');
  // Without tokenizer_config.json the map alone gives the special tokens, its additional list included.
  const alone = loadTokenizer(modelDir('special-map-alone', { 'tokenizer.json': bpeJson(), 'special_tokens_map.json': { bos_token: '<s>', additional_special_tokens: ['<|b|>'] } }));
  assert.equal(alone.bosTokenId, 1);
  assert.deepEqual(alone.specialTokensMap, { bos_token: '<s>', additional_special_tokens: ['<|b|>'] });
  const bad = modelDir('special-map-bad', { 'tokenizer.json': bpeJson(), 'special_tokens_map.json': { bos_token: 7 } });
  assert.throws(() => loadTokenizer(bad), tokenizerError(`${join(bad, 'special_tokens_map.json')}: field "bos_token" is 7`));
  const notObject = modelDir('special-map-array', { 'tokenizer.json': bpeJson(), 'special_tokens_map.json': '[1]' });
  assert.throws(() => loadTokenizer(notObject), /special_tokens_map\.json/);
});

test('tokenizer.json\'s post-processor decides the special tokens; add_bos_token / add_eos_token are dropped, as transformers 5 does', () => {
  // tokenizer.json's own post-processor prepends <s>; the config asks for no BOS and an EOS (transformers 4.x
  // rebuilt a Llama class's post-processor from these flags; 5.x drops them when tokenizer.json exists).
  const withBos = bpeJson({ vocab: Object.fromEntries([...BPE_VOCAB, '</s>'].map((token, id) => [token, id])) }, {
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }], pair: [], special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
  });
  const flags = { tokenizer_class: 'LlamaTokenizerFast', bos_token: '<s>', eos_token: '</s>', add_bos_token: false, add_eos_token: true };
  assert.deepEqual(createTokenizer(withBos, flags).encode('hello'), [1, 10]);
  assert.deepEqual(createTokenizer(withBos, { ...flags, tokenizer_class: 'GemmaTokenizerFast' }).encode('hello'), [1, 10]);
  assert.deepEqual(createTokenizer(withBos, { bos_token: '<s>' }).encode('hello'), [1, 10]);
  assert.deepEqual(createTokenizer(bpeJson(), { ...flags, eos_token: '<unk>' }).encode('hello'), [10], 'no post-processor: no special tokens');
});
