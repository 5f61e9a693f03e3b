// `--json` and `--json-schema SCHEMA` for `fuseformer generate` and `fuseformer chat`: the answer held to a JSON
// object, or to a JSON Schema (a file, or the schema itself as one argument), token by token — the server's
// structured outputs (infer/structured/) from the command line. Generation runs on a one-request serving engine,
// whose steps can ask the constraint before each token.

import { existsSync, readFileSync } from 'node:fs';
import { ArgumentError } from '../errors.js';
import type { DecoderModel } from '../infer/model.js';
import type { ResolvedSampling } from '../infer/sampling.js';
import { anyJsonObject, compileJsonSchema, SchemaError } from '../infer/structured/json-schema.js';
import type { GrammarNode } from '../infer/structured/json-schema.js';
import { JsonConstraint, TokenVocabulary } from '../infer/structured/token-mask.js';
import type { TokenConstraint } from '../infer/structured/token-mask.js';
import { tokenByteTable } from '../io/token-bytes.js';
import { TokenStreamDecoder } from '../io/token-stream-decoder.js';
import type { Tokenizer } from '../io/tokenizer.js';
import type { ServingEngineOptions } from '../serve/engine.js';
import { ServingEngine } from '../serve/engine.js';

export const JSON_OPTIONS_USAGE = `  --json                   answer with a JSON object (decoding constrained token by token)
  --json-schema S          answer with JSON that fits this JSON Schema (a file, or the schema itself); the keywords
                           it cannot enforce (pattern, format, …) are refused by name`;

/** The grammar --json / --json-schema ask for (undefined: neither); a schema the grammar cannot enforce names the keyword. */
export function jsonGrammarOption(json: boolean | undefined, schema: string | undefined): GrammarNode | undefined {
  if (json && schema !== undefined) throw new ArgumentError('--json and --json-schema: give one (--json-schema already asks for JSON)');
  if (json) return anyJsonObject();
  if (schema === undefined) return undefined;
  const inline = schema.trimStart().startsWith('{');
  if (!inline && !existsSync(schema)) throw new ArgumentError(`--json-schema: '${schema}' is neither a file nor a JSON object`);
  const source = inline ? 'the schema given' : schema;
  let parsed: unknown;
  try {
    parsed = JSON.parse(inline ? schema : readFileSync(schema, 'utf8'));
  } catch (e) {
    throw new ArgumentError(`--json-schema: ${source} is not JSON (${(e as Error).message})`);
  }
  try {
    return compileJsonSchema(parsed);
  } catch (e) {
    if (e instanceof SchemaError) throw new ArgumentError(`--json-schema: ${source} at ${e.message}`);
    throw e;
  }
}

/** A new constraint of `grammar` for each answer (the vocabulary's trie built once). */
export function jsonConstraints(grammar: GrammarNode, tokenizer: Tokenizer, model: DecoderModel, stopTokenIds: readonly number[]): () => TokenConstraint {
  const vocabulary = new TokenVocabulary(tokenByteTable(tokenizer, model.vocabSize));
  return () => new JsonConstraint(grammar, vocabulary, stopTokenIds);
}

export interface ConstrainedTextOptions {
  readonly grammar: GrammarNode;
  readonly sampling: ResolvedSampling;
  readonly maxNewTokens: number;
  readonly stopTokenIds: readonly number[];
  readonly engineOptions?: ServingEngineOptions;
}

/** The answer's text as it is generated, held to `grammar` (it ends at the value's last byte, or at maxNewTokens). */
export async function* constrainedText(model: DecoderModel, tokenizer: Tokenizer, prompt: readonly number[], options: ConstrainedTextOptions): AsyncGenerator<string, void, undefined> {
  if (options.maxNewTokens < 1) return;
  const constraint = jsonConstraints(options.grammar, tokenizer, model, options.stopTokenIds)();
  const engine = new ServingEngine(model, { maxRunning: 1, ...options.engineOptions });
  try {
    const decoder = new TokenStreamDecoder(tokenizer, { skipSpecialTokens: true, context: prompt });
    const pieces: string[] = [];
    let finished = false;
    engine.submit({
      prompt, maxTokens: Math.min(options.maxNewTokens, engine.maxLen - prompt.length), sampling: options.sampling, stopTokenIds: options.stopTokenIds, constraint,
      onToken: (e) => { if (!options.stopTokenIds.includes(e.token) && e.token < tokenizer.vocabSize) pieces.push(decoder.push(e.token)); },
      onFinish: () => { finished = true; },
    });
    while (!finished || engine.hasWork) {
      engine.step();
      for (const piece of pieces.splice(0)) if (piece !== '') yield piece;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    pieces.push(decoder.flush());
    for (const piece of pieces.splice(0)) if (piece !== '') yield piece;
  } finally {
    engine.dispose();
  }
}
