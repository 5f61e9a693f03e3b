// Turns generated token ids, arriving one at a time, into text that can be shown as it comes.
//
// Two things make "decode each token alone" wrong. Byte-level BPE (GPT-2, Llama 3) and byte-fallback
// tokens (Llama 2) can split one UTF-8 character across tokens: decoded alone, each part is U+FFFD.
// And decoders look at neighbours: WordPiece joins "##ing" to the token before it, SentencePiece
// drops the space of the first token only. So each new token is decoded together with a window of
// context tokens whose text was already returned, and only the text past that is new.
//
// Invariant: the pieces returned by push() and flush(), joined, equal tokenizer.decode(all ids)
// (without clean-up of tokenization spaces, which rewrites text across token boundaries). Given the
// prompt as `context`, they are the text its continuation adds: decode(prompt + ids) past decode(prompt)
// — the first generated word keeps the space a SentencePiece decoder strips at the start of a text
// ("hello" + "▁world" is " world", not "world"; OpenAI and vLLM return it so). Text is
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

  constructor(private readonly tokenizer: Tokenizer, options: { skipSpecialTokens?: boolean; context?: readonly number[] } = {}) {
    this.decodeOptions = { skipSpecialTokens: options.skipSpecialTokens ?? false, cleanUpTokenizationSpaces: false };
    if (options.context !== undefined) this.startAfter(options.context);
  }

  /** Treats the last few `context` tokens as text already shown (the prompt's end; see the header). */
  private startAfter(context: readonly number[]): void {
    const window = context.slice(-CONTEXT_TOKENS);
    const text = this.tokenizer.decode(window, this.decodeOptions);
    // A prompt ending inside a character (token ids can): its completion would shift the text's length, so
    // start without context instead.
    if (text.length !== withoutTrailingReplacement(text).length) return;
    this.window = window;
    this.contextLength = window.length;
    this.returnedLength = text.length;
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

/**
 * Each generated token's own text, as logprobs report it: decode(context + [id]) past decode(context), the
 * tokens before it (the prompt's end, then what was generated) as context — so a SentencePiece word keeps
 * its space ("▁world" after "hello" is " world", not the "world" that decoding it alone gives) and a
 * WordPiece "##ing" its join. The token that completes a character split across byte tokens gets the
 * character; the tokens before it show U+FFFD. Special tokens are shown (OpenAI's logprobs list them).
 */
export class TokenTexts {
  private context: number[];
  /** The context's text (its trailing U+FFFD run cut), decoded once a position for every token asked about. */
  private before?: string;
  private readonly decodeOptions: DecodeOptions = { skipSpecialTokens: false, cleanUpTokenizationSpaces: false };

  constructor(private readonly tokenizer: Tokenizer, prompt: readonly number[] = []) {
    this.context = prompt.slice(-CONTEXT_TOKENS);
  }

  /** The text `id` adds at this position (the chosen token or an alternative to it). */
  textOf(id: number): string {
    if (this.context.length === 0) return this.tokenizer.decode([id], this.decodeOptions);
    const before = this.before ??= withoutTrailingReplacement(this.tokenizer.decode(this.context, this.decodeOptions));
    const after = this.tokenizer.decode([...this.context, id], this.decodeOptions);
    // A decoder that rewrites text across the boundary (none of the supported ones do): the token alone.
    return after.startsWith(before) ? after.slice(before.length) : this.tokenizer.decode([id], this.decodeOptions);
  }

  /** Moves past `id`, the token chosen at this position. */
  advance(id: number): void {
    this.context.push(id);
    if (this.context.length > CONTEXT_TOKENS) this.context.shift();
    this.before = undefined;
  }
}

/**
 * Prompt tokens kept as context (vLLM keeps 5): enough for any decoder's look-back (a word's leading space,
 * WordPiece's "##"), few enough that decoding the window stays cheap.
 */
const CONTEXT_TOKENS = 6;

function withoutTrailingReplacement(text: string): string {
  let end = text.length;
  while (end > 0 && text.charCodeAt(end - 1) === 0xfffd) end--;
  return text.slice(0, end);
}
