// `fuseformer generate --chat` on the CPU: the prompt is the model's chat template over [system,] user (with
// --no-thinking's enable_thinking = false), encoded without adding special tokens again; only the answer is printed,
// the tokens of generating from that prompt directly. Misused options are named.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { runGenerate } from '../../src/cli/generate.js';
import { generateText } from '../../src/infer/generate.js';
import { loadDecoderModel } from '../../src/infer/model.js';
import { loadTokenizer } from '../../src/io/tokenizer.js';
import { TINY_LLAMA, writeModelFolder } from '../infer/hf-folder.js';

const root = mkdtempSync(join(tmpdir(), 'fuseformer-generate-chat-'));
after(() => rmSync(root, { recursive: true, force: true }));

const TEMPLATE = '{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}' +
  '{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}';

function folder(name: string, template?: string): string {
  const dir = join(root, name);
  writeModelFolder(dir, 'llama', { ...TINY_LLAMA, maxPositions: 96 }, 5, { generationConfig: { eos_token_id: 256, bos_token_id: 256 } });
  if (template !== undefined) {
    const path = join(dir, 'tokenizer_config.json');
    writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, 'utf8')), chat_template: template }));
  }
  return dir;
}

async function printed(run: () => Promise<number>): Promise<string> {
  const out: string[] = [];
  const write = process.stdout.write.bind(process.stdout), writeErr = process.stderr.write.bind(process.stderr);
  // The CLI writes strings; the test runner's own reports (binary, to stdout) pass through.
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    if (typeof chunk !== 'string') return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
    out.push(chunk);
    return true;
  }) as typeof process.stdout.write;
  process.stderr.write = (() => true) as typeof process.stderr.write;
  try {
    assert.equal(await run(), 0);
  } finally {
    process.stdout.write = write;
    process.stderr.write = writeErr;
  }
  return out.join('');
}

async function answer(dir: string, promptText: string): Promise<string> {
  const { model } = loadDecoderModel(dir, new CpuBackend(), { dtype: 'f32' });
  const tokenizer = loadTokenizer(dir);
  let text = '';
  for await (const piece of generateText(model, tokenizer, tokenizer.encode(promptText, { addSpecialTokens: false }), { maxNewTokens: 6, temperature: 0 })) text += piece;
  model.free();
  return text;
}

test('--chat renders the chat template over the system and user messages; --no-thinking sets enable_thinking = false; only the answer is printed', async () => {
  const dir = folder('chat', TEMPLATE);
  const base = ['--model', dir, '--backend', 'cpu', '--max-tokens', '6', '--temperature', '0', '--prompt', 'Hello'];
  const plain = await printed(() => runGenerate([...base, '--chat', '--system', 'Be brief.']));
  assert.equal(plain, `${await answer(dir, '<system>Be brief.\n<user>Hello\n<assistant>')}\n`);
  const noThinking = await printed(() => runGenerate([...base, '--chat', '--no-thinking']));
  assert.equal(noThinking, `${await answer(dir, '<user>Hello\n<assistant><think></think>')}\n`);
  // Without --chat the prompt is continued as text, and echoed.
  assert.ok((await printed(() => runGenerate(base))).startsWith('Hello'));
});

test('--chat without a chat template, and --system / --no-thinking without --chat, are refused by name', async () => {
  const dir = folder('no-template');
  const base = ['--model', dir, '--backend', 'cpu', '--max-tokens', '2', '--prompt', 'Hello'];
  await assert.rejects(runGenerate([...base, '--chat']), /--chat: the model has no chat template .*; without --chat the prompt is continued as text/);
  await assert.rejects(runGenerate([...base, '--system', 'x']), /--system goes with --chat/);
  await assert.rejects(runGenerate([...base, '--no-thinking']), /--no-thinking goes with --chat/);
  await assert.rejects(runGenerate(['--model', dir, '--backend', 'cpu', '--chat']), /--prompt TEXT is required|--chat takes the user message from --prompt TEXT/);
});

test('--chat-template: a file or an inline template in place of the model\'s (also where it has none); one that does not parse, or is neither, is named', async () => {
  const dir = folder('override');
  const base = ['--model', dir, '--backend', 'cpu', '--max-tokens', '6', '--temperature', '0', '--prompt', 'Hello', '--chat'];
  const file = join(root, 'template.jinja');
  writeFileSync(file, '{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] ');
  assert.equal(await printed(() => runGenerate([...base, '--chat-template', file])), `${await answer(dir, '[user] Hello\n[assistant] ')}\n`);
  const inline = '{% for m in messages %}{{ m.content }}|{% endfor %}';
  assert.equal(await printed(() => runGenerate([...base, '--chat-template', inline])), `${await answer(dir, 'Hello|')}\n`);
  await assert.rejects(runGenerate([...base, '--chat-template', join(root, 'missing.jinja')]), /--chat-template: '.*missing\.jinja' is no file, nor a template/);
  await assert.rejects(runGenerate([...base, '--chat-template', '{% for m in messages %}']), /--chat-template: --chat-template \(inline\): the chat template does not parse/);
  await assert.rejects(runGenerate(['--model', dir, '--backend', 'cpu', '--prompt', 'Hello', '--chat-template', inline]), /--chat-template goes with --chat/);
});
