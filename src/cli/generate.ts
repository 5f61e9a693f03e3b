// `fuseformer generate`: continue a prompt with a Hugging Face GPT-2 or Llama model directory, streaming
// the text as it is generated (stdout) and a one-line summary at the end (stderr).

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import { defaultStopTokenIds, generateText } from '../infer/generate.js';
import { newTokenBudget } from '../infer/generation-config.js';
import { resolveSampling } from '../infer/sampling.js';
import { constrainedText, JSON_OPTIONS_USAGE, jsonGrammarOption } from './json-output.js';
import type { TranslateOptions, Translator } from '../infer/seq2seq.js';
import { loadSeq2Seq, sourceIds, translate, translateText, translationText } from '../infer/seq2seq.js';
import { hasMarianTokenizerFiles } from '../io/marian-tokenizer.js';
import { emptySpeculativeStats } from '../infer/speculative.js';
import { hasTokenizer, loadTokenizer } from '../io/tokenizer.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { ChatTemplate, chatTemplateOption } from '../serve/chat-template.js';
import type { ChatTemplateText } from '../serve/chat-template.js';
import { isEncoderDecoder, loadDecoderDirectory, loadDraftDirectory, precisionOf, quantizeOption, tokenizerVocabularyNote } from './model-directory.js';
import { broadcastSeed, tensorParallelGroup } from './tensor-parallel-group.js';
import { resolveModelDirectory } from '../io/hf-cache.js';
import { readInputLines } from './input-lines.js';
import { numberOption, samplingFlags } from './sampling-options.js';

export const GENERATE_USAGE = `usage: fuseformer generate --model DIR --prompt TEXT [options]
       fuseformer generate --model MARIAN_DIR --input FILE [--batch-size N] [options]

  --model DIR              a Hugging Face GPT-2 or Llama directory: config.json, model.safetensors or pytorch_model.bin (or shards),
                           tokenizer.json, and generation_config.json for defaults; or a Marian translation
                           model (MarianMTModel, e.g. an opus-mt download: its source.spm, target.spm and vocab.json
                           serve when there is no tokenizer.json), whose output is the translation of the prompt; or a quantized
                           GPT-2 or Llama directory (\`fuseformer quantize\`, or a Hugging Face GPTQ / AWQ one): its INT4 / INT8
                           projections run on the quantized kernels. Any DIR may be a repository id, org/name[@rev],
                           found in the local Hugging Face cache (nothing is downloaded)
  --quantize rtn4|rtn8     quantize a 16-bit GPT-2 or Llama model on loading (round-to-nearest): INT4 W4A16 in groups
                           of 128, or INT8 W8A8 per channel; embeddings, norms and the LM head stay 16-bit
  --quantize-lm-head       with --quantize, or on a quantized directory: the LM head too, round-to-nearest at the
                           projections' bits (at batch 1 a large share of the bytes a step reads)
  --beams N                beam search with N beams (Marian models; default: generation_config.json's
                           num_beams); HARS top-k on the GPU
  --length-penalty X       beam search's length penalty (default: generation_config.json's, else 1)
  --prompt TEXT            the text to continue (encoded with the tokenizer's special tokens, e.g. Llama's BOS)
  --chat                   --prompt is a user message: the model's chat template (tokenizer_config.json or
                           chat_template.jinja) makes the prompt, as /v1/chat/completions does; only the answer is printed
  --system TEXT            with --chat: a system message first
  --no-thinking            with --chat: the template's enable_thinking = false (Qwen3: no <think> block)
  --chat-template T        with --chat: this template (a file, or the template itself in one line) in place of the model's
${JSON_OPTIONS_USAGE}
  --input FILE             (Marian models) translate FILE line by line, '-' for stdin: one translation a line on
                           stdout, in order, printed batch by batch; an empty line gives an empty line
  --batch-size N           with --input: sources translated together (default 32)
  --max-tokens N           new tokens at most (default: generation_config.json's max_new_tokens, else 256)
  --temperature X          0 = greedy (default: generation_config.json's settings, else greedy)
  --top-k K                sample among the K most likely tokens (0 = all; 50 when sampling by default)
  --top-p P                sample from the smallest set of tokens holding probability P (1 = all)
  --repetition-penalty R   divide (positive) or multiply (negative) the logits of tokens already seen by R
  --seed N                 sampling seed (default: random; printed at the end)
  --stop TEXT              stop when TEXT appears (repeatable; TEXT is not printed)
  --dtype bf16|f16|f32     weights and activations (default bf16 on CUDA, f32 on the CPU)
  --backend auto|cpu|cuda  (default auto; env FUSEFORMER_BACKEND)
  --no-graphs              run decode steps eagerly instead of replaying CUDA graphs
  --draft DIR              speculative decoding with this smaller model (same tokenizer) as the draft: the output
                           follows the --model's distribution exactly (greedy: the same tokens); batch 1
  --draft-tokens K         draft tokens per target pass to start with (default 4; alias --speculative-k)
  --fixed-draft-tokens     keep K fixed instead of adapting it to the acceptance rate
  --tp N                   tensor parallel over N GPUs (GPT-2, Llama: heads, MLP and KV cache split, Megatron); run
                           as \`fuseformer launch --gpus N -- fuseformer generate --tp N ...\`; rank 0 prints
                           the text, the other ranks run their shards of every step
`;

/**
 * Translates `lines` in batches of `batchSize` non-empty lines, writing one translation a line in order as
 * each batch is done (an empty or blank line gives an empty line). A line too long for the model is refused by
 * its number before anything is translated.
 */
export function translateLines(t: Translator, lines: readonly string[], name: string, batchSize: number, options: TranslateOptions, write: (text: string) => void): { sentences: number; tokens: number } {
  const maxPositions = t.model.config.maxPositions;
  const sources = lines.map((line, i) => {
    if (line.trim() === '') return undefined;
    const ids = sourceIds(t, line);
    if (ids.length > maxPositions) throw new ArgumentError(`--input ${name} line ${i + 1}: ${ids.length} tokens; the model takes sources of at most ${maxPositions} (max_position_embeddings)`);
    return ids;
  });
  const texts = new Array<string>(lines.length).fill('');
  let written = 0, sentences = 0, tokens = 0;
  const pending = sources.flatMap((ids, i) => (ids ? [i] : []));
  for (let first = 0; first < pending.length; first += batchSize) {
    const batch = pending.slice(first, first + batchSize);
    const results = translate(t, batch.map((i) => sources[i]!), options);
    results.forEach((r, j) => { texts[batch[j]!] = translationText(t, r); tokens += r.tokens.length; });
    sentences += batch.length;
    // Everything up to the last line of this batch is final: print it.
    const upTo = batch[batch.length - 1]! + 1;
    write(texts.slice(written, upTo).map((x) => `${x}\n`).join(''));
    written = upTo;
  }
  write(texts.slice(written).map((x) => `${x}\n`).join(''));
  return { sentences, tokens };
}

/** The prompt text of a one-turn chat: the model's chat template over [system,] user, with a generation prompt. */
function chatPrompt(tokenizer: Tokenizer, user: string, system: string | undefined, noThinking: boolean, override?: ChatTemplateText): string {
  const template = new ChatTemplate(tokenizer, override);
  if (!template.available) throw new ArgumentError(`--chat: ${template.problem ?? `the model has no chat template (tokenizer_config.json "chat_template" or chat_template.jinja)`}; without --chat the prompt is continued as text`);
  const messages = [...(system !== undefined ? [{ role: 'system', content: system }] : []), { role: 'user', content: user }];
  return template.render(messages, noThinking ? { enable_thinking: false } : {});
}

export async function runGenerate(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: {
      model: { type: 'string' }, prompt: { type: 'string' }, 'max-tokens': { type: 'string' }, temperature: { type: 'string' },
      'top-k': { type: 'string' }, 'top-p': { type: 'string' }, 'repetition-penalty': { type: 'string' }, seed: { type: 'string' },
      stop: { type: 'string', multiple: true }, dtype: { type: 'string' }, backend: { type: 'string' }, 'no-graphs': { type: 'boolean', default: false },
      beams: { type: 'string' }, 'length-penalty': { type: 'string' },
      draft: { type: 'string' }, 'draft-tokens': { type: 'string' }, 'speculative-k': { type: 'string' }, 'fixed-draft-tokens': { type: 'boolean', default: false },
      tp: { type: 'string' }, quantize: { type: 'string' }, 'quantize-lm-head': { type: 'boolean', default: false },
      input: { type: 'string' }, 'batch-size': { type: 'string' }, chat: { type: 'boolean', default: false }, system: { type: 'string' },
      'no-thinking': { type: 'boolean', default: false }, 'chat-template': { type: 'string' },
      json: { type: 'boolean', default: false }, 'json-schema': { type: 'string' },
    },
  });
  if (values.model === undefined) throw new ArgumentError('--model DIR is required (a Hugging Face GPT-2 or Llama directory)');
  const dir = resolveModelDirectory(values.model);
  if (values.prompt === undefined && values.input === undefined) throw new ArgumentError('--prompt TEXT is required (or --input FILE, for a Marian model)');
  if (values.prompt !== undefined && values.input !== undefined) throw new ArgumentError('--prompt and --input: give one (--input translates a file line by line)');
  if (values['batch-size'] !== undefined && values.input === undefined) throw new ArgumentError('--batch-size goes with --input FILE');
  const chatOnly = (['system', 'no-thinking', 'chat-template'] as const).find((o) => values[o] !== undefined && values[o] !== false);
  if (!values.chat && chatOnly !== undefined) throw new ArgumentError(`--${chatOnly} goes with --chat`);
  if (values.chat && values.prompt === undefined) throw new ArgumentError('--chat takes the user message from --prompt TEXT');
  if (!existsSync(join(dir, 'config.json'))) throw new ArgumentError(`--model: '${dir}' has no config.json`);
  if (!hasTokenizer(dir) && !(isEncoderDecoder(dir) && hasMarianTokenizerFiles(dir))) {
    throw new ArgumentError(`--model: '${dir}' has no tokenizer.json${isEncoderDecoder(dir) ? " (nor Marian's source.spm, target.spm and vocab.json)" : ' (nor a Llama tokenizer.model)'} (needed to encode the prompt and decode the output)`);
  }
  const dtype = values.dtype as FloatDType | undefined;
  if (dtype !== undefined && !['bf16', 'f16', 'f32'].includes(dtype)) throw new ArgumentError(`--dtype must be bf16, f16 or f32, got '${dtype}'`);
  const integer = (x: number) => Number.isSafeInteger(x) && x >= 0;
  const maxNewTokens = numberOption('max-tokens', values['max-tokens'], integer, 'a non-negative integer');
  const flags = samplingFlags(values);
  const draftDir = values.draft === undefined ? undefined : resolveModelDirectory(values.draft, '--draft');
  if (draftDir !== undefined && !existsSync(join(draftDir, 'config.json'))) throw new ArgumentError(`--draft: '${draftDir}' has no config.json`);
  if (values['draft-tokens'] !== undefined && values['speculative-k'] !== undefined) throw new ArgumentError('--draft-tokens and --speculative-k are the same option; give one');
  const draftTokens = numberOption(values['draft-tokens'] !== undefined ? 'draft-tokens' : 'speculative-k', values['draft-tokens'] ?? values['speculative-k'], (x) => Number.isSafeInteger(x) && x >= 1, 'a positive integer');
  if (draftDir === undefined && (draftTokens !== undefined || values['fixed-draft-tokens'])) throw new ArgumentError('--draft-tokens / --speculative-k / --fixed-draft-tokens need --draft DIR');
  let seed = flags.seed;
  const tp = numberOption('tp', values.tp, (x) => Number.isSafeInteger(x) && x >= 1, 'a positive integer') ?? 1;
  const grammar = jsonGrammarOption(values.json, values['json-schema']);
  if (grammar) {
    const which = values.json ? '--json' : '--json-schema';
    const clash = ([['draft', draftDir !== undefined], ['tp', tp > 1], ['input', values.input !== undefined], ['beams', values.beams !== undefined], ['stop', values.stop !== undefined]] as const).find(([, given]) => given);
    if (clash) throw new ArgumentError(`${which} with --${clash[0]}: a constrained answer decodes one sequence on one GPU without a draft or beams, and ends where its JSON does (no stop strings)`);
    if (isEncoderDecoder(dir)) throw new ArgumentError(`${which}: constrained answers are for decoder-only (GPT-2, Llama) models`);
  }

  const quantize = quantizeOption(dir, values.quantize, values['quantize-lm-head']!, tp);
  const beams = numberOption('beams', values.beams, (x) => Number.isSafeInteger(x) && x >= 1, 'a positive integer');
  const lengthPenalty = numberOption('length-penalty', values['length-penalty'], Number.isFinite, 'a number');
  const batchSize = numberOption('batch-size', values['batch-size'], (x) => Number.isSafeInteger(x) && x >= 1, 'a positive integer') ?? 32;
  if (values.input !== undefined && !isEncoderDecoder(dir)) {
    throw new ArgumentError(`--input: translating a file line by line is for Marian (encoder-decoder) models; '${dir}' is decoder-only (give it --prompt, or serve it: \`fuseformer serve\`)`);
  }
  if (tp > 1) {
    if (isEncoderDecoder(dir)) throw new ArgumentError(`--tp ${tp}: tensor parallel generation runs decoder-only (GPT-2, Llama) models; '${dir}' is an encoder-decoder`);
    if (draftDir !== undefined) throw new ArgumentError(`--tp ${tp} with --draft: speculative decoding runs on one GPU; drop one of them`);
  }
  const group = tp > 1 ? await tensorParallelGroup('generate', tp, values.backend as BackendChoice | undefined) : undefined;
  const { backend } = group ?? await selectBackend(values.backend as BackendChoice | undefined);
  // Every rank must sample with the same seed (the same draws keep the ranks' sequences, and collectives, in step): rank 0's.
  if (group) seed = broadcastSeed(group.comm, seed);
  const rank0 = !group || group.comm.rank === 0;
  const write = (text: string) => { if (rank0) process.stdout.write(text); };
  if (isEncoderDecoder(dir)) {
    if (draftDir !== undefined) throw new ArgumentError('--draft: speculative decoding is for decoder-only (GPT-2, Llama) models');
    if (values.chat) throw new ArgumentError('--chat: a Marian model translates its input; it has no chat template');
    if (quantize !== undefined) throw new ArgumentError(`--quantize ${quantize}: quantized generation is for decoder-only (GPT-2, Llama) models`);
    // Translation searches (beam search, or greedy with --beams 1); it does not sample.
    const sampling = (['temperature', 'top-k', 'top-p', 'repetition-penalty', 'seed', 'stop'] as const).filter((o) => values[o] !== undefined);
    if (sampling.length > 0) throw new ArgumentError(`${sampling.map((o) => `--${o}`).join(', ')}: a Marian model translates by beam search (--beams N, --length-penalty X, --max-tokens N); it does not sample`);
    const lines = values.input === undefined ? undefined : readInputLines(values.input);
    const translator = loadSeq2Seq(dir, backend, dtype ? { dtype } : {});
    const unused = translator.unusedTensors;
    if (unused.length > 0) process.stderr.write(`note: ${unused.length} tensor(s) in the checkpoint are not used: ${unused.slice(0, 3).join(', ')}${unused.length > 3 ? ', …' : ''}\n`);
    try {
      const options = {
        ...(beams !== undefined ? { numBeams: beams } : {}), ...(maxNewTokens !== undefined ? { maxNewTokens } : {}),
        ...(lengthPenalty !== undefined ? { lengthPenalty } : {}), graphs: !values['no-graphs'] && backend.name === 'cuda',
      };
      const start = performance.now();
      const beamCount = beams ?? translator.generation.numBeams;
      if (lines === undefined) {
        const [text] = translateText(translator, [values.prompt!], options);
        process.stdout.write(`${text}\n`);
        process.stderr.write(`[translated on ${backend.description} with ${beamCount} beam(s) in ${((performance.now() - start) / 1000).toFixed(2)} s]\n`);
      } else {
        const { sentences, tokens } = translateLines(translator, lines, values.input!, batchSize, options, (text) => process.stdout.write(text));
        const seconds = (performance.now() - start) / 1000;
        process.stderr.write(`[${sentences} sentence(s), ${tokens} tokens translated on ${backend.description} with ${beamCount} beam(s), ${batchSize} a batch, in ${seconds.toFixed(2)} s: ${(sentences / Math.max(seconds, 1e-9)).toFixed(1)} sentences/s]\n`);
      }
    } finally {
      translator.model.dispose();
    }
    return 0;
  }
  const prompt = values.prompt!;  // given: --input was refused above for decoder-only models
  if (beams !== undefined && beams > 1) throw new ArgumentError(`--beams ${beams}: beam search is implemented for encoder-decoder (Marian) models; '${dir}' is decoder-only (use sampling or greedy)`);
  if (lengthPenalty !== undefined) throw new ArgumentError('--length-penalty applies to beam search (Marian models) only');
  const loadStart = performance.now();
  const { model, unused } = loadDecoderDirectory(dir, backend, {
    ...(dtype ? { dtype } : {}), ...(group ? { tensorParallel: group.comm } : {}), ...(quantize ? { quantize } : {}), quantizeLmHead: values['quantize-lm-head']!,
  });
  const tokenizer = loadTokenizer(dir);
  const log = (line: string) => { if (rank0) process.stderr.write(`${line}\n`); };
  const where = group ? `${tp} GPUs, tensor parallel (NCCL)` : backend.description;
  log(`fuseformer generate: ${dir} (${model.arch.family}, ${model.arch.layers} layers, ${precisionOf(model)}) on ${where}, loaded in ${((performance.now() - loadStart) / 1000).toFixed(1)} s`);
  if (tokenizer.vocabSize > model.vocabSize) log(tokenizerVocabularyNote(tokenizer.vocabSize, model.vocabSize));
  if (unused.length > 0) log(`note: ${unused.length} tensor(s) in the checkpoint are not used: ${unused.slice(0, 3).join(', ')}${unused.length > 3 ? ', …' : ''}`);
  const draft = draftDir === undefined ? undefined : loadDraftDirectory(draftDir, backend, dtype ? { dtype } : {});
  if (draft) log(`draft: ${draftDir} (${draft.arch.family}, ${draft.arch.layers} layers)`);
  const stats = emptySpeculativeStats();

  // --chat: the chat template makes the prompt, encoded without adding special tokens again (the template has them).
  const override = values['chat-template'] === undefined ? undefined : chatTemplateOption(values['chat-template']);
  const promptIds = values.chat ? tokenizer.encode(chatPrompt(tokenizer, prompt, values.system, values['no-thinking']!, override), { addSpecialTokens: false }) : tokenizer.encode(prompt);
  const promptTokens = promptIds.length, room = model.arch.maxPositions - promptTokens;
  if (maxNewTokens !== undefined && maxNewTokens > room && room > 0) {
    log(`note: --max-tokens ${maxNewTokens} does not fit: the model takes ${model.arch.maxPositions} positions and the prompt fills ${promptTokens}, so generation stops after ${room} tokens`);
  }
  const start = performance.now();
  let first = 0, pieces = 0;
  const stopTokenIds = defaultStopTokenIds(model);
  const stream = grammar ? constrainedText(model, tokenizer, promptIds, {
    grammar, sampling: resolveSampling({ ...flags.sampling, seed }, model.generation), stopTokenIds,
    maxNewTokens: newTokenBudget(model.generation, promptTokens, maxNewTokens), engineOptions: { graphs: !values['no-graphs'] && backend.name === 'cuda' },
  }) : generateText(model, tokenizer, promptIds, {
    seed, ...(maxNewTokens !== undefined ? { maxNewTokens } : {}), ...flags.sampling,
    stopStrings: values.stop ?? [], engineOptions: { graphs: !values['no-graphs'] && backend.name === 'cuda' },
    ...(draft ? { speculative: { draft, stats, adaptive: !values['fixed-draft-tokens'], ...(draftTokens !== undefined ? { draftTokens } : {}) } } : {}),
  });
  // The first piece is awaited before the prompt is echoed: a prompt the model cannot take is refused
  // before anything is printed.
  const pieceStream = stream[Symbol.asyncIterator]();
  let next = await pieceStream.next();
  if (!values.chat) write(prompt);
  for (; !next.done; next = await pieceStream.next()) {
    if (pieces++ === 0) first = performance.now();
    write(next.value);
  }
  const end = performance.now();
  write('\n');
  log(`[${pieces} text pieces; first after ${(first ? first - start : 0).toFixed(0)} ms, ${((end - start) / 1000).toFixed(2)} s in all; seed ${seed}]`);
  if (draft) {
    const alpha = stats.drafted > 0 ? stats.accepted / stats.drafted : 0;
    log(`[speculative: ${stats.rounds} target passes, ${stats.accepted}/${stats.drafted} draft tokens accepted (α = ${alpha.toFixed(3)}), ${(stats.emitted / Math.max(1, stats.targetPasses)).toFixed(2)} tokens per target pass]`);
    draft.free();
  }
  model.free();
  group?.comm.destroy();
  return 0;
}
