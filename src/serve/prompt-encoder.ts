// Prompt text → token ids for the server without stalling it. The engine loop and every stream's writes
// share Node's one thread: encoding a 1 MB prompt there (~2 s with the Hugging Face tokenizers library)
// would pause every running request's tokens for as long. Texts past a few kilobytes go to a worker thread
// that holds the same tokenizer (built from its definition); short ones, a few milliseconds at most, are
// encoded in place, where a round trip would cost more than it saves. A tokenizer without a definition
// (built in code, e.g. the byte-level one, whose encoding is a Buffer copy) always encodes in place.

import { Worker } from 'node:worker_threads';
import type { Tokenizer } from '../io/tokenizer.js';
import { TokenizerError } from '../io/tokenizer.js';
import type { EncodeReply, EncodeRequest } from './encode-worker.js';

/** Texts shorter than this (UTF-16 units) are encoded on the calling thread. */
export const INLINE_ENCODE_CHARS = 4096;

export class PromptEncoder {
  private worker: Worker | undefined;
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (ids: number[]) => void; reject: (error: Error) => void }>();

  constructor(private readonly tokenizer: Tokenizer, private readonly inlineBelowChars = INLINE_ENCODE_CHARS) {}

  async encode(text: string, addSpecialTokens = true): Promise<number[]> {
    const definition = this.tokenizer.definition;
    if (definition === undefined || text.length < this.inlineBelowChars) return this.tokenizer.encode(text, { addSpecialTokens });
    const worker = this.worker ??= this.start();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ id, text, addSpecialTokens } satisfies EncodeRequest);
    });
  }

  /** Stops the worker; encodes still waiting are refused. */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    this.failAll(new TokenizerError('the prompt encoder was closed'));
    await worker?.terminate();
  }

  private start(): Worker {
    const worker = new Worker(new URL('./encode-worker.js', import.meta.url), { workerData: this.tokenizer.definition });
    worker.unref(); // an idle encoder never keeps the process alive
    worker.on('message', (reply: EncodeReply) => {
      const waiting = this.pending.get(reply.id);
      if (!waiting) return;
      this.pending.delete(reply.id);
      if ('ids' in reply) waiting.resolve(Array.from(reply.ids));
      else waiting.reject(new TokenizerError(reply.error.message));
    });
    // A worker that fails (it cannot build the tokenizer, it runs out of memory) fails what waits on it;
    // the next long text starts a new one.
    const lost = (error: Error) => {
      if (this.worker === worker) this.worker = undefined;
      this.failAll(new TokenizerError(`the prompt encoder's worker thread failed: ${error.message}`));
    };
    worker.on('error', lost);
    worker.on('exit', (code) => { if (code !== 0) lost(new Error(`exit code ${code}`)); });
    return worker;
  }

  private failAll(error: Error): void {
    for (const waiting of this.pending.values()) waiting.reject(error);
    this.pending.clear();
  }
}
