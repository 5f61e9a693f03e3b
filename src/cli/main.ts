#!/usr/bin/env node
// fuseformer's command line. With no command: show this machine's setup, then check every op on the
// fastest available backend against the CPU reference.

import { parseArgs } from 'node:util';
import { ArgumentError, FuseformerError } from '../errors.js';
import { runInfo } from './info.js';
import { runLaunch } from './launch.js';
import { QUANTIZE_USAGE, runQuantize } from './quantize.js';
import { CHAT_USAGE, runChat } from './chat.js';
import { GENERATE_USAGE, runGenerate } from './generate.js';
import { BENCH_USAGE, runBench } from './bench.js';
import { EMBED_USAGE, runEmbed } from './embed.js';
import { PROFILE_USAGE, runProfile } from './profile.js';
import { RERANK_USAGE, runRerank } from './rerank.js';
import { runSelftest } from './selftest.js';
import { runServe, SERVE_USAGE } from './serve.js';
import { runTrain, TRAIN_USAGE } from './train.js';

const USAGE = `usage: fuseformer [command] [options]

commands:
  train [options]      train a GPT-2-architecture model (fuseformer train --help for options)
  launch --gpus N -- <command>   one process per GPU with the NCCL rendezvous (launch --help)
  generate [options]   continue a prompt with a GPT-2 or Llama model directory (generate --help)
  chat --model DIR     talk with a model in the terminal through its chat template (chat --help)
  serve --model DIR    OpenAI-compatible HTTP server with continuous batching (serve --help)
  embed --model DIR --text TEXT   sentence embeddings (JSON) from a BERT-family directory (embed --help)
  rerank --model DIR --query Q --document D   documents scored by a cross-encoder, best first (rerank --help)
  profile [options]    where a step's time goes: every kernel timed, on the roofline (profile --help)
  bench [options]      run the benchmark suites and chart their results (bench --help)
  quantize [options]   INT4 (rtn/awq/gptq) or INT8 W8A8 quantization of a GPT-2 or Llama directory (quantize --help)
  info                 GPU, driver, CUDA libraries found (or why not), kernel cache location
  selftest [--full]    run every op on the selected backend and compare it with the CPU reference
                       (--dtype f32|f16|bf16 to pick one dtype; --full for all shapes)
  (no command)         the demo: train the tiny GPT-2 preset on Moby-Dick (CUDA if present, else CPU)

options:
  --backend auto|cpu|cuda   backend to use (default: auto; env FUSEFORMER_BACKEND)
  -h, --help                this text
`;

const COMMANDS = ['train', 'profile', 'bench', 'info', 'selftest', 'generate', 'chat', 'quantize', 'serve', 'embed', 'rerank'];

async function main(argv: string[]): Promise<number> {
  if (argv[0] === 'launch') return runLaunch(argv.slice(1));
  // `train` has its own options (fuseformer train --steps 100 ...); with no command, options go to the
  // demo, which is `train` with its defaults (fuseformer --backend cpu --steps 20).
  const commandAt = argv.findIndex((a) => COMMANDS.includes(a));
  const isHelp = argv.includes('--help') || argv.includes('-h');
  // A first word that is not an option and not a command is a mistyped command, not the demo's argument.
  if (commandAt < 0 && argv[0] !== undefined && !argv[0].startsWith('-')) {
    throw new ArgumentError(`unknown command '${argv[0]}' (commands: ${['launch', ...COMMANDS].join(', ')}; fuseformer --help)`);
  }
  if (argv[commandAt] === 'train' || (commandAt < 0 && !isHelp)) {
    const rest = commandAt < 0 ? argv : [...argv.slice(0, commandAt), ...argv.slice(commandAt + 1)];
    if (isHelp) { process.stdout.write(TRAIN_USAGE); return 0; }
    return (await runTrain(rest)).code;
  }
  if (argv[commandAt] === 'generate') {
    if (isHelp) { process.stdout.write(GENERATE_USAGE); return 0; }
    return runGenerate([...argv.slice(0, commandAt), ...argv.slice(commandAt + 1)]);
  }
  if (argv[commandAt] === 'chat') {
    if (isHelp) { process.stdout.write(CHAT_USAGE); return 0; }
    return runChat([...argv.slice(0, commandAt), ...argv.slice(commandAt + 1)]);
  }
  if (argv[commandAt] === 'embed') {
    if (isHelp) { process.stdout.write(EMBED_USAGE); return 0; }
    return runEmbed([...argv.slice(0, commandAt), ...argv.slice(commandAt + 1)]);
  }
  if (argv[commandAt] === 'rerank') {
    if (isHelp) { process.stdout.write(RERANK_USAGE); return 0; }
    return runRerank([...argv.slice(0, commandAt), ...argv.slice(commandAt + 1)]);
  }
  if (argv[commandAt] === 'serve') {
    if (isHelp) { process.stdout.write(SERVE_USAGE); return 0; }
    return runServe([...argv.slice(0, commandAt), ...argv.slice(commandAt + 1)]);
  }
  if (argv[commandAt] === 'profile' || argv[commandAt] === 'bench') {
    const bench = argv[commandAt] === 'bench';
    const rest = [...argv.slice(0, commandAt), ...argv.slice(commandAt + 1)];
    if (isHelp) { process.stdout.write(bench ? BENCH_USAGE : PROFILE_USAGE); return 0; }
    return bench ? runBench(rest) : runProfile(rest);
  }
  if (argv[commandAt] === 'quantize') {
    if (isHelp) { process.stdout.write(QUANTIZE_USAGE); return 0; }
    return runQuantize([...argv.slice(0, commandAt), ...argv.slice(commandAt + 1)]);
  }
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      backend: { type: 'string' },
      dtype: { type: 'string' },
      full: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) { process.stdout.write(USAGE); return 0; }
  const command = positionals[0];
  const backend = values.backend as 'auto' | 'cpu' | 'cuda' | undefined;
  if (positionals.length > 1) throw new ArgumentError(`${command} takes no arguments, got '${positionals.slice(1).join(' ')}'`);
  switch (command) {
    case 'info':
      // info reports what this machine has: it runs on no backend and draws no dtype.
      for (const option of ['backend', 'dtype', 'full'] as const) {
        if (values[option] !== undefined && values[option] !== false) throw new ArgumentError(`--${option} is not an option of info (it reports the machine, on no backend)`);
      }
      runInfo();
      return 0;
    case 'selftest':
      return runSelftest({ backend, dtype: values.dtype, full: values.full ?? false });
    default:
      process.stderr.write(`fuseformer: unknown command '${command}'\n\n${USAGE}`);
      return 2;
  }
}

// A closed pipe (`fuseformer info | head`) is not an error worth a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => { if (error.code === 'EPIPE') process.exit(0); throw error; });

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (error: unknown) => {
    const code = (error as { code?: unknown }).code;
    // Our own errors, argument parsing, and the file system's (ENOSPC, EACCES, …: the message names the
    // path and the call) are the user's to fix, and a stack trace would bury the one line that matters.
    const systemError = typeof (error as { syscall?: unknown }).syscall === 'string';
    if (error instanceof FuseformerError || systemError || (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS'))) {
      process.stderr.write(`fuseformer: ${(error as Error).message}\n`);
    } else {
      process.stderr.write(`fuseformer: ${error instanceof Error ? error.stack : String(error)}\n`);
    }
    process.exitCode = 1;
  },
);
