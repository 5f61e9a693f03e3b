// `fuseformer embed`: sentence embeddings from a Hugging Face BERT-family directory (BertModel or
// BertForMaskedLM: config.json, model.safetensors or shards, tokenizer.json), a decoder model's (Qwen3-Embedding,
// gte-Qwen2: last-token pooling; infer/decoder-encoder.ts), or a sentence-transformers one (modules.json: its
// pooling, normalisation, max_seq_length and prompts are the defaults; infer/sentence-transformers.ts). Each
// --text is tokenized with the tokenizer's special tokens ([CLS] … [SEP], a trailing <|endoftext|>), after the
// prompt where one is asked for, the texts run through the encoder in batches (right-padded), and the vectors
// are printed on stdout as one JSON object shaped like OpenAI's embeddings response; a summary goes to stderr.

import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { BertAttentionPath } from '../infer/bert.js';
import { Embedder, EmbedInputError } from '../infer/embedder.js';
import type { Embedded, PromptOptions } from '../infer/embedder.js';
import type { Pooling } from '../infer/pooling.js';
import { POOLINGS } from '../infer/pooling.js';
import { readSentenceTransformersConfig } from '../infer/sentence-transformers.js';
import { AtomicFileWriter } from '../io/atomic-write.js';
import { resolveModelDirectory } from '../io/hf-cache.js';
import { readInputLines } from './input-lines.js';

export const EMBED_USAGE = `usage: fuseformer embed --model DIR --text TEXT [--text TEXT ...] [options]
       fuseformer embed --model DIR --input FILE [--output FILE] [options]

  --model DIR              a Hugging Face BERT-family directory (BERT, RoBERTa, XLM-RoBERTa, MPNet, DistilBERT) or
                           a decoder embedding model's (Qwen3-Embedding, gte-Qwen2: Llama / Qwen2 / Qwen3 / Mistral
                           architectures): config.json, model.safetensors or pytorch_model.bin (or shards) and
                           tokenizer.json; or a repository id (org/name[@rev]) in the local Hugging Face cache
  --text TEXT              a text to embed (repeatable; one vector per text, in order)
  --input FILE             embed every line of FILE ('-': standard input) instead, a chunk of 4096 lines at a time;
                           prints one JSON object a line: {"index": i, "embedding": [...]} (JSON Lines)
  --output FILE            with --input: write the JSON Lines to FILE (whole or not at all: a temporary file
                           renamed at the end) instead of standard output
  --pooling mean|cls|last  mean of the tokens' last hidden states (a BERT's default), the first ([CLS]) token's, or
                           the last token's (a decoder's default)
  --prompt-name NAME       put the model's prompt NAME before each text (config_sentence_transformers.json's
                           prompts: Qwen3-Embedding's 'query' for search queries; documents take none)
  --prompt TEXT            put TEXT before each text instead
  --dimensions N           keep each vector's first N values (renormalised when normalising: Matryoshka models
                           such as Qwen3-Embedding, nomic-embed, mxbai-embed)
  --normalize              scale each vector to unit L2 norm (cosine similarity = dot product)
  --no-normalize           leave the vectors as pooled (where the model directory says to normalise)
  --batch-size N           texts per encoder pass (default 32)
  --max-pass-tokens N      a decoder's tokens per pass at most (default 16384; also its longest input)
  --max-shared-prefix N    a decoder under last pooling: the longest prefix a pass's texts share (a prompt) that is
                           computed once (default 2048; 0 computes it for every text)
  --attention auto|flash|materialized
                           a BERT's attention path (default auto: fused flash for 16-bit, materialised scores for
                           f32); decoders run the fused causal attention
  --dtype bf16|f16|f32     weights and activations (default bf16 on CUDA, f32 on the CPU)
  --backend auto|cpu|cuda  (default auto; env FUSEFORMER_BACKEND)

A sentence-transformers directory (modules.json) sets the defaults as SentenceTransformer.encode has them:
its Pooling module's mode, its Dense layers, unit length where a Normalize module follows, texts truncated to
max_seq_length as its tokenizer truncates (and lower-cased where do_lower_case says), its default prompt.

Prints {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}, ...],
"model": DIR, "usage": {"prompt_tokens": n, "total_tokens": n}} on one line.
`;

/** Where the command writes: the JSON to `out`, notes and the summary to `log` (stdout and stderr by default). */
export interface EmbedOutput {
  out(text: string): void;
  log(text: string): void;
}

const PROCESS_OUTPUT: EmbedOutput = { out: (text) => process.stdout.write(text), log: (text) => process.stderr.write(text) };

export async function runEmbed(argv: string[], output: EmbedOutput = PROCESS_OUTPUT): Promise<number> {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: {
      model: { type: 'string' }, text: { type: 'string', multiple: true }, input: { type: 'string' }, output: { type: 'string' }, pooling: { type: 'string' }, normalize: { type: 'boolean' }, 'no-normalize': { type: 'boolean' },
      'batch-size': { type: 'string' }, attention: { type: 'string' }, dtype: { type: 'string' }, backend: { type: 'string' },
      'prompt-name': { type: 'string' }, prompt: { type: 'string' }, dimensions: { type: 'string' }, 'max-pass-tokens': { type: 'string' }, 'max-shared-prefix': { type: 'string' },
    },
  });
  if (values.model === undefined) throw new ArgumentError('--model DIR is required (a Hugging Face BERT-family or decoder embedding model directory)');
  const dir = resolveModelDirectory(values.model);
  if (values.text !== undefined && values.input !== undefined) throw new ArgumentError('--text and --input: give one (--input embeds a file line by line)');
  if (values.output !== undefined && values.input === undefined) throw new ArgumentError('--output FILE goes with --input FILE');
  if (values.output !== undefined && !existsSync(dirname(resolve(values.output)))) throw new ArgumentError(`--output: the directory of '${values.output}' does not exist`);
  const texts = values.input !== undefined ? readInputLines(values.input) : values.text ?? [];
  if (texts.length === 0) throw new ArgumentError(values.input !== undefined ? `--input: '${values.input}' has no lines` : '--text TEXT is required (repeat it for several texts, or --input FILE)');
  const sentenceTransformers = readSentenceTransformersConfig(dir);
  const modelDir = sentenceTransformers?.modelDir ?? dir;
  if (!existsSync(join(modelDir, 'config.json'))) throw new ArgumentError(`--model: '${modelDir}' has no config.json`);
  if (!existsSync(join(modelDir, 'tokenizer.json'))) throw new ArgumentError(`--model: '${modelDir}' has no tokenizer.json (needed to turn the texts into tokens)`);
  if (values.normalize && values['no-normalize']) throw new ArgumentError('--normalize and --no-normalize: give one');
  const normalize = values.normalize ?? (values['no-normalize'] ? false : sentenceTransformers?.normalize ?? false);
  const pooling = values.pooling as Pooling | undefined;
  if (pooling !== undefined && !POOLINGS.includes(pooling)) throw new ArgumentError(`--pooling must be ${POOLINGS.join(', ')}, got '${pooling}'`);
  if (values.prompt !== undefined && values['prompt-name'] !== undefined) throw new ArgumentError('--prompt and --prompt-name: give one');
  const prompt: PromptOptions = values.prompt !== undefined ? { prompt: values.prompt } : values['prompt-name'] !== undefined ? { promptName: values['prompt-name'] } : {};
  const dimensions = values.dimensions === undefined ? undefined : Number(values.dimensions);
  if (dimensions !== undefined && !(Number.isSafeInteger(dimensions) && dimensions >= 1)) throw new ArgumentError(`--dimensions must be a positive integer, got '${values.dimensions}'`);
  const attention = values.attention as BertAttentionPath | undefined;
  if (attention !== undefined && !['auto', 'flash', 'materialized'].includes(attention)) throw new ArgumentError(`--attention must be auto, flash or materialized, got '${values.attention}'`);
  const dtype = values.dtype as FloatDType | undefined;
  if (dtype !== undefined && !['bf16', 'f16', 'f32'].includes(dtype)) throw new ArgumentError(`--dtype must be bf16, f16 or f32, got '${dtype}'`);
  const batchSize = values['batch-size'] === undefined ? 32 : Number(values['batch-size']);
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new ArgumentError(`--batch-size must be a positive integer, got '${values['batch-size']}'`);
  const maxPassTokens = values['max-pass-tokens'] === undefined ? undefined : Number(values['max-pass-tokens']);
  if (maxPassTokens !== undefined && !(Number.isSafeInteger(maxPassTokens) && maxPassTokens >= 1)) throw new ArgumentError(`--max-pass-tokens must be a positive integer, got '${values['max-pass-tokens']}'`);

  const { backend } = await selectBackend(values.backend as BackendChoice | undefined);
  const start = performance.now();
  const maxSharedPrefix = values['max-shared-prefix'] === undefined ? undefined : Number(values['max-shared-prefix']);
  if (maxSharedPrefix !== undefined && !(Number.isSafeInteger(maxSharedPrefix) && maxSharedPrefix >= 0)) throw new ArgumentError(`--max-shared-prefix must be a non-negative integer, got '${values['max-shared-prefix']}'`);
  const embedder = Embedder.load(dir, backend, { normalize, batchSize, ...(maxPassTokens !== undefined ? { maxPassTokens } : {}), ...(maxSharedPrefix !== undefined ? { maxSharedPrefix } : {}), ...(pooling ? { pooling } : {}), ...(attention ? { attention } : {}), ...(dtype ? { dtype } : {}) });
  try {
    const promptText = embedder.promptText(prompt);
    const embedOptions = { ...prompt, ...(dimensions !== undefined ? { dimensions: checkedDimensions(embedder, dimensions) } : {}) };
    if (values.input !== undefined) {
      const { tokens, truncated } = embedLines(embedder, texts, values.input, values.output, output, embedOptions);
      if (truncated > 0) output.log(`note: ${truncated} line(s) truncated to ${embedder.truncateAt} tokens (sentence-transformers' max_seq_length)\n`);
      output.log(`[${texts.length} line(s), ${tokens} tokens, ${dimensions ?? embedder.dimensions} dimensions${values.output !== undefined ? ` → ${values.output}` : ''}; ${embedder.encoder.dtype} on ${backend.description} in ${((performance.now() - start) / 1000).toFixed(2)} s]\n`);
      return 0;
    }
    let embedded: Embedded;
    try {
      embedded = embedder.embed(texts, embedOptions);
    } catch (error) {
      // Inputs are numbered from 1 on the command line.
      if (error instanceof EmbedInputError) throw new ArgumentError(error.message.replace(/^input (\d+)/, (_, i: string) => `--text ${Number(i) + 1}`));
      throw error;
    }
    const { vectors, tokens, truncated } = embedded;
    if (truncated > 0) output.log(`note: ${truncated} text(s) truncated to ${embedder.truncateAt} tokens (sentence_bert_config.json max_seq_length, as sentence-transformers does)\n`);
    output.out(`${JSON.stringify({
      object: 'list',
      data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: Array.from(v) })),
      model: dir,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    })}\n`);
    const { unused, encoder } = embedder;
    if (unused.length > 0) output.log(`note: ${unused.length} tensor(s) in the checkpoint are not used: ${unused.slice(0, 3).join(', ')}${unused.length > 3 ? ', …' : ''}\n`);
    output.log(`[${texts.length} text(s), ${tokens} tokens, ${dimensions ?? embedder.dimensions} dimensions, ${embedder.pooling} pooling${normalize ? ', normalised' : ''}${promptText ? `, prompt ${JSON.stringify(promptText)}` : ''}${sentenceTransformers ? ' (sentence-transformers modules.json)' : ''}; ${encoder.kind} ${encoder.dtype} on ${backend.description} in ${((performance.now() - start) / 1000).toFixed(2)} s]\n`);
    return 0;
  } finally {
    embedder.free();
  }
}

/** Lines embedded a chunk at a time (bounded memory) as JSON Lines, to `outputFile` atomically or to `output.out`. */
function embedLines(embedder: Embedder, lines: readonly string[], inputName: string, outputFile: string | undefined, output: EmbedOutput, options: PromptOptions & { dimensions?: number }): { tokens: number; truncated: number } {
  let file: AtomicFileWriter | undefined;
  try {
    file = outputFile === undefined ? undefined : new AtomicFileWriter(outputFile);
  } catch (error) {
    throw new ArgumentError(`--output: cannot write '${outputFile}': ${(error as Error).message}`);
  }
  const write = (text: string) => (file ? file.write(text) : output.out(text));
  let tokens = 0, truncated = 0;
  try {
    for (let first = 0; first < lines.length; first += LINES_A_CHUNK) {
      let embedded: Embedded;
      try {
        embedded = embedder.embed(lines.slice(first, first + LINES_A_CHUNK), options);
      } catch (error) {
        // Lines are numbered from 1, across chunks.
        if (error instanceof EmbedInputError) throw new ArgumentError(error.message.replace(/^input (\d+)/, (_, i: string) => `--input ${inputName} line ${first + Number(i) + 1}`));
        throw error;
      }
      write(embedded.vectors.map((v, k) => `${JSON.stringify({ index: first + k, embedding: Array.from(v) })}\n`).join(''));
      tokens += embedded.tokens;
      truncated += embedded.truncated;
    }
    file?.commit();
  } catch (error) {
    file?.abort();
    throw error;
  }
  return { tokens, truncated };
}

/** --dimensions checked against the model's width, named as the option. */
function checkedDimensions(embedder: Embedder, dimensions: number): number {
  try {
    return embedder.checkedDimensions(dimensions);
  } catch (error) {
    throw new ArgumentError(`--${(error as Error).message}`);
  }
}

/** Lines a chunk of --input: vectors of one chunk are held at a time. */
const LINES_A_CHUNK = 4096;
