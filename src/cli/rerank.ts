// `fuseformer rerank`: a reranker directory — a cross-encoder (BertForSequenceClassification,
// XLMRobertaForSequenceClassification with one label: cross-encoder/ms-marco-MiniLM, BAAI/bge-reranker), a decoder
// …ForSequenceClassification, or a causal LM scored by its "yes" / "no" logits (Qwen3-Reranker) — scores each
// --document against the --query (infer/reranker.ts); prints the documents ranked, as one JSON object shaped like
// the Jina / Cohere rerank response; a summary goes to stderr.

import { parseArgs } from 'node:util';
import { selectBackend, type BackendChoice } from '../backend/index.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { BertAttentionPath } from '../infer/bert.js';
import { Reranker } from '../infer/reranker.js';
import { resolveModelDirectory } from '../io/hf-cache.js';
import { chatTemplateOption } from '../serve/chat-template.js';
import type { EmbedOutput } from './embed.js';
import { describeReranker } from './serve-embeddings.js';

export const RERANK_USAGE = `usage: fuseformer rerank --model DIR --query TEXT --document TEXT [--document TEXT ...] [options]

  --model DIR              a reranker directory (tokenizer.json beside it), or a repository id (org/name[@rev]) in
                           the local Hugging Face cache: a cross-encoder (BertForSequenceClassification or
                           XLMRobertaForSequenceClassification with one label), a decoder …ForSequenceClassification
                           (Qwen3 / Qwen2 / Llama / Mistral; one label), or a causal LM (…ForCausalLM, or a
                           sentence-transformers CrossEncoder with a LogitScore module: Qwen3-Reranker) scored by
                           logit("yes") − logit("no") at the pair's last token
  --query TEXT             the query
  --document TEXT          a document to score against it (repeatable)
  --top-n N                print the N best only (default: all, best first)
  --return-documents       include each document's text in the results
  --prompt-name NAME       the instruction by name (config_sentence_transformers.json's prompts; default: its
                           default_prompt_name); a decoder's chat template gets it as the system message, else it
                           goes before the query
  --prompt TEXT            the instruction itself
  --chat-template T        decoders: a chat template (a file, or the template in one line) in place of the model's
                           own; the pair is the messages {role: "query"} and {role: "document"}, as
                           sentence-transformers passes them (a causal LM without such a template needs one:
                           templates/qwen3-reranker.jinja for Qwen/Qwen3-Reranker-*)
  --max-length N           the most tokens of a (query, document) pair (default: the model's max_seq_length, else
                           its tokenizer's limit, within its positions); longer pairs are cut as sentence-transformers
                           cuts them: from the longer side first (a tokenizer pair), or at the end with the chat
                           template's tail kept
  --batch-size N           pairs per encoder pass (default 32)
  --max-pass-tokens N      decoders: tokens per pass at most (default 16384)
  --max-shared-prefix N    decoders: the longest prefix a pass's pairs share (template, instruction, query) that is
                           computed once (default 2048; 0 computes it for every pair)
  --attention auto|flash|materialized   BERT cross-encoders only
  --dtype bf16|f16|f32     weights and activations (default bf16 on CUDA, f32 on the CPU)
  --backend auto|cpu|cuda  (default auto; env FUSEFORMER_BACKEND)

Each score is the sigmoid of the model's logit for the pair (the logit itself where the model's activation_fn is
Identity), as sentence-transformers' CrossEncoder.predict gives it.
Prints {"model": DIR, "results": [{"index": i, "relevance_score": s[, "document": {"text": …}]}, …],
"usage": {"total_tokens": n}} on one line, best first.
`;

const PROCESS_OUTPUT: EmbedOutput = { out: (text) => process.stdout.write(text), log: (text) => process.stderr.write(text) };

export async function runRerank(argv: string[], output: EmbedOutput = PROCESS_OUTPUT): Promise<number> {
  const { values } = parseArgs({
    args: argv, strict: true, allowPositionals: false,
    options: {
      model: { type: 'string' }, query: { type: 'string' }, document: { type: 'string', multiple: true }, 'top-n': { type: 'string' },
      'return-documents': { type: 'boolean', default: false }, 'max-length': { type: 'string' }, 'batch-size': { type: 'string' },
      attention: { type: 'string' }, dtype: { type: 'string' }, backend: { type: 'string' }, 'prompt-name': { type: 'string' }, prompt: { type: 'string' },
      'chat-template': { type: 'string' }, 'max-pass-tokens': { type: 'string' }, 'max-shared-prefix': { type: 'string' },
    },
  });
  if (values.model === undefined) throw new ArgumentError('--model DIR is required (a reranker directory)');
  if (values.query === undefined) throw new ArgumentError('--query TEXT is required');
  const documents = values.document ?? [];
  if (documents.length === 0) throw new ArgumentError('--document TEXT is required (repeat it for several documents)');
  const positive = (name: string, value: string | undefined, least = 1): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n < least) throw new ArgumentError(`--${name} must be an integer of at least ${least}, got '${value}'`);
    return n;
  };
  const topN = positive('top-n', values['top-n']), maxTokens = positive('max-length', values['max-length'], 4), batchSize = positive('batch-size', values['batch-size']);
  const maxPassTokens = positive('max-pass-tokens', values['max-pass-tokens']), maxSharedPrefix = positive('max-shared-prefix', values['max-shared-prefix'], 0);
  const attention = values.attention as BertAttentionPath | undefined;
  if (attention !== undefined && !['auto', 'flash', 'materialized'].includes(attention)) throw new ArgumentError(`--attention must be auto, flash or materialized, got '${values.attention}'`);
  if (values.prompt !== undefined && values['prompt-name'] !== undefined) throw new ArgumentError('--prompt and --prompt-name: give one');
  const chatTemplate = values['chat-template'] === undefined ? undefined : chatTemplateOption(values['chat-template']);
  const dtype = values.dtype as FloatDType | undefined;
  if (dtype !== undefined && !['bf16', 'f16', 'f32'].includes(dtype)) throw new ArgumentError(`--dtype must be bf16, f16 or f32, got '${dtype}'`);
  const dir = resolveModelDirectory(values.model);

  const { backend } = await selectBackend(values.backend as BackendChoice | undefined);
  const start = performance.now();
  const reranker = Reranker.load(dir, backend, {
    ...(attention ? { attention } : {}), ...(dtype ? { dtype } : {}), ...(maxTokens ? { maxTokens } : {}), ...(batchSize ? { batchSize } : {}),
    ...(maxPassTokens ? { maxPassTokens } : {}), ...(maxSharedPrefix !== undefined ? { maxSharedPrefix } : {}), ...(chatTemplate ? { chatTemplate } : {}),
  });
  try {
    const prompt = { ...(values.prompt !== undefined ? { prompt: values.prompt } : {}), ...(values['prompt-name'] !== undefined ? { promptName: values['prompt-name'] } : {}) };
    const { scores, tokens, truncated } = reranker.rerank(values.query, documents, prompt);
    const ranked = scores.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score || a.index - b.index).slice(0, topN ?? scores.length);
    if (truncated > 0) output.log(`note: ${truncated} pair(s) cut to ${reranker.maxTokens} tokens\n`);
    output.out(`${JSON.stringify({
      model: dir,
      results: ranked.map(({ index, score }) => ({ index, relevance_score: score, ...(values['return-documents'] ? { document: { text: documents[index] } } : {}) })),
      usage: { total_tokens: tokens },
    })}\n`);
    output.log(`[${documents.length} document(s), ${tokens} tokens; ${describeReranker(reranker)} on ${backend.description} in ${((performance.now() - start) / 1000).toFixed(2)} s]\n`);
    return 0;
  } finally {
    reranker.free();
  }
}
