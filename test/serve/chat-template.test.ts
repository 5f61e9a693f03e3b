// The chat endpoint's template: errors name the file the template came from, a list of templates
// without "default" fails only when a chat is rendered, and the template sees every special token
// transformers gives it.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { createTokenizer, loadTokenizer } from '../../src/io/tokenizer.js';
import type { Tokenizer } from '../../src/io/tokenizer.js';
import { ChatTemplate } from '../../src/serve/chat-template.js';
import { scratchModelDirs } from '../io/model-files.js';
import { ApiError, parseChatBody } from '../../src/serve/validation.js';

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

test('a Qwen3-style template renders as transformers renders it: namespace, reversed loops, string methods, enable_thinking', () => {
  // The Jinja features of Qwen3's chat template (the last real query found by a reversed loop into a namespace;
  // reasoning cut out of earlier turns with split / strip; the enable_thinking switch). Expected strings: transformers
  // 5.18's apply_chat_template machinery (jinja2) on the same template and messages.
  const template = "{%- set ns = namespace(last_query=messages|length - 1) %}\n{%- for m in messages[::-1] %}{%- if m.role == 'user' and not m.content.startswith('<tool_response>') and ns.last_query == messages|length - 1 %}{%- set ns.last_query = (messages|length - 1) - loop.index0 %}{%- endif %}{%- endfor %}\n{%- for m in messages %}\n{%- set content = m.content %}\n{%- if m.role == 'assistant' and '</think>' in content %}\n{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n{%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n{%- if loop.index0 > ns.last_query %}{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content }}{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}{{- '<|im_end|>\\n' }}\n{%- else %}{{- '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' }}\n{%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}\n";
  const chat = new ChatTemplate(createTokenizer(tokenizerJson(), { chat_template: template }));
  const messages = [
    { role: 'user', content: 'Hi' }, { role: 'assistant', content: '<think>\nplan\n</think>\n\nHello!' }, { role: 'user', content: 'Next?' },
    { role: 'user', content: '<tool_response>42</tool_response>' }, { role: 'assistant', content: '<think>\nuse it\n</think>\n\nIt is 42.' },
  ];
  const turns = '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nNext?<|im_end|>\n<|im_start|>user\n' +
    '<tool_response>42</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nuse it\n</think>\n\nIt is 42.<|im_end|>\n<|im_start|>assistant\n';
  assert.equal(chat.render(messages), turns);
  assert.equal(chat.render(messages, { enable_thinking: true }), turns);
  assert.equal(chat.render(messages, { enable_thinking: false }), `${turns}<think>\n\n</think>\n\n`);
});

test('a template with tools renders a request\'s tools and tool turns as transformers renders them', () => {
  // test/fixtures/tool-template: a Qwen2.5-style template (tools as tojson lines, calls as <tool_call> blocks whose
  // arguments are objects, consecutive tool results in one user turn) and its renderings by transformers 5.18.
  const fixture = join('test', 'fixtures', 'tool-template');
  const template = readFileSync(join(fixture, 'template.jinja'), 'utf8');
  const expected = JSON.parse(readFileSync(join(fixture, 'rendered.json'), 'utf8')) as { with_tools: string; without_tools: string; tools: unknown[]; messages: Record<string, unknown>[] };
  const chat = new ChatTemplate(createTokenizer(tokenizerJson(), { chat_template: template }));
  assert.ok(chat.takesTools);
  assert.equal(chat.toolCallParser, 'hermes', 'the template teaches <tool_call> blocks');
  // The messages as a client sends them: an assistant's call arguments as JSON text (parsed back for the template).
  const messages = expected.messages.map((m) => !Array.isArray(m['tool_calls']) ? m : {
    ...m, tool_calls: (m['tool_calls'] as { function: { arguments: unknown } }[]).map((c) => ({ ...c, function: { ...c.function, arguments: JSON.stringify(c.function.arguments) } })),
  });
  const body = parseChatBody({ messages, tools: expected.tools });
  assert.equal(body.toolChoice, 'auto', 'tools without tool_choice: the model decides');
  assert.equal(chat.render(body.messages, {}, body.tools), expected.with_tools);
  assert.equal(chat.render(body.messages), expected.without_tools);
  // A template that never reads `tools` says so (the server refuses tools for it), and names no syntax.
  const plain = new ChatTemplate(createTokenizer(tokenizerJson(), { chat_template: '{% for m in messages %}{{ m.content }}{% endfor %}' }));
  assert.equal(plain.takesTools, false);
  assert.equal(plain.toolCallParser, undefined);
});
