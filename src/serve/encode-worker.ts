// The prompt encoder's worker thread (prompt-encoder.ts): builds the server's tokenizer from its definition
// and encodes texts as they come, so a long prompt's tokenization runs beside the engine loop, not in it.

import { parentPort, workerData } from 'node:worker_threads';
import { createTokenizer } from '../io/tokenizer.js';
import type { TokenizerDefinition } from '../io/tokenizer.js';

export interface EncodeRequest { readonly id: number; readonly text: string; readonly addSpecialTokens: boolean }
export type EncodeReply = { readonly id: number; readonly ids: Int32Array } | { readonly id: number; readonly error: { readonly name: string; readonly message: string } };

const d = workerData as TokenizerDefinition;
const tokenizer = createTokenizer(d.tokenizerJson, d.tokenizerConfig, d.source, d.configSource, d.chatTemplateFile);

parentPort!.on('message', ({ id, text, addSpecialTokens }: EncodeRequest) => {
  let reply: EncodeReply;
  try {
    // encode() refuses any id outside the vocabulary (Int32Array.from would turn an undefined into token 0).
    reply = { id, ids: Int32Array.from(tokenizer.encode(text, { addSpecialTokens })) };
  } catch (error) {
    reply = { id, error: { name: (error as Error).name, message: (error as Error).message } };
  }
  parentPort!.postMessage(reply, 'ids' in reply ? [reply.ids.buffer as ArrayBuffer] : []);
});
