import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { ArgumentError } from '../../src/errors.js';
import { createTokenizer, loadTokenizer, TokenizerError } from '../../src/io/tokenizer.js';
import { scratchModelDirs } from './model-files.js';

const modelDir = scratchModelDirs('fuseformer-tokenizer-');


const BERT_VOCAB = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'hello', 'world', 'play', '##ing', '##s', '!', ',', 'the'];

/** A BERT-style tokenizer.json, in the layout the Rust library writes for bert-base-uncased. */
function bertTokenizerJson(): Record<string, unknown> {
  const special = (content: string) => ({
    id: BERT_VOCAB.indexOf(content), content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map(special),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [],
      special_tokens: {
        '[CLS]': { id: '[CLS]', ids: [2], tokens: ['[CLS]'] },
        '[SEP]': { id: '[SEP]', ids: [3], tokens: ['[SEP]'] },
      },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: {
      type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100,
      vocab: Object.fromEntries(BERT_VOCAB.map((token, id) => [token, id])),
    },
  };
}

const BERT_CONFIG = {
  do_lower_case: true,
  pad_token: '[PAD]',
  cls_token: '[CLS]',
  clean_up_tokenization_spaces: true,
  chat_template: [{ name: 'tool_use', template: 'tools' }, { name: 'default', template: '{{ messages }}' }],
};

test('a WordPiece (BERT-style) tokenizer.json loads, encodes and decodes', () => {
  const dir = modelDir('bert', { 'tokenizer.json': bertTokenizerJson(), 'tokenizer_config.json': BERT_CONFIG });
  const bert = loadTokenizer(join(dir, 'tokenizer.json'));
  const [hello, world, play, ing, s, bang, comma] = ['hello', 'world', 'play', '##ing', '##s', '!', ','].map((t) => BERT_VOCAB.indexOf(t));
  assert.deepEqual(bert.encode('Hello, PLAYINGS world!'), [2, hello, comma, play, ing, s, world, bang, 3]);
  assert.deepEqual(bert.encode('hello xyz', { addSpecialTokens: false }), [hello, 1]);
  assert.equal(bert.decode(bert.encode('Hello, playing world!'), { skipSpecialTokens: true }), 'hello, playing world!');
  assert.equal(bert.decode([2, hello, 3]), '[CLS] hello [SEP]');
  assert.equal(bert.vocabSize, BERT_VOCAB.length);
  assert.equal(bert.padTokenId, 0);
  assert.equal(bert.bosTokenId, undefined);
  assert.equal(bert.chatTemplate, '{{ messages }}');
  assert.equal(bert.tokenToId('##ing'), ing);
  assert.equal(bert.idToToken(play!), 'play');
  assert.equal(bert.tokenToId('absent'), undefined);
});

test('encodeTruncated cuts the text\'s own tokens so that they and the post-processor\'s fit, wherever its special tokens go', () => {
  const [hello, world, play, ing, s] = ['hello', 'world', 'play', '##ing', '##s'].map((t) => BERT_VOCAB.indexOf(t));
  const text = 'hello world playings';
  const load = (name: string, edit: (json: Record<string, unknown>) => void) => {
    const json = bertTokenizerJson();
    edit(json);
    return loadTokenizer(join(modelDir(name, { 'tokenizer.json': json }), 'tokenizer.json'));
  };
  const both = load('both', () => {});
  assert.deepEqual(both.encodeTruncated!(text, 100), { ids: [2, hello, world, play, ing, s, 3], truncated: false });
  assert.deepEqual(both.encodeTruncated!(text, 5), { ids: [2, hello, world, play, 3], truncated: true });
  // A leading special token only (as Llama's BOS): the end of the text goes, nothing is kept past it.
  const leading = load('leading', (json) => {
    const processor = json['post_processor'] as { single: unknown[] };
    processor.single = processor.single.slice(0, 2);
  });
  assert.deepEqual(leading.encodeTruncated!(text, 4), { ids: [2, hello, world, play], truncated: true });
  // No post-processor: the text's tokens alone.
  const none = load('none', (json) => { json['post_processor'] = null; });
  assert.deepEqual(none.encodeTruncated!(text, 3), { ids: [hello, world, play], truncated: true });
  assert.throws(() => both.encodeTruncated!(text, 2), /a text needs 2 special tokens and one of its own; 2 do not fit that/);
});

test('a directory path finds tokenizer.json; special tokens may be {content} objects; chat_template.jinja is read', () => {
  const dir = modelDir('bert-dir', {
    'tokenizer.json': bertTokenizerJson(),
    'tokenizer_config.json': { eos_token: { content: '[SEP]', __type: 'AddedToken' }, bos_token: null },
    'chat_template.jinja': '{% for m in messages %}{{ m.content }}{% endfor %}',
  });
  const bert = loadTokenizer(dir);
  assert.equal(bert.eosTokenId, 3);
  assert.equal(bert.bosTokenId, undefined);
  assert.equal(bert.chatTemplate, '{% for m in messages %}{{ m.content }}{% endfor %}');
});

test('without tokenizer_config.json there are no special token ids and no clean-up of spaces', () => {
  // The decoder's own clean-up off, so only tokenizer_config.json's clean_up_tokenization_spaces acts.
  const json = { ...bertTokenizerJson(), decoder: { type: 'WordPiece', prefix: '##', cleanup: false } };
  const bert = loadTokenizer(modelDir('bert-alone', { 'tokenizer.json': json }));
  const ids = bert.encode('hello , world', { addSpecialTokens: false });
  assert.equal(bert.eosTokenId, undefined);
  assert.equal(bert.chatTemplate, undefined);
  assert.equal(bert.decode(ids), 'hello , world');
  assert.equal(bert.decode(ids, { cleanUpTokenizationSpaces: true }), 'hello, world');
  const cleaning = loadTokenizer(modelDir('bert-cleaning', { 'tokenizer.json': json, 'tokenizer_config.json': { clean_up_tokenization_spaces: true } }));
  assert.equal(cleaning.decode(ids), 'hello, world');
});

test('a model without "type" (older tokenizer.json files) is recognised by its fields', () => {
  const json = bertTokenizerJson();
  const { type: _type, ...model } = json['model'] as Record<string, unknown>;
  const bert = createTokenizer({ ...json, model });
  assert.deepEqual(bert.encode('hello', { addSpecialTokens: false }), [5]);
});

test('errors name the file and the problem', () => {
  const empty = modelDir('empty', {});
  const missing = join(empty, 'nowhere', 'tokenizer.json');
  assert.throws(() => loadTokenizer(missing), (e: unknown) => e instanceof TokenizerError && e.message === `${missing}: file not found`);
  assert.throws(() => loadTokenizer(join(empty, 'nowhere')), (e: unknown) => e instanceof TokenizerError && e.message.includes('nowhere: file not found'));

  const badJson = join(modelDir('bad-json', { 'tokenizer.json': '{"model": {' }), 'tokenizer.json');
  assert.throws(() => loadTokenizer(badJson), (e: unknown) => e instanceof TokenizerError && e.message.startsWith(`${badJson}: not valid JSON`));

  const notObject = join(modelDir('array', { 'tokenizer.json': '[1, 2]' }), 'tokenizer.json');
  assert.throws(() => loadTokenizer(notObject), new RegExp(`^TokenizerError: ${notObject}: the top level is an array`));

  const unknownType = join(modelDir('unknown-type', { 'tokenizer.json': { ...bertTokenizerJson(), model: { type: 'WordLevel', vocab: {} } } }), 'tokenizer.json');
  assert.throws(() => loadTokenizer(unknownType), (e: unknown) => e instanceof TokenizerError &&
    e.message === `${unknownType}: field "model.type" is "WordLevel"; expected one of BPE, WordPiece, Unigram`);

  const noModel = join(modelDir('no-model', { 'tokenizer.json': { version: '1.0' } }), 'tokenizer.json');
  assert.throws(() => loadTokenizer(noModel), (e: unknown) => e instanceof TokenizerError && e.message.startsWith(`${noModel}: field "model" is missing`));

  const unknownStage = join(modelDir('unknown-stage', { 'tokenizer.json': { ...bertTokenizerJson(), pre_tokenizer: { type: 'Mystery' } } }), 'tokenizer.json');
  assert.throws(() => loadTokenizer(unknownStage), (e: unknown) => e instanceof TokenizerError &&
    e.message.startsWith(`${unknownStage}: unsupported or malformed tokenizer`) && e.message.includes('Mystery'));

  const badConfigDir = modelDir('bad-config', { 'tokenizer.json': bertTokenizerJson(), 'tokenizer_config.json': { eos_token: '</s>' } });
  assert.throws(() => loadTokenizer(badConfigDir), (e: unknown) => e instanceof TokenizerError &&
    e.message === `${join(badConfigDir, 'tokenizer_config.json')}: field "eos_token" names "</s>", which is not in the vocabulary of ${join(badConfigDir, 'tokenizer.json')}`);

  const badConfigJson = modelDir('bad-config-json', { 'tokenizer.json': bertTokenizerJson(), 'tokenizer_config.json': '{,}' });
  assert.throws(() => loadTokenizer(badConfigJson), new RegExp(`${join(badConfigJson, 'tokenizer_config.json')}: not valid JSON`));
});

test('decode refuses ids outside the vocabulary', () => {
  const bert = createTokenizer(bertTokenizerJson(), {}, 'bert-in-memory');
  assert.throws(() => bert.decode([5, BERT_VOCAB.length]), (e: unknown) => e instanceof ArgumentError &&
    e.message === `token id ${BERT_VOCAB.length} is outside the vocabulary of bert-in-memory (0 to ${BERT_VOCAB.length - 1})`);
  assert.throws(() => bert.decode([-1]), ArgumentError);
  assert.throws(() => bert.decode([1.5]), ArgumentError);
});
