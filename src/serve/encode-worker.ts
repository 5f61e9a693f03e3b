// The prompt encoder's worker thread (prompt-encoder.ts): builds the server's tokenizer from its definition
// and encodes texts as they come, so a long prompt's tokenization runs beside the engine loop, not in it.

import { parentPort, workerData } from 'node:worker_threads';
import { createTokenizer, TokenizerError } from '../io/tokenizer.js';
import type { TokenizerDefinition } from '../io/tokenizer.js';

export interface EncodeRequest { readonly id: number; readonly text: string; readonly addSpecialTokens: boolean }
export type EncodeReply = { readonly id: number; readonly ids: Int32Array } | { readonly id: number; readonly error: { readonly name: string; readonly message: string } };

const d = workerData as TokenizerDefinition;
const tokenizer = createTokenizer(d.tokenizerJson, d.tokenizerConfig, d.source, d.configSource, d.chatTemplateFile);

/**
 * The ids as an Int32Array for the trip back, refusing any that is not a valid id: Int32Array.from would
 * turn an `undefined` into 0 (a real token) and a 3.5 into 3 without a word.
 */
function toInt32Ids(ids: readonly number[]): Int32Array {
  for (const id of ids) {
    if (!Number.isInteger(id) || id < 0 || id > 0x7fffffff) {
      throw new TokenizerError(`${d.source}: encoding produced the token id ${String(id)}, which is not a valid token id`);
    }
  }
  return Int32Array.from(ids);
}

parentPort!.on('message', ({ id, text, addSpecialTokens }: EncodeRequest) => {
  let reply: EncodeReply;
  try {
    reply = { id, ids: toInt32Ids(tokenizer.encode(text, { addSpecialTokens })) };
  } catch (error) {
    reply = { id, error: { name: (error as Error).name, message: (error as Error).message } };
  }
  parentPort!.postMessage(reply, 'ids' in reply ? [reply.ids.buffer as ArrayBuffer] : []);
});
