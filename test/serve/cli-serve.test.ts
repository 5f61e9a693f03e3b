// `fuseformer serve` as a process: it loads a tiny model folder, listens on a free port, answers a
// completion, refuses bad options with a clear message, and exits 0 on SIGTERM after a graceful shutdown.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { TINY_GPT2, writeModelFolder } from '../infer/hf-folder.js';

const main = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'fuseformer-cli-serve-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** `fuseformer serve --model MODEL_ARGS…` on a free port (CPU, f32, served as 'tiny'), once it listens; stderr() so far. */
async function startServer(modelArgs: string[]): Promise<{ child: ReturnType<typeof spawn>; url: string; stderr: () => string }> {
  const child = spawn(process.execPath, [main, 'serve', '--model', ...modelArgs, '--port', '0', '--backend', 'cpu', '--dtype', 'f32', '--served-name', 'tiny'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(stderr);
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code) => reject(new Error(`serve exited with ${code}: ${stderr}`)));
  });
  return { child, url, stderr: () => stderr };
}

test('fuseformer serve: bad options are refused by name', () => {
  const r = spawnSync(process.execPath, [main, 'serve', '--model', join(root, 'missing'), '--backend', 'cpu'], { encoding: 'utf8' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /--model: '.*missing' does not exist/);
  const help = spawnSync(process.execPath, [main, 'serve', '--help'], { encoding: 'utf8' });
  assert.equal(help.status, 0);
  assert.match(help.stdout, /--max-batch-tokens N/);
});

test('fuseformer serve: listens, answers, and shuts down gracefully on SIGTERM', async () => {
  const dir = join(root, 'tiny');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const { child, url, stderr } = await startServer([dir]);
  const health = await fetch(`${url}/health`);
  assert.equal(health.status, 200);
  const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'Hi', max_tokens: 5, temperature: 0 }) });
  assert.equal(r.status, 200);
  const body = await r.json() as { choices: { text: string; finish_reason: string }[]; usage: { completion_tokens: number } };
  assert.ok(body.usage.completion_tokens >= 1 && body.usage.completion_tokens <= 5);
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  assert.equal(await exit, 0, stderr());
  assert.match(stderr(), /shutting down/);
});

test('fuseformer serve: --kv-memory-fraction must lie in (0, 1]', () => {
  const dir = join(root, 'tiny-fraction');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const r = spawnSync(process.execPath, [main, 'serve', '--model', dir, '--backend', 'cpu', '--kv-memory-fraction', '1.5'], { encoding: 'utf8' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /--kv-memory-fraction must be a number in \(0, 1\], got '1.5'/);
  const help = spawnSync(process.execPath, [main, 'serve', '--help'], { encoding: 'utf8' });
  assert.match(help.stdout, /--kv-memory-fraction F/);
});

test('fuseformer serve --decode-steps: decode-only steps several at a time still answer; out of range is refused by name', async () => {
  const dir = join(root, 'tiny-steps');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const r = spawnSync(process.execPath, [main, 'serve', '--model', dir, '--backend', 'cpu', '--decode-steps', '17'], { encoding: 'utf8' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /decodeSteps must be an integer in \[1, 16\], got 17/);
  const { child, url, stderr } = await startServer([dir, '--decode-steps', '4']);
  try {
    const response = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'Call me', max_tokens: 9, temperature: 0 }) });
    assert.equal(response.status, 200, stderr());
    const body = await response.json() as { choices: { text: string; finish_reason: string }[]; usage: { completion_tokens: number } };
    assert.equal(body.usage.completion_tokens, 9);
    assert.equal(body.choices[0]!.finish_reason, 'length');
  } finally {
    child.kill('SIGTERM');
  }
});

test('fuseformer serve --draft: speculative serving answers, and /metrics counts the rounds', async () => {
  const dir = join(root, 'tiny-spec');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const { child, url, stderr } = await startServer([dir, '--draft', dir, '--draft-tokens', '3']);
  assert.match(stderr(), /speculative with draft 'tiny-spec' \(2 layers, K up to 8\)/);
  const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'Hi', max_tokens: 12, temperature: 0 }) });
  assert.equal(r.status, 200);
  const body = await r.json() as { usage: { completion_tokens: number } };
  assert.ok(body.usage.completion_tokens >= 1);
  const metrics = await (await fetch(`${url}/metrics`)).text();
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)?.[1]);
  if (body.usage.completion_tokens >= 3) assert.ok(value('fuseformer_speculative_rounds_total') >= 1, metrics);
  assert.equal(value('fuseformer_speculative_accepted_tokens_total'), value('fuseformer_speculative_draft_tokens_total'), 'the draft is the model itself: all accepted');
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  assert.equal(await exit, 0, stderr());
});

test('fuseformer serve: draft options are checked', () => {
  const dir = join(root, 'tiny-spec-bad');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const other = join(root, 'tiny-spec-vocab');
  writeModelFolder(other, 'gpt2', { ...TINY_GPT2, vocabSize: 300 }, 3);
  const run = (...args: string[]) => spawnSync(process.execPath, [main, 'serve', '--model', dir, '--backend', 'cpu', '--port', '0', ...args], { encoding: 'utf8' });
  assert.match(run('--draft-tokens', '3').stderr, /--draft-tokens \/ --max-draft-tokens \/ --fixed-draft-tokens need --draft DIR/);
  assert.match(run('--draft', join(root, 'nowhere')).stderr, /--draft: '.*nowhere' does not exist/);
  assert.match(run('--draft', other).stderr, /the draft model's vocabulary has 300 tokens, the target's 257/);
});

test('fuseformer serve --quantize rtn8: the engine runs INT8 projections; quantize options are checked', async () => {
  const dir = join(root, 'tiny-quant');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  const { child, url, stderr } = await startServer([dir, '--quantize', 'rtn8', '--quantize-lm-head']);
  assert.match(stderr(), /INT8 W8A8 \(rtn\) projections and LM head, f32 otherwise/);
  const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', prompt: 'Hi', max_tokens: 4, temperature: 0 }) });
  assert.equal(r.status, 200);
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  assert.equal(await exit, 0, stderr());
  const run = (...args: string[]) => spawnSync(process.execPath, [main, 'serve', '--model', dir, '--backend', 'cpu', '--port', '0', ...args], { encoding: 'utf8' });
  assert.match(run('--quantize', 'int3').stderr, /--quantize must be rtn4 or rtn8, got 'int3'/);
  assert.match(run('--quantize-lm-head').stderr, /--quantize-lm-head needs --quantize rtn4\|rtn8/);
  assert.match(run('--quantize', 'rtn4').stderr, /group size 128 must be a multiple of 32 dividing/);
});

test('fuseformer serve: a chat template that does not parse is noted at start; completions are served, chats refused naming the file', async () => {
  const dir = join(root, 'tiny-broken-template');
  writeModelFolder(dir, 'gpt2', TINY_GPT2, 3);
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ chat_template: '{% for m in messages %}{{ m.content }' }));
  const { child, url, stderr } = await startServer([dir]);
  assert.match(stderr(), /note: \/v1\/chat\/completions will refuse requests: .*tokenizer_config\.json \(field "chat_template"\): the chat template does not parse/);
  const post = (path: string, body: unknown) => fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal((await post('/v1/completions', { model: 'tiny', prompt: 'Hi', max_tokens: 2 })).status, 200);
  const chat = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 });
  const error = await chat.json() as { error: { message: string } };
  assert.equal(chat.status, 400);
  assert.match(error.error.message, /tokenizer_config\.json \(field "chat_template"\): the chat template does not parse.*use \/v1\/completions/);
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  assert.equal(await exit, 0, stderr());
});
