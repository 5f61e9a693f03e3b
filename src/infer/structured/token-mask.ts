// Which tokens of a vocabulary may come next under a grammar: the mask constrained decoding samples within.
//
// The vocabulary's byte strings (io/token-bytes.ts) go into a trie once per model; a mask is a walk down it
// with the matcher's states (json-matcher.ts), a subtree left as soon as its first byte is refused. Between
// a JSON document's structural characters that walk is short (few tokens start with '"' or ','); inside a
// free string nearly every token fits, so there the mask is a precomputed one — tokens made only of string
// characters, for each UTF-8 position a token may start at — plus a check of the few tokens holding a '"' or
// '\' (where the string may end or escape), each walked byte by byte.

import type { GrammarNode } from './json-schema.js';
import type { ParseStack } from './json-matcher.js';
import { advanceAll, advanceBytes, freeStringBody, initialStates, isAccepting, isFinished, utf8Continue, utf8Lead } from './json-matcher.js';

const QUOTE = 0x22, BACKSLASH = 0x5c;

/** A bit mask over token ids: bit t is word t >>> 5, bit t & 31. */
export type TokenMask = Uint32Array;

export const maskAllows = (mask: TokenMask, token: number): boolean => ((mask[token >>> 5]! >>> (token & 31)) & 1) === 1;
const setBit = (mask: TokenMask, token: number) => { mask[token >>> 5]! |= 1 << (token & 31); };

/** A vocabulary's byte strings as a trie, with the masks of free string bodies made on first use. */
export class TokenVocabulary {
  readonly size: number;
  readonly words: number;
  private readonly edgeByte: Uint8Array;
  private readonly firstChild: Int32Array;
  private readonly nextSibling: Int32Array;
  /** The first token id ending at a node (−1: none), and the next token with the same bytes. */
  private readonly tokenHead: Int32Array;
  private readonly tokenNext: Int32Array;
  /** Tokens holding a '"' or '\' (the ones a free string's fast mask must check one by one). */
  private readonly quoteTokens: Int32Array;
  private readonly bodyMasks: (TokenMask | undefined)[] = [];

  constructor(readonly bytes: readonly (Uint8Array | null)[]) {
    this.size = bytes.length;
    this.words = (this.size + 31) >>> 5;
    const ids = [];
    for (let t = 0; t < this.size; t++) if (bytes[t] && bytes[t]!.length > 0) ids.push(t);
    ids.sort((a, b) => compareBytes(bytes[a]!, bytes[b]!));
    // Nodes in the order a sorted insertion meets them; node 0 is the root.
    let capacity = 1;
    for (const t of ids) capacity += bytes[t]!.length;
    const edgeByte = new Uint8Array(capacity), firstChild = new Int32Array(capacity).fill(-1), nextSibling = new Int32Array(capacity).fill(-1), lastChild = new Int32Array(capacity).fill(-1);
    const tokenHead = new Int32Array(capacity).fill(-1), tokenNext = new Int32Array(this.size).fill(-1);
    let nodes = 1;
    const path = [0]; // path[d]: the node of the current token's first d bytes
    let previous: Uint8Array | null = null;
    const quote: number[] = [];
    for (const t of ids) {
      const b = bytes[t]!;
      let shared = 0;
      if (previous) while (shared < b.length && shared < previous.length && b[shared] === previous[shared]) shared++;
      path.length = shared + 1;
      for (let d = shared; d < b.length; d++) {
        const parent = path[d]!, node = nodes++;
        edgeByte[node] = b[d]!;
        if (lastChild[parent]! < 0) firstChild[parent] = node;
        else nextSibling[lastChild[parent]!] = node;
        lastChild[parent] = node;
        path.push(node);
      }
      const end = path[b.length]!;
      tokenNext[t] = tokenHead[end]!;
      tokenHead[end] = t;
      if (b.includes(QUOTE) || b.includes(BACKSLASH)) quote.push(t);
      previous = b;
    }
    this.edgeByte = edgeByte.subarray(0, nodes);
    this.firstChild = firstChild.subarray(0, nodes);
    this.nextSibling = nextSibling.subarray(0, nodes);
    this.tokenHead = tokenHead.subarray(0, nodes);
    this.tokenNext = tokenNext;
    this.quoteTokens = Int32Array.from(quote);
  }

  /** The tokens whose bytes all fit after `states` (the walk described in the header), as a new mask. */
  allowed(states: readonly ParseStack[]): TokenMask {
    const mask = new Uint32Array(this.words);
    const body = states.length === 1 ? freeStringBody(states[0]!) : null;
    if (body !== null) {
      mask.set(this.bodyMask(body));
      for (const t of this.quoteTokens) if (advanceBytes(states, this.bytes[t]!)) setBit(mask, t);
    } else {
      this.walk(0, states, mask);
    }
    return mask;
  }

  private walk(node: number, states: readonly ParseStack[], mask: TokenMask): void {
    for (let child = this.firstChild[node]!; child >= 0; child = this.nextSibling[child]!) {
      const next = advanceAll(states, this.edgeByte[child]!);
      if (next.length === 0) continue;
      for (let t = this.tokenHead[child]!; t >= 0; t = this.tokenNext[t]!) setBit(mask, t);
      if (this.firstChild[child]! >= 0) this.walk(child, next, mask);
    }
  }

  /** Tokens made only of string characters (no '"', '\' or control byte; well-formed UTF-8 from UTF-8 state `pending`, json-matcher.ts). */
  private bodyMask(pending: number): TokenMask {
    let mask = this.bodyMasks[pending];
    if (mask) return mask;
    mask = new Uint32Array(this.words);
    for (let t = 0; t < this.size; t++) {
      const b = this.bytes[t];
      if (b && b.length > 0 && stringBody(b, pending)) setBit(mask, t);
    }
    return (this.bodyMasks[pending] = mask);
  }
}

function stringBody(bytes: Uint8Array, pending: number): boolean {
  let due = pending;
  for (const b of bytes) {
    if (due > 0) {
      due = utf8Continue(due, b);
      if (due < 0) return false;
    } else if (b === QUOTE || b === BACKSLASH || b < 0x20) {
      return false;
    } else if (b >= 0x80) {
      due = utf8Lead(b);
      if (due === 0) return false;
    }
  }
  return true;
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/**
 * What the serving engine asks of a constrained request before each token it samples (engine.ts): the tokens
 * allowed next, the token taken, and whether the text is complete (no token may follow: the request ends).
 */
export interface TokenConstraint {
  /** The tokens allowed next, or null when any token may come. */
  allowedTokens(): TokenMask | null;
  /** Whether `token` may come next: what allowedTokens() says of it, without making the whole mask. */
  allows(token: number): boolean;
  /** Takes the token picked (one allowedTokens() allowed). */
  accept(token: number): void;
  readonly complete: boolean;
}

/**
 * Reasoning before the constrained answer (a thinking model, vLLM's --reasoning-parser): no mask until the
 * token that closes the reasoning; `opensItself`: the model opens it (Qwen3), else the prompt did (DeepSeek-R1).
 */
export interface ReasoningTokens {
  readonly open: number;
  readonly close: number;
  readonly opensItself: boolean;
}

/** A request's JSON constraint: its grammar's matcher over the vocabulary, the stop tokens allowed once the value is complete. */
export class JsonConstraint implements TokenConstraint {
  private states: ParseStack[];
  private mask: TokenMask | null = null;
  private phase: 'start' | 'reasoning' | 'json';

  constructor(grammar: GrammarNode, private readonly vocabulary: TokenVocabulary, private readonly stopTokenIds: readonly number[], private readonly reasoning?: ReasoningTokens) {
    this.states = initialStates(grammar);
    this.phase = reasoning ? (reasoning.opensItself ? 'start' : 'reasoning') : 'json';
  }

  allowedTokens(): TokenMask | null {
    if (this.phase === 'reasoning') return null;
    if (this.mask) return this.mask;
    const mask = this.vocabulary.allowed(this.states);
    // A dead end (never with a vocabulary that spells every byte) ends the answer rather than the step.
    if (isAccepting(this.states) || mask.every((word) => word === 0)) for (const t of this.stopTokenIds) if (t < this.vocabulary.size) setBit(mask, t);
    if (this.phase === 'start') setBit(mask, this.reasoning!.open);
    return (this.mask = mask);
  }

  allows(token: number): boolean {
    if (this.phase === 'reasoning' || (this.phase === 'start' && token === this.reasoning!.open)) return true;
    if (this.mask) return maskAllows(this.mask, token);
    if (this.stopTokenIds.includes(token)) return isAccepting(this.states);
    const bytes = this.vocabulary.bytes[token];
    return bytes !== undefined && bytes !== null && advanceBytes(this.states, bytes) !== null;
  }

  accept(token: number): void {
    this.mask = null;
    if (this.phase === 'reasoning') {
      if (token === this.reasoning!.close) this.phase = 'json';
      return;
    }
    if (this.phase === 'start') {
      this.phase = 'json';
      if (token === this.reasoning!.open) {
        this.phase = 'reasoning';
        return;
      }
    }
    if (this.stopTokenIds.includes(token)) return;
    const bytes = this.vocabulary.bytes[token];
    const next = bytes ? advanceBytes(this.states, bytes) : null;
    if (!next) throw new Error(`internal: token ${token} does not fit the JSON constraint (the mask allowed it)`);
    this.states = next;
  }

  /**
   * The value is complete and nothing may follow — or it is complete and no token may come: a top-level number
   * at its longest with no stop token to end it.
   */
  get complete(): boolean {
    if (this.phase !== 'json') return false;
    return isFinished(this.states) || (isAccepting(this.states) && this.allowedTokens()!.every((word) => word === 0));
  }
}
