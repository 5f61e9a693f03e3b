// `fuseformer chat`: talk with a model in the terminal. Each line you type is a user message; the answer streams
// as it is generated, and the conversation goes on from it (serve/chat-session.ts: the earlier turns' KV blocks
// are reused from the prefix cache, so a turn computes only its own positions). /reset, /system TEXT, /exit; Ctrl-C
// stops an answer, Ctrl-C at the prompt or Ctrl-D ends. With stdin not a terminal (a pipe, a file), each line is a
// message and each answer is printed on its own line(s) after it, nothing else on stdout.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { resolveModelDirectory } from '../io/hf-cache.js';
import { hasTokenizer, loadTokenizer } from '../io/tokenizer.js';
import { chatTemplateOption } from '../serve/chat-template.js';
import { ChatSession } from '../serve/chat-session.js';
import { ServingEngine } from '../serve/engine.js';
import { warmUp } from '../serve/warmup.js';
import { isEncoderDecoder, loadDecoderDirectory, precisionOf, quantizeOption } from './model-directory.js';
import { numberOption, samplingFlags } from './sampling-options.js';
import { JSON_OPTIONS_USAGE, jsonConstraints, jsonGrammarOption } from './json-output.js';
import { defaultStopTokenIds } from '../infer/generate.js';

export const CHAT_USAGE = `usage: fuseformer chat --model DIR [options]

Talk with a GPT-2 or Llama-family model through its chat template. Type a message and press Enter; the answer
streams as it is generated and the conversation continues from it (earlier turns are not computed again: their
KV cache blocks are reused). Commands: /reset (a new conversation), /system TEXT (a new system message, and a new
conversation), /exit. Ctrl-C stops an answer; Ctrl-C at the prompt or Ctrl-D ends. Piped input: one message a line.

  --model DIR              a Hugging Face GPT-2 or Llama directory with a chat template (tokenizer_config.json
                           "chat_template" or chat_template.jinja), a quantized one, or a repository id in the local
                           Hugging Face cache
  --system TEXT            a system message first
  --no-thinking            the template's enable_thinking = false (Qwen3: no <think> block)
  --chat-template T        this template (a file, or the template itself in one line) in place of the model's
  --max-tokens N           an answer's length at most (default: the rest of the context window)
  --max-len N              context window in positions (default: the model's); the oldest turns are dropped to fit
  --temperature X, --top-k N, --top-p P, --repetition-penalty X
                           sampling (default: generation_config.json's, else greedy)
  --seed N                 the seed of the first answer (the next ones take N + 1, N + 2, …; default random)
${JSON_OPTIONS_USAGE} — every answer
  --quantize rtn4|rtn8     quantize a 16-bit model on loading (round-to-nearest INT4 / INT8)
  --dtype bf16|f16|f32     (default bf16 on CUDA, f32 on the CPU)
  --backend auto|cpu|cuda  (default auto; env FUSEFORMER_BACKEND)
  --no-graphs              on CUDA, run steps eagerly instead of replaying CUDA graphs
  --no-warmup              on CUDA, skip the start-up warm-up (kernel compiles, GEMM tuning, the decode graph: a
                           few seconds the first answer would otherwise pay, and its GEMMs would stay untuned)
`;

export async function runChat(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: {
      model: { type: 'string' }, system: { type: 'string' }, 'chat-template': { type: 'string' }, 'no-thinking': { type: 'boolean', default: false }, 'max-tokens': { type: 'string' },
      'max-len': { type: 'string' }, temperature: { type: 'string' }, 'top-k': { type: 'string' }, 'top-p': { type: 'string' },
      'repetition-penalty': { type: 'string' }, seed: { type: 'string' }, quantize: { type: 'string' }, dtype: { type: 'string' },
      backend: { type: 'string' }, 'no-graphs': { type: 'boolean', default: false }, 'no-warmup': { type: 'boolean', default: false },
      json: { type: 'boolean', default: false }, 'json-schema': { type: 'string' },
    },
  });
  if (values.model === undefined) throw new ArgumentError('--model DIR is required (a Hugging Face GPT-2 or Llama directory with a chat template)');
  const dir = resolveModelDirectory(values.model);
  if (!existsSync(join(dir, 'config.json'))) throw new ArgumentError(`--model: '${dir}' has no config.json`);
  if (isEncoderDecoder(dir)) throw new ArgumentError(`--model: '${dir}' is an encoder-decoder (Marian) model: it translates, it does not chat (\`fuseformer generate --input\`)`);
  if (!hasTokenizer(dir)) throw new ArgumentError(`--model: '${dir}' has no tokenizer.json (nor a Llama tokenizer.model)`);
  const dtype = values.dtype as FloatDType | undefined;
  if (dtype !== undefined && !['bf16', 'f16', 'f32'].includes(dtype)) throw new ArgumentError(`--dtype must be bf16, f16 or f32, got '${dtype}'`);
  const count = (x: number) => Number.isSafeInteger(x) && x >= 1;
  const maxTokens = numberOption('max-tokens', values['max-tokens'], count, 'a positive integer');
  const maxLen = numberOption('max-len', values['max-len'], (x) => Number.isSafeInteger(x) && x >= 2, 'an integer >= 2');
  const { sampling, seed } = samplingFlags(values);
  const quantize = quantizeOption(dir, values.quantize, false, 1);
  const chatTemplate = values['chat-template'] === undefined ? undefined : chatTemplateOption(values['chat-template']);
  const grammar = jsonGrammarOption(values.json, values['json-schema']);

  const { backend } = await selectBackend(values.backend as BackendChoice | undefined);
  const loadStart = performance.now();
  const { model } = loadDecoderDirectory(dir, backend, { ...(dtype ? { dtype } : {}), ...(quantize ? { quantize } : {}) });
  const tokenizer = loadTokenizer(dir);
  // One conversation: one request at a time, every block of the pool for it (the history's and the answer's).
  const engine = new ServingEngine(model, { maxRunning: 1, ...(maxLen !== undefined ? { maxLen } : {}), ...(values['no-graphs'] ? { graphs: false } : {}) });
  const interactive = process.stdin.isTTY === true;
  const note = (line: string) => process.stderr.write(`${line}\n`);
  try {
    const session = new ChatSession(engine, tokenizer, {
      ...(values.system !== undefined ? { system: values.system } : {}), ...(chatTemplate ? { chatTemplate } : {}), ...(values['no-thinking'] ? { templateVariables: { enable_thinking: false } } : {}),
      ...(maxTokens !== undefined ? { maxTokens } : {}), seed, sampling,
      ...(grammar ? { constraint: jsonConstraints(grammar, tokenizer, model, defaultStopTokenIds(model)) } : {}),
    });
    if (backend.name === 'cuda' && !values['no-warmup']) {
      const w = warmUp(engine);
      note(`fuseformer chat: warmed up in ${(w.ms / 1000).toFixed(1)} s (prompts of ${w.promptLengths.join(', ')} tokens)`);
    }
    note(`fuseformer chat: ${dir} (${model.arch.family}, ${model.arch.layers} layers, ${precisionOf(model)}) on ${backend.description}, loaded in ${((performance.now() - loadStart) / 1000).toFixed(1)} s; context ${engine.maxLen} positions${interactive ? '; /reset, /system TEXT, /exit; Ctrl-C stops an answer' : ''}`);
    await converse(session, interactive, note);
  } finally {
    engine.dispose();
    model.free();
  }
  return 0;
}

/** The read–answer loop over stdin. */
async function converse(session: ChatSession, interactive: boolean, note: (line: string) => void): Promise<void> {
  const lines = createInterface({ input: process.stdin, output: process.stdout, terminal: interactive });
  let answering = false, closed = false;
  lines.on('SIGINT', () => {
    if (answering) session.interrupt();
    else lines.close();
  });
  lines.on('close', () => { closed = true; });
  const ask = () => { if (interactive && !closed) lines.prompt(); };
  lines.setPrompt('> ');
  ask();
  for await (const line of lines) {
    const text = line.trim();
    if (text === '') { ask(); continue; }
    if (text === '/exit' || text === '/quit') break;
    if (text === '/reset') { session.reset(); note('[a new conversation]'); ask(); continue; }
    if (text.startsWith('/system')) {
      session.reset(text.slice('/system'.length).trim());
      note('[a new conversation with this system message]');
      ask();
      continue;
    }
    answering = true;
    const start = performance.now();
    try {
      const turn = await session.reply(line, (piece) => process.stdout.write(piece));
      process.stdout.write('\n');
      const seconds = (performance.now() - start) / 1000;
      note(`[${turn.tokens} tokens in ${seconds.toFixed(2)} s${turn.finish === 'cancelled' ? ', stopped' : turn.finish === 'length' ? ', cut at the length limit' : ''}; ` +
        `prompt ${turn.promptTokens} positions, ${turn.cachedTokens} from the cache${turn.droppedTurns > 0 ? `; ${turn.droppedTurns} oldest turn(s) dropped to fit the context` : ''}]`);
    } catch (error) {
      if (!(error instanceof ArgumentError)) throw error;
      note(error.message);  // a message too long for the context: say so, keep the conversation
    } finally {
      answering = false;
    }
    ask();
  }
  lines.close();
}
