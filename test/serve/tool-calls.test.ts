// Tool calls found in chat answers (src/serve/tool-calls.ts): the hermes <tool_call> blocks and llama3_json
// answers, whole and in every split of the text into streamed pieces; what is not a call (bad JSON, an
// unknown function, an unclosed block that does not parse) stays content as written; reasoning first, then
// calls (answer-parts.ts); which parser a chat template asks for.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AnswerParts } from '../../src/serve/answer-parts.js';
import { ReasoningSplitter } from '../../src/serve/reasoning.js';
import { ToolCallExtractor, toolCallParserFrom, toolCallParserOfTemplate } from '../../src/serve/tool-calls.js';
import type { ToolCall, ToolCallParser } from '../../src/serve/tool-calls.js';

const TOOLS = new Set(['get_weather', 'local_time']);

function extractor(parser: ToolCallParser): ToolCallExtractor {
  let n = 0;
  return new ToolCallExtractor(parser, TOOLS, () => `call_${n++}`);
}

/** The text pushed in the given pieces, then flushed: the content and the calls, as a stream would add them up. */
function run(parser: ToolCallParser, pieces: readonly string[]): { content: string; calls: ToolCall[] } {
  const x = extractor(parser);
  let content = '';
  const calls: ToolCall[] = [];
  for (const piece of [...pieces.map((p) => x.push(p)), x.flush()]) {
    content += piece.content;
    calls.push(...piece.calls);
  }
  return { content, calls };
}

/** The same text whole, one character at a time, and cut at every pair of points: every split gives the same answer. */
function everySplit(parser: ToolCallParser, text: string): { content: string; calls: ToolCall[] } {
  const whole = run(parser, [text]);
  assert.deepEqual(run(parser, [...text]), whole, 'one character at a time');
  for (let i = 0; i <= text.length; i += 3) {
    for (let j = i; j <= text.length; j += 5) assert.deepEqual(run(parser, [text.slice(0, i), text.slice(i, j), text.slice(j)]), whole, `cut at ${i} and ${j}`);
  }
  return whole;
}

const call = (index: number, name: string, args: unknown) => ({ index, id: `call_${index}`, name, arguments: JSON.stringify(args) });

test('hermes: content before the calls, each <tool_call> block a call, the whitespace around them dropped', () => {
  const text = 'Let me check both.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}\n</tool_call>\n' +
    '<tool_call>\n{"name": "local_time", "arguments": {"zone": "Europe/Zurich"}}\n</tool_call>\n';
  assert.deepEqual(everySplit('hermes', text), {
    content: 'Let me check both.',
    calls: [call(0, 'get_weather', { city: 'Zürich', unit: 'c' }), call(1, 'local_time', { zone: 'Europe/Zurich' })],
  });
  // Calls alone: no content at all.
  assert.deepEqual(everySplit('hermes', '<tool_call>\n{"name": "local_time", "arguments": {}}\n</tool_call>'), { content: '', calls: [call(0, 'local_time', {})] });
  // Text after a call is content, as are answers without calls (their whitespace kept) and a lone '<' or '<tool'.
  assert.deepEqual(run('hermes', ['<tool_call>{"name": "local_time"}</tool_call>\n\nDone.']), { content: 'Done.', calls: [call(0, 'local_time', {})] });
  assert.deepEqual(everySplit('hermes', '  Plain answer, 2 < 3 and <tool but no call.\n'), { content: '  Plain answer, 2 < 3 and <tool but no call.\n', calls: [] });
});

test('hermes: a block that is not a call stays content as written; an unclosed block is a call only if its JSON is whole', () => {
  for (const block of [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>',  // bad JSON
    '<tool_call>\n{"name": "send_email", "arguments": {}}\n</tool_call>',  // not one of the request's tools
    '<tool_call>\n{"name": "get_weather", "arguments": [1, 2]}\n</tool_call>',  // arguments not an object
    '<tool_call>\n{"arguments": {"city": "Oslo"}}\n</tool_call>',  // no name
  ]) assert.deepEqual(everySplit('hermes', `Hi ${block}`), { content: `Hi ${block}`, calls: [] }, block);
  // Arguments the model wrote as a JSON string pass as they are.
  assert.deepEqual(run('hermes', ['<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call>']), { content: '', calls: [{ index: 0, id: 'call_0', name: 'get_weather', arguments: '{"city": "Oslo"}' }] });
  // Cut by max_tokens: a whole object without its closing tag is still the call; half an object is content.
  assert.deepEqual(run('hermes', ['<tool_call>\n{"name": "local_time", "arguments": {"zone": "UTC"}}\n']), { content: '', calls: [call(0, 'local_time', { zone: 'UTC' })] });
  assert.deepEqual(run('hermes', ['Ok <tool_call>\n{"name": "local_time", "argu']), { content: 'Ok <tool_call>\n{"name": "local_time", "argu', calls: [] });
  // A good call after a bad block keeps its own index (0: the first call made).
  const mixed = run('hermes', ['<tool_call>oops</tool_call> <tool_call>{"name": "local_time", "arguments": {}}</tool_call>']);
  assert.deepEqual(mixed, { content: '<tool_call>oops</tool_call>', calls: [call(0, 'local_time', {})] });
});

test('hermes: nothing that may still become a call is sent early, and content is not held longer than that', () => {
  const x = extractor('hermes');
  assert.deepEqual(x.push('The answer'), { content: 'The answer', calls: [] });
  assert.deepEqual(x.push(' is 4.\n<tool'), { content: ' is 4.', calls: [] }, 'the newline and the tag\'s start are held');
  assert.deepEqual(x.push('_call>{"name": "local_time", "arguments": {}}'), { content: '', calls: [] }, 'an open block is held');
  assert.deepEqual(x.push('</tool_call>'), { content: '', calls: [call(0, 'local_time', {})] }, 'the call goes out when its block closes');
  assert.deepEqual(x.flush(), { content: '', calls: [] });
});

test('llama3_json: an answer that is a JSON object (or several, separated by ;) is calls; anything else is content', () => {
  assert.deepEqual(everySplit('llama3_json', ' {"name": "get_weather", "parameters": {"city": "Oslo"}}'), { content: '', calls: [call(0, 'get_weather', { city: 'Oslo' })] });
  assert.deepEqual(everySplit('llama3_json', '<|python_tag|>{"name": "get_weather", "parameters": {"city": "a;b}"}}; {"name": "local_time", "parameters": {}}'), {
    content: '', calls: [call(0, 'get_weather', { city: 'a;b}' }), call(1, 'local_time', {})],
  });
  // "arguments" is taken where "parameters" is missing.
  assert.deepEqual(run('llama3_json', ['{"name": "local_time", "arguments": {"zone": "UTC"}}']), { content: '', calls: [call(0, 'local_time', { zone: 'UTC' })] });
  for (const text of ['It is sunny.', '{"name": "get_weather", "parameters": {"city": "Oslo"}} and more', '{"name": "nope", "parameters": {}}', '{"name": "local_time", "parameters": {}}; {"x": 1}', '{"name": "get_weather", "parameters": {']) {
    assert.deepEqual(everySplit('llama3_json', text), { content: text, calls: [] }, text);
  }
  // Plain text streams at once; an answer that starts like JSON is held to the end.
  const x = extractor('llama3_json');
  assert.deepEqual(x.push('  '), { content: '', calls: [] });
  assert.deepEqual(x.push('Sunny'), { content: '  Sunny', calls: [] });
});

test('reasoning comes first, then the content\'s calls (Qwen3 thinking before it calls)', () => {
  const text = '<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>';
  const whole = (pieces: string[]) => {
    const parts = new AnswerParts(new ReasoningSplitter('qwen3'), extractor('hermes'));
    const out = { reasoning: '', content: '', calls: [] as ToolCall[] };
    pieces.forEach((p, i) => {
      const piece = parts.push(p, i === pieces.length - 1);
      out.reasoning += piece.reasoning; out.content += piece.content; out.calls.push(...piece.calls);
    });
    return out;
  };
  const expected = { reasoning: '\nThe user wants the weather.\n', content: '', calls: [call(0, 'get_weather', { city: 'Oslo' })] };
  assert.deepEqual(whole([text]), expected);
  assert.deepEqual(whole([...text, '']), expected);
  // Without a reasoning stage the parts are the content's own.
  assert.deepEqual(new AnswerParts(undefined, extractor('hermes')).push('Hi', true), { reasoning: '', content: 'Hi', calls: [] });
});

test('the parser a template teaches, and the option\'s names', () => {
  assert.equal(toolCallParserOfTemplate('... within <tool_call></tool_call> XML tags ...'), 'hermes');
  assert.equal(toolCallParserOfTemplate("{{- '<|python_tag|>' + tool_call.name }}"), 'llama3_json');
  assert.equal(toolCallParserOfTemplate('Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.'), 'llama3_json');
  assert.equal(toolCallParserOfTemplate('{{ messages }}'), undefined);
  assert.equal(toolCallParserFrom('hermes'), 'hermes');
  assert.throws(() => toolCallParserFrom('mistral'), /--tool-call-parser: 'mistral' is not one of hermes, llama3_json/);
});
