// One choice's text, token by token, as the server sends it: ids decoded into whole characters (special tokens
// dropped), a stop string's match cutting the text before it (text that may start one held back meanwhile), a chat
// answer's reasoning and tool calls taken apart (answer-parts.ts), and each token's log-probabilities sent with the
// text that token starts — so the entries sent cover exactly the text returned.

import type { Tokenizer } from '../io/tokenizer.js';
import { TokenStreamDecoder, TokenTexts } from '../io/token-stream-decoder.js';
import { StopStringMatcher } from '../infer/stop-strings.js';
import type { AnswerParts, AnswerPiece } from './answer-parts.js';
import type { FinishReason, TokenEvent } from './engine.js';
import type { ToolCall } from './tool-calls.js';

export interface LogprobEntry {
  readonly token: string;
  readonly logprob: number;
  readonly top: { token: string; logprob: number }[];
  /** Where the token's text starts in the text decoded so far. */
  readonly offset: number;
}

/** What to send of a choice now: a piece of its answer and the log-probability entries it releases. */
export interface ChoiceUpdate {
  readonly piece: AnswerPiece;
  readonly logprobs: readonly LogprobEntry[];
}

export interface ChoiceTextOptions {
  readonly stop: readonly string[];
  /** Token ids that end the answer: their own text is not part of it. */
  readonly stopIds: ReadonlySet<number>;
  /** Alternatives kept per entry (with log-probabilities asked for). */
  readonly topLogprobs: number;
  readonly parts?: AnswerParts;
}

const NOTHING: AnswerPiece = { reasoning: '', content: '', calls: [] };

export class ChoiceText {
  /** What the stop matcher has let through. */
  text = '';
  reasoning = '';
  content = '';
  readonly calls: ToolCall[] = [];
  /** The entries of the tokens whose text has been sent (a stop string's tokens never are). */
  readonly logprobs: LogprobEntry[] = [];
  /** Tokens generated (for usage), whatever their text. */
  generated = 0;
  private readonly decoder: TokenStreamDecoder;
  private readonly stops: StopStringMatcher;
  private readonly tokenTexts: TokenTexts;
  /** The length of all text decoded so far: text plus what the stop matcher holds back. */
  private produced = 0;
  /** Entries whose token's text is not sent yet: held back by the stop matcher, or an unfinished character. */
  private pending: LogprobEntry[] = [];

  constructor(private readonly tokenizer: Tokenizer, prompt: readonly number[], private readonly options: ChoiceTextOptions) {
    this.decoder = new TokenStreamDecoder(tokenizer, { skipSpecialTokens: true, context: [...prompt] });
    this.stops = new StopStringMatcher([...options.stop]);
    this.tokenTexts = new TokenTexts(tokenizer, [...prompt]);
  }

  /** Whether a stop string has ended the text (later tokens add nothing). */
  get stopped(): boolean { return this.stops.done; }

  /** The next token: what to send now (undefined: nothing yet). */
  token(e: TokenEvent): ChoiceUpdate | undefined {
    this.generated++;
    if (this.stops.done) return undefined;
    const piece = e.token < this.tokenizer.vocabSize && !this.options.stopIds.has(e.token) ? this.decoder.push(e.token) : '';
    if (e.logprob !== undefined) {
      const top = (e.top ?? []).slice(0, this.options.topLogprobs).map((t) => ({ token: this.tokenTexts.textOf(t.token), logprob: t.logprob }));
      this.pending.push({ token: this.tokenTexts.textOf(e.token), logprob: e.logprob, top, offset: this.produced });
      this.tokenTexts.advance(e.token);
    }
    this.produced += piece.length;
    return this.emit(this.stops.push(piece).text, false);
  }

  /** The end of the answer: what the decoder, the stop matcher and the parts still hold. */
  end(): ChoiceUpdate {
    if (!this.stops.done) return this.emit(this.stops.push(this.decoder.flush()).text + this.stops.flush(), true);
    // A stop string ended the text: what the parts hold is text before it (its tokens' entries are not sent).
    return this.add(this.options.parts ? this.options.parts.push('', true) : NOTHING, []);
  }

  /** The finish_reason for the engine's: "stop" after a stop string; "tool_calls" when an answer that called tools ended as the model chose. */
  finishReason(engine: FinishReason): string {
    const stopped = this.stops.done ? 'stop' : engine;
    return stopped === 'stop' && this.calls.length > 0 ? 'tool_calls' : stopped;
  }

  private emit(piece: string, last: boolean): ChoiceUpdate {
    this.text += piece;
    // An entry goes out with the text its token starts; the last emit releases what is left.
    const ready = last ? this.pending : this.pending.filter((e) => e.offset < this.text.length);
    this.pending = last ? [] : this.pending.filter((e) => e.offset >= this.text.length);
    this.logprobs.push(...ready);
    return this.add(this.options.parts ? this.options.parts.push(piece, last) : { reasoning: '', content: piece, calls: [] }, ready);
  }

  private add(piece: AnswerPiece, ready: readonly LogprobEntry[]): ChoiceUpdate {
    this.reasoning += piece.reasoning;
    this.content += piece.content;
    this.calls.push(...piece.calls);
    return { piece, logprobs: ready };
  }
}

/** Whether an update carries anything to stream. */
export function hasContent(u: ChoiceUpdate): boolean {
  return u.piece.reasoning !== '' || u.piece.content !== '' || u.piece.calls.length > 0 || u.logprobs.length > 0;
}
