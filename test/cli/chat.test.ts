// `fuseformer chat` on the CPU: every turn's answer is what the model gives the whole conversation so far (the
// history as the template renders it) run fresh, while the earlier turns' positions come from the prefix cache;
// a conversation past the context window drops its oldest turns; /reset and /system start over; piped input gives
// the answers alone on stdout; a message too long for the window is named and the conversation goes on.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import type { DecoderModel } from '../../src/infer/model.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import type { Tokenizer } from '../../src/io/tokenizer.js';
import { ChatTemplate } from '../../src/serve/chat-template.js';
import { ChatSession } from '../../src/serve/chat-session.js';
import { ServingEngine } from '../../src/serve/engine.js';
import type { ChatMessage } from '../../src/serve/validation.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'fuseformer-chat-'));
const dir = join(root, 'tiny-llama');
const TEMPLATE = '{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}';
let model: DecoderModel, tokenizer: Tokenizer;

before(() => {
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, maxPositions: 160 }, 5, { generationConfig: { eos_token_id: 256, bos_token_id: 256 } });
  const path = join(dir, 'tokenizer_config.json');
  writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, 'utf8')), chat_template: TEMPLATE }));
  model = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' }).model;
  tokenizer = loadTokenizer(dir);
});
after(() => {
  model.free();
  rmSync(root, { recursive: true, force: true });
});

/** The greedy answer to these messages from a fresh engine (no cache), at most `maxTokens` tokens. */
function fresh(messages: ChatMessage[], maxTokens: number): string {
  const prompt = tokenizer.encode(new ChatTemplate(tokenizer).render(messages), { addSpecialTokens: false });
  const engine = new ServingEngine(model, { maxRunning: 1, prefixCaching: false });
  const tokens: number[] = [];
  engine.submit({ prompt, maxTokens, sampling: { temperature: 0, topK: 0, topP: 1, repetitionPenalty: 1, seed: 0n }, stopTokenIds: [256], onToken: (e) => tokens.push(e.token), onFinish: () => {} });
  engine.runToCompletion();
  engine.dispose();
  return tokenizer.decode(tokens.filter((t) => t !== 256), { skipSpecialTokens: true });
}

test('each turn answers the whole conversation, its earlier turns read from the prefix cache', async () => {
  const engine = new ServingEngine(model, { maxRunning: 1, blockSize: 4 });
  const session = new ChatSession(engine, tokenizer, { system: 'Be brief.', maxTokens: 8, sampling: { temperature: 0 } });
  const conversation: ChatMessage[] = [{ role: 'system', content: 'Be brief.' }];
  let cachedLater = 0;
  for (const [i, user] of ['Hello there', 'Tell me more', 'And then?'].entries()) {
    let streamed = '';
    const turn = await session.reply(user, (piece) => { streamed += piece; });
    conversation.push({ role: 'user', content: user });
    assert.equal(turn.text, fresh(conversation, 8), `turn ${i}: the answer a fresh run gives the conversation`);
    assert.equal(streamed, turn.text, 'streamed as it came');
    conversation.push({ role: 'assistant', content: turn.text });
    assert.deepEqual(session.messages, conversation);
    assert.equal(turn.droppedTurns, 0);
    if (i > 0) cachedLater += turn.cachedTokens;
  }
  assert.ok(cachedLater >= 40, `later turns reuse the earlier ones' blocks (${cachedLater} positions)`);
  session.reset();
  assert.deepEqual(session.messages, [{ role: 'system', content: 'Be brief.' }], '/reset keeps the system message');
  session.reset('Be kind.');
  assert.deepEqual(session.messages, [{ role: 'system', content: 'Be kind.' }]);
  engine.dispose();
});

test('past the context window the oldest turns are dropped; a message that cannot fit is named', async () => {
  const engine = new ServingEngine(model, { maxRunning: 1, blockSize: 4, maxLen: 48 });
  const session = new ChatSession(engine, tokenizer, { maxTokens: 6, sampling: { temperature: 0 } });
  const first = await session.reply('A first message.', () => {});
  const second = await session.reply('A second message!', () => {});
  // The second turn alone fits the 48 positions; with the first before it, it does not.
  assert.equal(second.droppedTurns, 1);
  assert.equal(second.text, fresh([{ role: 'user', content: 'A second message!' }], 6));
  assert.deepEqual(session.messages.map((m) => m.content), ['A second message!', second.text]);
  assert.ok(first.promptTokens > 0);
  await assert.rejects(session.reply('x'.repeat(60), () => {}), /this message needs \d+ positions with the template; the context holds 48/);
  assert.deepEqual(session.messages.map((m) => m.content), ['A second message!', second.text], 'the conversation is kept');
  engine.dispose();
});

test('the CLI: piped lines are messages, the answers alone on stdout; /reset and /system start over', () => {
  const run = (input: string, ...args: string[]) => spawnSync(process.execPath, [main, 'chat', '--model', dir, '--max-tokens', '6', '--temperature', '0', ...args], {
    input, encoding: 'utf8', env: { ...process.env, FUSEFORMER_BACKEND: 'cpu' },
  });
  const one = fresh([{ role: 'user', content: 'Hello there' }], 6);
  const two = fresh([{ role: 'user', content: 'Hello there' }, { role: 'assistant', content: one }, { role: 'user', content: 'Go on' }], 6);
  const withSystem = fresh([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there' }], 6);
  const r = run('Hello there\nGo on\n/reset\nHello there\n/system Be brief.\nHello there\n/exit\nnever read\n');
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, `${one}\n${two}\n${one}\n${withSystem}\n`);
  assert.match(r.stderr, /fuseformer chat: .*tiny-llama \(llama, 2 layers, f32\) on CPU/);
  assert.match(r.stderr, /\[a new conversation\]/);
  assert.match(r.stderr, /prompt \d+ positions, \d+ from the cache/);
  const bad = spawnSync(process.execPath, [main, 'chat', '--model', dir, '--top-p', '2'], { encoding: 'utf8', input: '' });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /--top-p must be a number in \(0, 1\], got '2'/);
});

test('a pipelined engine (CUDA\'s default) gives the same conversation, nothing left in flight between turns', async () => {
  const answers = async (pipeline: boolean) => {
    const engine = new ServingEngine(model, { maxRunning: 1, blockSize: 4, pipeline });
    const session = new ChatSession(engine, tokenizer, { maxTokens: 8, sampling: { temperature: 0 } });
    const texts: string[] = [];
    for (const user of ['Hello there', 'Tell me more']) {
      texts.push((await session.reply(user, () => {})).text);
      assert.equal(engine.hasWork, false, 'the turn read its last step');
    }
    engine.dispose();
    return texts;
  };
  assert.deepEqual(await answers(true), await answers(false));
});
