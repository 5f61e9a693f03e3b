// Turns generated token ids, arriving one at a time, into text that can be shown as it comes.
//
// Two things make "decode each token alone" wrong. Byte-level BPE (GPT-2, Llama 3) and byte-fallback
// tokens (Llama 2) can split one UTF-8 character across tokens: decoded alone, each part is U+FFFD.
// And decoders look at neighbours: WordPiece joins "##ing" to the token before it, SentencePiece
// drops the space of the first token only. So each new token is decoded together with a window of
// context tokens whose text was already returned, and only the text past that is new.
//
// Invariant: the pieces returned by push() and flush(), joined, equal tokenizer.decode(all ids)
// (without clean-up of tokenization spaces, which rewrites text across token boundaries). Text is
// held back while it ends in U+FFFD, since the next token may complete the character; UTF-8 decoding
// resynchronises at every complete character, so text before the trailing U+FFFD run never changes
// and is returned at once.

import type { DecodeOptions, Tokenizer } from './tokenizer.js';

export class TokenStreamDecoder {
  /** Context tokens (whose text is all returned) followed by tokens whose text is held back in part. */
  private window: number[] = [];
  private contextLength = 0;
  /** Characters of decode(window) already returned, or given as context. */
  private returnedLength = 0;
  private readonly decodeOptions: DecodeOptions;

  constructor(private readonly tokenizer: Tokenizer, options: { skipSpecialTokens?: boolean } = {}) {
    this.decodeOptions = { skipSpecialTokens: options.skipSpecialTokens ?? false, cleanUpTokenizationSpaces: false };
  }

  /** Adds one token; returns the text it completes (often all of its own text, sometimes ''). */
  push(id: number): string {
    this.window.push(id);
    const text = this.tokenizer.decode(this.window, this.decodeOptions);
    const complete = withoutTrailingReplacement(text);
    const piece = complete.length > this.returnedLength ? complete.slice(this.returnedLength) : '';
    this.returnedLength = Math.max(this.returnedLength, complete.length);
    if (complete.length === text.length) {
      // Everything is out: the tokens since the last such point become the context for the next one.
      // They start on a character boundary, so their text alone is what they contributed.
      this.window = this.window.slice(this.contextLength);
      this.contextLength = this.window.length;
      this.returnedLength = this.tokenizer.decode(this.window, this.decodeOptions).length;
    }
    return piece;
  }

  /** Returns the text still held back (an incomplete character shows as U+FFFD) and starts afresh. */
  flush(): string {
    const text = this.tokenizer.decode(this.window, this.decodeOptions);
    const piece = text.slice(this.returnedLength);
    this.window = [];
    this.contextLength = 0;
    this.returnedLength = 0;
    return piece;
  }
}

/** Decodes `ids` one at a time through a TokenStreamDecoder, yielding each non-empty piece. */
export function* decodeIncrementally(tokenizer: Tokenizer, ids: Iterable<number>, options: { skipSpecialTokens?: boolean } = {}): Generator<string> {
  const decoder = new TokenStreamDecoder(tokenizer, options);
  for (const id of ids) {
    const piece = decoder.push(id);
    if (piece !== '') yield piece;
  }
  const rest = decoder.flush();
  if (rest !== '') yield rest;
}

function withoutTrailingReplacement(text: string): string {
  let end = text.length;
  while (end > 0 && text.charCodeAt(end - 1) === 0xfffd) end--;
  return text.slice(0, end);
}
