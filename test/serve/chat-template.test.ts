// The chat endpoint's template: errors name the file the template came from, a list of templates
// without "default" fails only when a chat is rendered, and the template sees every special token
// transformers gives it.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { createTokenizer, loadTokenizer } from '../../src/io/tokenizer.js';
import type { Tokenizer } from '../../src/io/tokenizer.js';
import { ChatTemplate } from '../../src/serve/chat-template.js';
import { scratchModelDirs } from '../io/model-files.js';
import { ApiError } from '../../src/serve/validation.js';

const modelDir = scratchModelDirs('fuseformer-chat-template-');

const VOCAB = ['<unk>', '<s>', '</s>', 'h', 'i'];

function tokenizerJson(): Record<string, unknown> {
  return { model: { type: 'BPE', unk_token: '<unk>', vocab: Object.fromEntries(VOCAB.map((token, id) => [token, id])), merges: [] } };
}


/** An assert.throws matcher: an ApiError with this status whose message starts with `prefix` and holds each of `parts`. */
function apiError(status: number, prefix: string, ...parts: string[]): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof ApiError, `expected an ApiError, got ${String(e)}`);
    assert.equal(e.status, status);
    assert.ok(e.message.startsWith(prefix), `"${e.message}" should start with "${prefix}"`);
    for (const part of parts) assert.ok(e.message.includes(part), `"${e.message}" should mention ${part}`);
    return true;
  };
}

const BROKEN = '{% for m in messages %}{{ m.content }';

test('a chat template that does not parse is reported against tokenizer_config.json\'s field, at start-up and for each chat', () => {
  const dir = modelDir('broken-config', { 'tokenizer.json': tokenizerJson(), 'tokenizer_config.json': { chat_template: BROKEN } });
  const template = new ChatTemplate(loadTokenizer(dir));
  const reason = `${join(dir, 'tokenizer_config.json')} (field "chat_template"): the chat template does not parse: `;
  assert.ok(template.problem?.startsWith(reason), template.problem);
  assert.equal(template.available, false);
  assert.throws(() => template.render([{ role: 'user', content: 'hi' }]), apiError(400, reason, 'use /v1/completions'));
});

test('a chat_template.jinja that does not parse is reported against that file', () => {
  const dir = modelDir('broken-jinja', { 'tokenizer.json': tokenizerJson(), 'tokenizer_config.json': {}, 'chat_template.jinja': BROKEN });
  assert.ok(new ChatTemplate(loadTokenizer(dir)).problem?.startsWith(`${join(dir, 'chat_template.jinja')}: the chat template does not parse: `));
});

test('a "default" template from a list is reported as such', () => {
  const tokenizer = createTokenizer(tokenizerJson(), { chat_template: [{ name: 'default', template: BROKEN }] }, 'tokenizer.json', 'tokenizer_config.json');
  assert.ok(new ChatTemplate(tokenizer).problem?.startsWith('tokenizer_config.json (field "chat_template"), template "default": the chat template does not parse'));
});

test('chat_template.jinja is the template used where tokenizer_config.json has one too', () => {
  const dir = modelDir('both', {
    'tokenizer.json': tokenizerJson(),
    'tokenizer_config.json': { chat_template: 'config:{{ messages[0].content }}' },
    'chat_template.jinja': 'file:{{ messages[0].content }}',
  });
  assert.equal(new ChatTemplate(loadTokenizer(dir)).render([{ role: 'user', content: 'hi' }]), 'file:hi');
});

test('a list of chat templates without "default" fails only when a chat is rendered, naming the file and the templates', () => {
  const dir = modelDir('no-default', {
    'tokenizer.json': tokenizerJson(),
    'tokenizer_config.json': { chat_template: [{ name: 'tool_use', template: 'tools' }, { name: 'rag', template: 'rag' }] },
  });
  const chat = new ChatTemplate(loadTokenizer(dir));
  assert.equal(chat.available, false);
  assert.throws(() => chat.render([{ role: 'user', content: 'hi' }]),
    apiError(400, `${join(dir, 'tokenizer_config.json')}: field "chat_template" lists templates named "tool_use", "rag" but none named "default"`, '/v1/completions'));
  // A model with no template at all says so, as before.
  const none = new ChatTemplate(createTokenizer(tokenizerJson()));
  assert.throws(() => none.render([{ role: 'user', content: 'hi' }]), apiError(400, 'this model has no chat template'));
});

test('the template sees the named special tokens of tokenizer_config.json, strings or {content}, as transformers 5 passes them', () => {
  // transformers 5.18 renders this config's template as '<s>|</s>|…|[]|[<img>]|[<|b|>]': the named tokens — the standard
  // seven, other "*_token" fields and extra_special_tokens' {name: token} entries — but not the unnamed list.
  const template = '{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ sep_token }}|{{ cls_token }}|{{ mask_token }}|' +
    '[{{ additional_special_tokens }}]|[{{ image_token }}]|[{{ boi_token }}]';
  const config = {
    bos_token: '<s>', eos_token: { content: '</s>' }, unk_token: { content: '<unk>', __type: 'AddedToken' }, pad_token: '</s>',
    sep_token: '[SEP]', cls_token: { content: '[CLS]' }, mask_token: '[MASK]',
    additional_special_tokens: ['<|a|>', { content: '<|b|>' }], image_token: { content: '<img>' }, extra_special_tokens: { boi_token: '<|b|>' },
    add_bos_token: true, chat_template: template,
  };
  const tokenizer = createTokenizer(tokenizerJson(), config);
  assert.equal(new ChatTemplate(tokenizer).render([{ role: 'user', content: 'hi' }]), '<s>|</s>|<unk>|</s>|[SEP]|[CLS]|[MASK]|[]|[<img>]|[<|b|>]');
  // The list is still the tokenizer's (decoding skips its tokens); a list-form extra_special_tokens replaces it.
  assert.deepEqual(tokenizer.specialTokensMap?.['additional_special_tokens'], ['<|a|>', '<|b|>']);
  const listed = createTokenizer(tokenizerJson(), { ...config, extra_special_tokens: ['<|c|>'] });
  assert.deepEqual(listed.specialTokensMap?.['additional_special_tokens'], ['<|c|>']);
  assert.throws(() => createTokenizer(tokenizerJson(), { ...config, extra_special_tokens: 5 }), /field "extra_special_tokens" is 5; expected a list of tokens or an object of named tokens/);
});

test('a tokenizer built in code (no special-tokens map) still gives the template its bos and eos tokens', () => {
  const tokens = ['<unk>', '<s>', '</s>'];
  const tokenizer: Tokenizer = {
    source: 'in code', vocabSize: tokens.length, bosTokenId: 1, eosTokenId: 2, chatTemplate: '[{{ bos_token }}][{{ eos_token }}]',
    encode: () => [], decode: () => '', tokenToId: (token) => tokens.indexOf(token), idToToken: (id) => tokens[id],
  };
  assert.equal(new ChatTemplate(tokenizer).render([]), '[<s>][</s>]');
});
