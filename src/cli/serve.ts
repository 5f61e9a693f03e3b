// `fuseformer serve`: an OpenAI-compatible HTTP server (src/serve/) for a Hugging Face GPT-2 or Llama
// model directory, with continuous batching, a paged KV cache and prefix caching. Ctrl-C (SIGINT) or
// SIGTERM shuts it down gracefully.
//
// `--tp N` under `fuseformer launch --gpus N`: every rank loads its shards and builds an engine on them;
// rank 0 serves HTTP through a ReplicatedLeader, the other ranks replay its steps (ReplicatedFollower,
// serve/replicated-engine.ts). Rank 0 alone reacts to SIGINT/SIGTERM: it shuts the server down, then its
// stop message ends the followers, which ignore the signals the launcher forwards to them.

import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import type { FloatDType } from '../dtype.js';
import type { Communicator } from '../dist/communicator.js';
import { ArgumentError, OutOfMemoryError } from '../errors.js';
import type { DecoderModel } from '../infer/model.js';
import { hasTokenizer, loadTokenizer } from '../io/tokenizer.js';
import { ServingEngine } from '../serve/engine.js';
import type { ServingEngineOptions } from '../serve/engine.js';
import { ReplicatedFollower, ReplicatedLeader, replicatedServingEngine } from '../serve/replicated-engine.js';
import { InferenceServer } from '../serve/server.js';
import { warmUp } from '../serve/warmup.js';
import { isCrossEncoderDirectory, isEmbeddingDirectory, loadDecoderDirectory, loadDraftDirectory, precisionOf, quantizeOption, tokenizerVocabularyNote } from './model-directory.js';
import { reasoningParserFrom } from '../serve/reasoning.js';
import type { AccessOptions } from '../serve/http-json.js';
import { toolCallParserFrom } from '../serve/tool-calls.js';
import { chatTemplateOption } from '../serve/chat-template.js';
import { DECODER_ONLY_OPTIONS, EMBEDDING_ONLY_OPTIONS, serveEmbeddings, serveRerank, untilStopSignal } from './serve-embeddings.js';
import { tensorParallelGroup } from './tensor-parallel-group.js';
import { resolveModelDirectory } from '../io/hf-cache.js';

export const SERVE_USAGE = `usage: fuseformer serve --model DIR [options]

  --model DIR              a Hugging Face GPT-2 or Llama directory (config.json, safetensors or pytorch_model.bin,
                           tokenizer.json), or a repository id (org/name[@rev]) in the local Hugging Face cache;
                           a BERT-family or sentence-transformers directory (Qwen3-Embedding too) is served as
                           /v1/embeddings, a cross-encoder as /v1/rerank (below)
  --host HOST              address to listen on (default 127.0.0.1)
  --port N                 port (default 8000; 0 = any free port, printed)
  --served-name NAME       the model name clients use (default: the directory's name, or the repository id as
                           given, org/name, for a model from the Hugging Face cache)
  --api-key KEY            every route but /health and /metrics asks for "Authorization: Bearer KEY" (401 without
                           it; env FUSEFORMER_API_KEY); without it, anyone who reaches the port may call the server
  --allowed-origins LIST   browser origins given CORS headers (comma-separated, e.g. http://localhost:3000; '*' for
                           any), preflight requests answered; default none
  --max-len N              context window: prompt + completion positions (default: the model's)
  --max-running N          requests decoded together at most (default 16)
  --max-batch-tokens N     positions per engine step: prompt chunks + decode tokens (default 256)
  --block-size N           positions per KV cache block (default 16)
  --kv-blocks N            blocks in the KV pool (default: max-running full-length requests, at most 90% of free memory)
  --kv-memory-fraction F   instead: size the KV pool to this fraction (0, 1] of the memory free after loading
  --no-prefix-caching      do not share KV blocks between requests with a common prompt prefix
  --decode-steps N         run decode-only steps N at a time on the device (1–16, default 1): less host
                           work per token, tokens arrive N at a time (no effect with --draft or --tp)
  --no-pipeline            run each step to its end before the next (by default on CUDA, steps are pipelined:
                           the next one is launched before this one's tokens are read, so the host's work
                           overlaps the GPU's; not with --draft, --tp or --decode-steps > 1; --pipeline asks
                           for it explicitly; env FUSEFORMER_SERVE_PIPELINE=1 / 0)
  --max-queue N            requests queued or running at most; more get 429 (default 256)
  --reasoning-parser P     chat answers split into message.reasoning_content (the <think> block) and content, as
                           vLLM's option: qwen3 (the model opens the block; without one, all content) or deepseek-r1
                           (the template opens it); streamed as delta.reasoning_content / delta.content
  --chat-template T        a chat template (a file, or the template itself in one line) in place of the model's own:
                           for a model without one, or another (a tool-calling template, say); one that does not
                           parse stops the start
  --tool-call-parser P     the syntax of the model's tool calls, for chat requests with 'tools': hermes (<tool_call>
                           blocks: Qwen2.5, Qwen3, Hermes) or llama3_json (Llama 3.1+); default: the one the chat
                           template teaches (it names <tool_call> or <|python_tag|>); calls come back as
                           message.tool_calls with finish_reason "tool_calls"
  --max-body-bytes N       request body limit (default 1048576)
  --dtype bf16|f16|f32     weights and activations (default bf16 on CUDA, f32 on the CPU)
  --backend auto|cpu|cuda  (default auto; env FUSEFORMER_BACKEND)
  --tp N                   tensor parallel over N GPUs (GPT-2, Llama: heads, MLP and KV cache split, Megatron); run
                           as \`fuseformer launch --gpus N --grace-ms 35000 -- fuseformer serve --tp N ...\`; rank 0
                           serves HTTP, the other ranks follow its engine steps
  --draft DIR              speculative decoding: this smaller model (same tokenizer) proposes tokens that the
                           model verifies K + 1 at a time (greedy output unchanged; sampled output distributed
                           as the model's); its KV cache shares the model's blocks
  --draft-tokens K         draft tokens a request starts with (default 4)
  --max-draft-tokens K     the most K adapts to (default 8; below --max-batch-tokens)
  --fixed-draft-tokens     keep K fixed instead of adapting it to each request's acceptance
  --no-warmup              on CUDA, skip the start-up warm-up (one prompt of each power-of-two length and decode
                           steps of each batch bucket — 1, 2, 4 … 32, then multiples of 32 up to --max-running:
                           kernel compiles, GEMM tuning, decode graphs — a few
                           seconds, which the first requests would otherwise pay)
  --no-graphs              on CUDA, run steps eagerly instead of replaying them as CUDA graphs (one per step
                           shape: decode bucket, prompt rows, segments; the default without --draft)
  --quantize rtn4|rtn8     quantize a 16-bit model on loading (round-to-nearest): INT4 W4A16 in groups of 128, or
                           INT8 W8A8; a quantized directory (\`fuseformer quantize\`, GPTQ, AWQ) loads as it is
  --quantize-lm-head       with --quantize, or on a quantized directory: the LM head too (round-to-nearest)

An embedding model (BERT, RoBERTa, XLM-RoBERTa, MPNet, DistilBERT, or a sentence-transformers directory —
decoder embedding models such as Qwen3-Embedding included) serves POST /v1/embeddings (input: a string, strings,
token ids or arrays of them; encoding_format float | base64; dimensions; prompt_name: one of the model's prompts),
/v1/models, /health and /metrics; concurrent requests are embedded together in length-sorted batches. --host,
--port, --served-name, --dtype, --backend, --max-body-bytes apply, and:
  --max-queue N            inputs waiting at most (default 16384; more get 429)
  --no-warmup              on CUDA, skip the start-up warm-up (a batch at each power-of-two length up to 512
                           tokens: kernel compiles and GEMM tuning, which the first requests would otherwise pay)
  --batch-size N           sequences per encoder pass (default 32)
  --max-pass-tokens N      a decoder's tokens per pass at most (default 16384; also its longest input)
  --max-shared-prefix N    a decoder under last pooling: the longest prefix a pass's texts share, computed once
                           (default 2048; 0 never)
  --pooling mean|cls|last  default: the sentence-transformers Pooling module's mode, else mean (BERT) or last (decoder)
  --normalize / --no-normalize  unit-length vectors (default: whether a Normalize module follows)

A reranker serves POST /v1/rerank (also /rerank; {query, documents, top_n?, return_documents?, prompt_name?} →
results best first, each relevance_score the sigmoid of the model's logit), /v1/models, /health and /metrics: a
cross-encoder (BERT / RoBERTa / XLM-RoBERTa ...ForSequenceClassification with one label: ms-marco-MiniLM,
bge-reranker), a decoder ...ForSequenceClassification (Qwen3 / Qwen2 / Llama / Mistral), or a sentence-transformers
CrossEncoder over a causal LM (Qwen3-Reranker: logit("yes") - logit("no"), the pair rendered by its chat template).
--host, --port, --served-name, --dtype, --backend, --max-body-bytes and --batch-size apply, and:
  --max-queue N            documents waiting at most (default 16384; more get 429)
  --no-warmup              on CUDA, skip the start-up warm-up (as for embedding models)
  --rerank                 serve a plain causal LM directory (a ...ForCausalLM) as a reranker: logit("yes") - logit("no")
                           at the last token, with a chat template that renders the query / document roles
  --chat-template T        decoder rerankers: a template in place of the model's own (the pair is the messages
                           {role: "query"} and {role: "document"}, a prompt the system message)
  --max-pass-tokens N      decoder rerankers: tokens per pass at most (default 16384)
  --max-shared-prefix N    decoder rerankers: the longest prefix a pass's pairs share (template, instruction, query),
                           computed once (default 2048; 0 never)
`;

function integer(name: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  const x = Number(value);
  if (value.trim() === '' || !Number.isSafeInteger(x) || x < min) throw new ArgumentError(`--${name} must be an integer >= ${min}, got '${value}'`);
  return x;
}

function fraction(name: string, value: string): number {
  const x = Number(value);
  if (value.trim() === '' || !(x > 0 && x <= 1)) throw new ArgumentError(`--${name} must be a number in (0, 1], got '${value}'`);
  return x;
}

/**
 * The name clients use by default: a directory's name, or for a repository id from the Hugging Face cache the id
 * as given without its @revision (as vLLM names it; the snapshot directory's name is a commit hash).
 */
export function defaultServedName(model: string, dir: string): string {
  return existsSync(model) ? basename(resolve(dir)) : model.split('@')[0]!;
}

/** --api-key (or FUSEFORMER_API_KEY) and --allowed-origins, checked. */
export function accessOptions(apiKey: string | undefined, origins: string | undefined): AccessOptions {
  if (apiKey !== undefined && apiKey.trim() === '') throw new ArgumentError('--api-key is empty (or FUSEFORMER_API_KEY is set to nothing); give a key, or leave both out');
  const list = origins?.split(',').map((o) => o.trim()).filter((o) => o !== '');
  if (origins !== undefined && list!.length === 0) throw new ArgumentError('--allowed-origins is empty; give origins (http://localhost:3000,https://app.example) or *');
  const bad = list?.find((o) => o !== '*' && !/^https?:\/\/[^/\s]+$/.test(o));
  if (bad !== undefined) throw new ArgumentError(`--allowed-origins: '${bad}' is not an origin (scheme://host[:port], no path), nor *`);
  return { ...(apiKey !== undefined ? { apiKey } : {}), ...(list !== undefined ? { allowedOrigins: list } : {}) };
}

export async function runServe(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: {
      model: { type: 'string' }, host: { type: 'string' }, port: { type: 'string' }, 'api-key': { type: 'string' }, 'allowed-origins': { type: 'string' }, 'served-name': { type: 'string' }, 'max-len': { type: 'string' },
      'max-running': { type: 'string' }, 'max-batch-tokens': { type: 'string' }, 'block-size': { type: 'string' }, 'kv-blocks': { type: 'string' },
      'kv-memory-fraction': { type: 'string' }, 'no-prefix-caching': { type: 'boolean', default: false }, 'max-queue': { type: 'string' }, 'max-body-bytes': { type: 'string' },
      'reasoning-parser': { type: 'string' }, 'tool-call-parser': { type: 'string' }, 'chat-template': { type: 'string' }, dtype: { type: 'string' }, backend: { type: 'string' }, tp: { type: 'string' },
      draft: { type: 'string' }, 'draft-tokens': { type: 'string' }, 'max-draft-tokens': { type: 'string' }, 'fixed-draft-tokens': { type: 'boolean', default: false },
      'no-graphs': { type: 'boolean' }, 'decode-steps': { type: 'string' }, pipeline: { type: 'boolean' }, 'no-pipeline': { type: 'boolean' }, 'no-warmup': { type: 'boolean', default: false }, quantize: { type: 'string' }, 'quantize-lm-head': { type: 'boolean', default: false },
      'batch-size': { type: 'string' }, 'max-pass-tokens': { type: 'string' }, 'max-shared-prefix': { type: 'string' }, pooling: { type: 'string' }, normalize: { type: 'boolean' }, 'no-normalize': { type: 'boolean' },
      rerank: { type: 'boolean', default: false },
    },
  });
  if (values.model === undefined) throw new ArgumentError('--model DIR is required (a Hugging Face GPT-2, Llama, BERT-family or cross-encoder directory)');
  const dir = resolveModelDirectory(values.model);
  const given = (names: readonly string[]) => names.filter((n) => values[n as keyof typeof values] !== undefined && values[n as keyof typeof values] !== false);
  const dtype = values.dtype as FloatDType | undefined;
  if (dtype !== undefined && !['bf16', 'f16', 'f32'].includes(dtype)) throw new ArgumentError(`--dtype must be bf16, f16 or f32, got '${dtype}'`);
  // An empty host would listen on every interface: an unset variable (--host "$HOST") must not expose the server.
  if (values.host !== undefined && values.host.trim() === '') throw new ArgumentError('--host is empty; give an address (127.0.0.1, 0.0.0.0 for every interface)');
  const port = integer('port', values.port, 0) ?? 8000;
  if (port > 65535) throw new ArgumentError(`--port must be at most 65535, got ${port}`);
  const opt = (name: string, min = 1) => integer(name, values[name as keyof typeof values] as string | undefined, min);
  const access = accessOptions(values['api-key'] ?? process.env['FUSEFORMER_API_KEY'], values['allowed-origins']);
  const servedName = values['served-name'] ?? defaultServedName(values.model, dir);
  if (values.rerank || isCrossEncoderDirectory(dir)) {
    const misplaced = given([...DECODER_ONLY_OPTIONS.filter((o) => o !== 'chat-template'), 'pooling', 'normalize', 'no-normalize']);
    if (misplaced.length > 0) throw new ArgumentError(`--${misplaced[0]}: '${dir}' is ${values.rerank ? 'served as a reranker (--rerank)' : 'a cross-encoder, served as /v1/rerank'}; the option is for other models`);
    return serveRerank(dir, {
      port, access, ...(values.host !== undefined ? { host: values.host } : {}), servedName,
      ...(dtype ? { dtype } : {}), ...(values.backend !== undefined ? { backend: values.backend } : {}),
      ...(opt('max-body-bytes') !== undefined ? { maxBodyBytes: opt('max-body-bytes')! } : {}), ...(opt('batch-size') !== undefined ? { batchSize: opt('batch-size')! } : {}),
      ...(opt('max-queue') !== undefined ? { maxQueue: opt('max-queue')! } : {}), ...(values['no-warmup'] ? { noWarmup: true } : {}),
      ...(opt('max-pass-tokens') !== undefined ? { maxPassTokens: opt('max-pass-tokens')! } : {}),
      ...(opt('max-shared-prefix', 0) !== undefined ? { maxSharedPrefix: opt('max-shared-prefix', 0)! } : {}),
      ...(values['chat-template'] !== undefined ? { chatTemplate: chatTemplateOption(values['chat-template']) } : {}),
    });
  }
  if (isEmbeddingDirectory(dir)) {
    const misplaced = given(DECODER_ONLY_OPTIONS);
    if (misplaced.length > 0) throw new ArgumentError(`--${misplaced[0]}: '${dir}' is an embedding model, served as /v1/embeddings; the option is for generative models`);
    if (values.normalize && values['no-normalize']) throw new ArgumentError('--normalize and --no-normalize: give one');
    return serveEmbeddings(dir, {
      port, access, ...(values.host !== undefined ? { host: values.host } : {}), servedName,
      ...(dtype ? { dtype } : {}), ...(values.backend !== undefined ? { backend: values.backend } : {}),
      ...(opt('max-queue') !== undefined ? { maxQueue: opt('max-queue')! } : {}), ...(opt('max-body-bytes') !== undefined ? { maxBodyBytes: opt('max-body-bytes')! } : {}),
      ...(opt('batch-size') !== undefined ? { batchSize: opt('batch-size')! } : {}), ...(values.pooling !== undefined ? { pooling: values.pooling } : {}),
      ...(values['no-warmup'] ? { noWarmup: true } : {}),
      ...(opt('max-pass-tokens') !== undefined ? { maxPassTokens: opt('max-pass-tokens')! } : {}),
      ...(opt('max-shared-prefix', 0) !== undefined ? { maxSharedPrefix: opt('max-shared-prefix', 0)! } : {}),
      ...(values.normalize ? { normalize: true } : values['no-normalize'] ? { normalize: false } : {}),
    });
  }
  const embeddingOnly = given(EMBEDDING_ONLY_OPTIONS);
  if (embeddingOnly.length > 0) throw new ArgumentError(`--${embeddingOnly[0]}: for embedding models (BERT-family, sentence-transformers); '${dir}' is not one`);
  if (!existsSync(join(dir, 'config.json'))) throw new ArgumentError(`--model: '${dir}' has no config.json`);
  if (!hasTokenizer(dir)) throw new ArgumentError(`--model: '${dir}' has no tokenizer.json (nor a Llama tokenizer.model) (needed to encode prompts and decode the output)`);
  const engineOptions = {
    ...(opt('max-len', 2) !== undefined ? { maxLen: opt('max-len', 2)! } : {}), ...(opt('max-running') !== undefined ? { maxRunning: opt('max-running')! } : {}),
    ...(opt('max-batch-tokens') !== undefined ? { maxBatchTokens: opt('max-batch-tokens')! } : {}), ...(opt('block-size') !== undefined ? { blockSize: opt('block-size')! } : {}),
    ...(opt('kv-blocks') !== undefined ? { numBlocks: opt('kv-blocks')! } : {}), prefixCaching: !values['no-prefix-caching'],
    ...(values['kv-memory-fraction'] !== undefined ? { kvMemoryFraction: fraction('kv-memory-fraction', values['kv-memory-fraction']) } : {}),
    ...(values['no-graphs'] ? { graphs: false } : {}),
    ...(opt('decode-steps') !== undefined ? { decodeSteps: opt('decode-steps')! } : {}),
    ...(values['no-pipeline'] ? { pipeline: false } : values.pipeline ? { pipeline: true } : {}),
  };

  const reasoningParser = values['reasoning-parser'] === undefined ? undefined : reasoningParserFrom(values['reasoning-parser']);
  const toolCallParser = values['tool-call-parser'] === undefined ? undefined : toolCallParserFrom(values['tool-call-parser']);
  const chatTemplate = values['chat-template'] === undefined ? undefined : chatTemplateOption(values['chat-template']);
  const tp = integer('tp', values.tp, 1) ?? 1;
  const quantize = quantizeOption(dir, values.quantize, values['quantize-lm-head']!, tp);
  const draftDir = values.draft === undefined ? undefined : resolveModelDirectory(values.draft, '--draft');
  const draftTokens = opt('draft-tokens'), maxDraftTokens = opt('max-draft-tokens');
  if (draftDir === undefined && (draftTokens !== undefined || maxDraftTokens !== undefined || values['fixed-draft-tokens'])) {
    throw new ArgumentError('--draft-tokens / --max-draft-tokens / --fixed-draft-tokens need --draft DIR');
  }
  if (draftDir !== undefined) {
    if (!existsSync(join(draftDir, 'config.json'))) throw new ArgumentError(`--draft: '${draftDir}' has no config.json`);
    if (tp > 1) throw new ArgumentError(`--tp ${tp} with --draft: speculative serving runs on one GPU; drop one of them`);
  }

  // Before any collective, on every rank: a bad tokenizer.json then fails every rank alike.
  const tokenizer = loadTokenizer(dir);
  const group = tp > 1 ? await tensorParallelGroup('serve', tp, values.backend as BackendChoice | undefined) : undefined;
  const { backend } = group ?? await selectBackend(values.backend as BackendChoice | undefined);
  const { model } = loadDecoderDirectory(dir, backend, {
    ...(dtype ? { dtype } : {}), ...(group ? { tensorParallel: group.comm } : {}), ...(quantize ? { quantize } : {}), quantizeLmHead: values['quantize-lm-head']!,
  });
  if (group && group.comm.rank !== 0) return follow(model, group.comm, engineOptions);
  if (tokenizer.vocabSize > model.vocabSize) process.stderr.write(`fuseformer serve: ${tokenizerVocabularyNote(tokenizer.vocabSize, model.vocabSize)}\n`);
  let draft: DecoderModel | undefined;
  let engine: ServingEngine;
  try {
    draft = draftDir === undefined ? undefined : loadDraftDirectory(draftDir, backend, dtype ? { dtype } : {});
    const speculative = draft ? {
      speculative: {
        draft, adaptive: !values['fixed-draft-tokens'],
        ...(draftTokens !== undefined ? { draftTokens } : {}), ...(maxDraftTokens !== undefined ? { maxDraftTokens } : {}),
      },
    } : {};
    try {
      engine = group ? replicatedServingEngine(model, group.comm, engineOptions) : new ServingEngine(model, { ...engineOptions, ...speculative });
    } catch (error) {
      // Too large for the device (or the CPU backend's typed arrays): say which options size it.
      if (error instanceof OutOfMemoryError || (error as { errorName?: string }).errorName === 'CUDA_ERROR_OUT_OF_MEMORY') {
        throw new ArgumentError(`the serving engine does not fit: its KV pool is sized by --kv-blocks or --kv-memory-fraction, --block-size and --max-len, its step buffers by --max-running and --max-batch-tokens (${(error as Error).message})`);
      }
      throw error;
    }
  } catch (error) {
    draft?.free();
    model.free();
    throw error;
  }
  const served = group ? new ReplicatedLeader(engine, group.comm) : engine;
  try {
    if (backend.name === 'cuda' && !values['no-warmup']) {
      const w = warmUp(served);
      process.stderr.write(`fuseformer serve: warmed up in ${(w.ms / 1000).toFixed(1)} s (${w.steps} steps: prompts of ${w.promptLengths.join(', ')} tokens; decode batches of ${w.decodeBatches.join(', ')})\n`);
    }
    const server = new InferenceServer(served, tokenizer, {
      modelName: servedName,
      ...(opt('max-queue') !== undefined ? { maxQueue: opt('max-queue')! } : {}), ...(opt('max-body-bytes') !== undefined ? { maxBodyBytes: opt('max-body-bytes')! } : {}),
      ...(reasoningParser ? { reasoningParser } : {}), ...(toolCallParser ? { toolCallParser } : {}), ...(chatTemplate ? { chatTemplate } : {}), access,
    });
    if (server.chatTemplateProblem !== undefined) process.stderr.write(`fuseformer serve: note: /v1/chat/completions will refuse requests: ${server.chatTemplateProblem}\n`);
    const address = await server.listen(port, values.host ?? '127.0.0.1');
    const where = group ? `${tp} GPUs, tensor parallel (NCCL)` : backend.description;
    process.stderr.write(`fuseformer serve: '${server.modelName}' (${model.arch.family}, ${model.arch.layers} layers, ${precisionOf(model)}) on ${where}; `
      + `context ${engine.maxLen}, ${engine.pool.numBlocks} KV blocks of ${engine.blockSize}${group ? ' per GPU' : ''}`
      + `${draft ? `; speculative with draft '${basename(resolve(draftDir!))}' (${draft.arch.layers} layers, K up to ${engine.maxDraftTokens})` : ''}; listening on http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}${access.apiKey !== undefined ? ' (API key required)' : ''}\n`);
    await untilStopSignal('finishing running requests');
    await server.close();
  } finally {
    served.dispose(); // under --tp: the stop message that ends the followers
    draft?.free();
    model.free();
    group?.comm.destroy();
  }
  return 0;
}

/** A rank other than 0 under --tp: replays rank 0's engine steps until its stop message. */
function follow(model: DecoderModel, comm: Communicator, engineOptions: ServingEngineOptions): number {
  // The launcher forwards SIGINT/SIGTERM to every rank; rank 0 finishes the running requests and then stops
  // the followers, which must keep stepping with it until then.
  const ignore = () => {};
  process.on('SIGINT', ignore);
  process.on('SIGTERM', ignore);
  try {
    const follower = new ReplicatedFollower(replicatedServingEngine(model, comm, engineOptions), comm);
    try {
      follower.follow();
    } finally {
      follower.dispose();
    }
  } finally {
    model.free();
    comm.destroy();
    process.off('SIGINT', ignore);
    process.off('SIGTERM', ignore);
  }
  return 0;
}
