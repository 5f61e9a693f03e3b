// The reasoning splitter (serve/reasoning.ts): what Qwen3 and DeepSeek-R1 answers split into, and the same split
// whatever pieces the text arrives in (every cut, one character at a time).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { reasoningParserFrom, ReasoningSplitter } from '../../src/serve/reasoning.js';
import type { ReasoningParser } from '../../src/serve/reasoning.js';

function split(parser: ReasoningParser, pieces: readonly string[]): { reasoning: string; content: string } {
  const s = new ReasoningSplitter(parser);
  let reasoning = '', content = '';
  for (const p of [...pieces.map((x) => s.push(x)), s.flush()]) {
    reasoning += p.reasoning;
    content += p.content;
  }
  return { reasoning, content };
}

const CASES: [ReasoningParser, string, string, string][] = [
  // parser, text, reasoning, content
  ['qwen3', '<think>\nTwo and two.\n</think>\n\nThe answer is 4.', '\nTwo and two.\n', 'The answer is 4.'],
  ['qwen3', 'The answer is 4.', '', 'The answer is 4.'],
  ['qwen3', '\n <think>x</think>y\n', 'x', 'y\n'],
  ['qwen3', '<think>cut off by max_tokens', 'cut off by max_tokens', ''],
  ['qwen3', '<thi', '', '<thi'],
  ['qwen3', '<thinking> is not the tag', '', '<thinking> is not the tag'],
  ['qwen3', '<think>a </thin b</think>c </think> d', 'a </thin b', 'c </think> d'],
  ['qwen3', '<think></think>\n\n', '', ''],
  ['deepseek-r1', 'Two and two.\n</think>\n\nThe answer is 4.', 'Two and two.\n', 'The answer is 4.'],
  ['deepseek-r1', '<think>x</think>y', 'x', 'y'],
  ['deepseek-r1', 'no end of thinking', 'no end of thinking', ''],
];

test('Qwen3 and DeepSeek-R1 answers split into reasoning and content, in one piece and in every other way of cutting them', () => {
  for (const [parser, text, reasoning, content] of CASES) {
    const label = `${parser} ${JSON.stringify(text)}`;
    assert.deepEqual(split(parser, [text]), { reasoning, content }, label);
    assert.deepEqual(split(parser, [...text]), { reasoning, content }, `${label}, a character at a time`);
    for (let cut = 0; cut <= text.length; cut++) {
      for (let second = cut; second <= text.length; second += 3) {
        assert.deepEqual(split(parser, [text.slice(0, cut), text.slice(cut, second), text.slice(second)]), { reasoning, content }, `${label} cut at ${cut}, ${second}`);
      }
    }
  }
});

test('text that may still become a tag is held back, and released as soon as it cannot', () => {
  const s = new ReasoningSplitter('qwen3');
  assert.deepEqual(s.push('<thi'), { reasoning: '', content: '' });
  assert.deepEqual(s.push('nk>Let'), { reasoning: 'Let', content: '' });
  assert.deepEqual(s.push(' me </th'), { reasoning: ' me ', content: '' });
  assert.deepEqual(s.push('ink>\n'), { reasoning: '', content: '' });
  assert.deepEqual(s.push('\nHi'), { reasoning: '', content: 'Hi' });
  assert.deepEqual(s.push(' </think>'), { reasoning: '', content: ' </think>' });
  assert.deepEqual(s.flush(), { reasoning: '', content: '' });
});

test('--reasoning-parser names the parsers it takes', () => {
  assert.equal(reasoningParserFrom('qwen3'), 'qwen3');
  assert.equal(reasoningParserFrom('deepseek-r1'), 'deepseek-r1');
  assert.throws(() => reasoningParserFrom('qwen'), /--reasoning-parser: 'qwen' is not one of qwen3, deepseek-r1/);
});
