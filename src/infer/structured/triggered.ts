// Free text in which a trigger starts a constrained part: a tool call with strict arguments under tool_choice
// "auto" — the model writes what it likes, but once it writes `<tool_call>` the call that follows is held to its
// grammar up to `</tool_call>`, and then the text is free again.
//
// The trigger is found in the bytes as they come (a KMP automaton: `matched` trigger bytes end the text so far),
// whether one token writes it or several do. A token that completes the trigger may carry bytes past it, which
// must already fit the grammar; so in free text the mask leaves out exactly the tokens that would complete the
// trigger and go on wrongly. That set depends only on `matched` and is usually empty (the tokens holding the
// trigger end with it, or go on with the grammar's first bytes): then there is no mask at all, and free text
// costs nothing — a greedy request keeps the device's pick, a sampled one its device draw.

import type { GrammarNode } from './json-schema.js';
import type { ParseStack } from './json-matcher.js';
import { advanceAll, initialStates, isFinished } from './json-matcher.js';
import type { TokenConstraint, TokenMask, TokenVocabulary } from './token-mask.js';

export class TriggeredConstraint implements TokenConstraint {
  private readonly failure: Int32Array;
  /** Per trigger state: the mask of free text (null: every token allowed), made on first use. */
  private readonly freeMasks = new Map<number, TokenMask | null>();
  private matched = 0;
  /** The constrained part's parse, or null in free text. */
  private states: ParseStack[] | null = null;
  private mask: TokenMask | null | undefined;

  constructor(private readonly trigger: Uint8Array, private readonly grammar: GrammarNode, private readonly vocabulary: TokenVocabulary) {
    if (trigger.length === 0) throw new Error('internal: an empty trigger');
    // KMP failure function: the longest proper prefix of trigger[0, i] that is also its suffix.
    this.failure = new Int32Array(trigger.length);
    for (let i = 1, k = 0; i < trigger.length; i++) {
      while (k > 0 && trigger[i] !== trigger[k]) k = this.failure[k - 1]!;
      if (trigger[i] === trigger[k]) k++;
      this.failure[i] = k;
    }
  }

  allowedTokens(): TokenMask | null {
    if (this.mask !== undefined) return this.mask;
    return (this.mask = this.states ? this.vocabulary.allowed(this.states) : this.freeMask(this.matched));
  }

  allows(token: number): boolean {
    const bytes = this.vocabulary.bytes[token];
    if (!bytes) return this.states === null;
    return this.run(this.matched, this.states, bytes) !== null;
  }

  accept(token: number): void {
    this.mask = undefined;
    const bytes = this.vocabulary.bytes[token];
    if (!bytes) {
      // A special token (EOS, a chat template's marker): no text; inside the constrained part the mask never allows one.
      if (this.states) throw new Error(`internal: token ${token} (no text) inside a constrained part`);
      this.matched = 0;
      return;
    }
    const next = this.run(this.matched, this.states, bytes);
    if (!next) throw new Error(`internal: token ${token} does not fit the constrained part (the mask allowed it)`);
    [this.matched, this.states] = next;
  }

  get complete(): boolean { return false; }

  /** Free text and constrained parts over `bytes` from (matched, states); null where a constrained part refuses a byte. */
  private run(matched: number, states: ParseStack[] | null, bytes: Uint8Array): [number, ParseStack[] | null] | null {
    for (const b of bytes) {
      if (states) {
        states = advanceAll(states, b);
        if (states.length === 0) return null;
        if (isFinished(states)) states = null; // the part ends: free text from the next byte
        continue;
      }
      while (matched > 0 && b !== this.trigger[matched]) matched = this.failure[matched - 1]!;
      if (b === this.trigger[matched]) matched++;
      if (matched === this.trigger.length) {
        matched = 0;
        states = initialStates(this.grammar);
      }
    }
    return [matched, states];
  }

  /** Free text after `matched` trigger bytes: every token but those that complete the trigger and go on wrongly. */
  private freeMask(matched: number): TokenMask | null {
    if (this.freeMasks.has(matched)) return this.freeMasks.get(matched)!;
    const { bytes, size, words } = this.vocabulary;
    let mask: TokenMask | null = null;
    for (let t = 0; t < size; t++) {
      const b = bytes[t];
      if (!b || this.run(matched, null, b)) continue;
      mask ??= new Uint32Array(words).fill(0xffffffff);
      mask[t >>> 5]! &= ~(1 << (t & 31));
    }
    this.freeMasks.set(matched, mask);
    return mask;
  }
}
