// A byte-at-a-time recogniser of JSON text that fits a grammar (json-schema.ts): the state after each byte is a
// set of stacks (alternatives of anyOf stay side by side until a byte rules them out), so "may this byte come
// next?" and "is the text complete?" are answered without ever backtracking. Token masks (token-mask.ts) ask it
// for every token of a vocabulary, byte by byte down a trie, so states are small immutable objects: a step
// builds new ones and never changes the old (the trie walk's siblings share their parent's states).
//
// What the text may contain beside the grammar's values: whitespace before a value and around ':' , ',' and
// the brackets — one space, or a newline and an indentation of up to MAX_INDENT spaces or tabs — so compact
// and pretty-printed JSON both fit while a model that keeps writing whitespace must get on with the value (with
// any amount allowed, a weak model's answer can be all whitespace); strings in well-formed UTF-8 with JSON's
// escapes; nothing after the top value.
// A top-level number ends where the text ends (EOS), so it is complete yet may still grow.

import type { GrammarNode, PropertyRule, RefNode } from './json-schema.js';
import { anyJsonObject, MAX_EXPONENT_DIGITS, MAX_FRACTION_DIGITS, MAX_INTEGER_DIGITS } from './json-schema.js';

export const MAX_INDENT = 12;
const AFTER_SPACE = 1, AFTER_NEWLINE = 0x100;

/**
 * A whitespace run's state after byte b, or −1 where b may not extend it. A run is nothing, one space, or a
 * newline and up to MAX_INDENT spaces or tabs: compact JSON (", " and ": ") and pretty-printed JSON both fit;
 * nothing else does — each extra byte of whitespace is a token a weak model (a byte-level vocabulary above all)
 * would happily repeat.
 */
function whitespaceAfter(ws: number, b: number): number {
  if (b === 0x0a) return ws === 0 ? AFTER_NEWLINE : -1;
  if (b === 0x20 && ws === 0) return AFTER_SPACE;
  if ((b === 0x20 || b === 0x09) && ws & AFTER_NEWLINE) return (ws & 0xff) < MAX_INDENT ? ws + 1 : -1;
  return -1;
}

type StringNode = Extract<GrammarNode, { kind: 'string' }>;
type NumberNode = Extract<GrammarNode, { kind: 'number' }>;
type ObjectNode = Extract<GrammarNode, { kind: 'object' }>;
type ArrayNode = Extract<GrammarNode, { kind: 'array' }>;
type SequenceNode = Extract<GrammarNode, { kind: 'sequence' }>;
type NumberPhase = 'sign' | 'zero' | 'int' | 'dot' | 'frac' | 'exp' | 'expSign' | 'expDigits';

/**
 * One level of the parse. V: a value may start (after whitespace); S: inside a string (esc 1 after '\', 2–5
 * inside \uXXXX; utf8: continuation bytes still due); L: part way through fixed bytes (a key, an enum member,
 * true / false / null); N: inside a number; O / A: inside an object / array, between its parts; Q: a sequence,
 * `next` the part that starts at the next byte.
 */
type Frame =
  | { readonly t: 'V'; readonly node: GrammarNode; readonly ws: number }
  | { readonly t: 'S'; readonly node: StringNode; readonly len: number; readonly esc: number; readonly utf8: number }
  | { readonly t: 'L'; readonly bytes: Uint8Array; readonly i: number }
  | { readonly t: 'N'; readonly node: NumberNode; readonly phase: NumberPhase; readonly neg: boolean; readonly digits: string; readonly frac: number; readonly exp: number }
  | { readonly t: 'O'; readonly node: ObjectNode; readonly phase: 'open' | 'key' | 'colon' | 'value' | 'after' | 'comma'; readonly next: number; readonly pending: number; readonly ws: number }
  | { readonly t: 'A'; readonly node: ArrayNode; readonly phase: 'open' | 'value' | 'after' | 'comma'; readonly count: number; readonly ws: number }
  | { readonly t: 'Q'; readonly node: SequenceNode; readonly next: number };

/** A parse in progress: its innermost frame and the frames around it. */
export interface ParseStack {
  readonly f: Frame;
  readonly up: ParseStack | null;
}

/** The top value complete: nothing may follow. */
export const DONE: ParseStack = Object.freeze({ f: { t: 'L', bytes: new Uint8Array(0), i: 0 }, up: null }) as ParseStack;

const QUOTE = 0x22, BACKSLASH = 0x5c, MINUS = 0x2d, PLUS = 0x2b, DOT = 0x2e, COLON = 0x3a, COMMA = 0x2c;
const LBRACE = 0x7b, RBRACE = 0x7d, LBRACKET = 0x5b, RBRACKET = 0x5d;
const isWhitespace = (b: number) => b === 0x20 || b === 0x0a || b === 0x09;
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
/** After '\': " \ / b f n r t (u is handled apart). */
const SIMPLE_ESCAPES = new Set([QUOTE, BACKSLASH, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74]);
const utf8 = new TextEncoder();

const ANY_STRING: StringNode = { kind: 'string', minLength: 0, maxLength: Infinity };
const ANY_OPTIONS: readonly GrammarNode[] = [
  anyJsonObject(),
  { kind: 'array', prefix: [], items: { kind: 'any' }, minItems: 0, maxItems: Infinity },
  ANY_STRING,
  { kind: 'number', integer: false, minimum: null, maximum: null },
  ...['true', 'false', 'null'].map((text): GrammarNode => ({ kind: 'literal', bytes: utf8.encode(text) })),
];

/** The states before any byte: the grammar's value may start. */
export function initialStates(root: GrammarNode): ParseStack[] {
  return [{ f: { t: 'V', node: root, ws: 0 }, up: null }];
}

/** The states after byte b (empty: b may not come next). */
export function advanceAll(states: readonly ParseStack[], b: number): ParseStack[] {
  const out: ParseStack[] = [];
  for (const s of states) advance(s, b, out);
  return out.length > 1 ? dedupe(out) : out;
}

/** The states after every byte of `bytes`, or null where one of them may not come. */
export function advanceBytes(states: readonly ParseStack[], bytes: Uint8Array): ParseStack[] | null {
  let current = states as ParseStack[];
  for (const b of bytes) {
    current = advanceAll(current, b);
    if (current.length === 0) return null;
  }
  return current;
}

/** The text so far is a complete value (the end of text may come). */
export function isAccepting(states: readonly ParseStack[]): boolean {
  return states.some((s) => s === DONE || (s.up === null && s.f.t === 'N' && numberEnds(s.f)));
}

/** The text so far is a complete value and no byte may follow. */
export function isFinished(states: readonly ParseStack[]): boolean {
  return states.length > 0 && states.every((s) => s === DONE);
}

/** A stack whose innermost frame is inside a string with no length limit, between characters: the token masks' fast case. */
export function freeStringBody(s: ParseStack): number | null {
  const f = s.f;
  return f.t === 'S' && f.esc === 0 && f.node.maxLength === Infinity ? f.utf8 : null;
}

function dedupe(states: ParseStack[]): ParseStack[] {
  const done = states.indexOf(DONE);
  if (done < 0) return states;
  return [DONE, ...states.filter((s) => s !== DONE)];
}

function advance(s: ParseStack, b: number, out: ParseStack[]): void {
  if (s === DONE) return;
  const f = s.f, up = s.up;
  switch (f.t) {
    case 'V':
      // JSON's whitespace before a value; a sequence's text (a tool call's tags) is exact.
      if (isWhitespace(b) && f.node.kind !== 'sequence') {
        const ws = whitespaceAfter(f.ws, b);
        if (ws >= 0) out.push({ f: { ...f, ws }, up });
      } else {
        startValue(f.node, up, b, out, 0);
      }
      return;
    case 'S': return stringByte(f, up, b, out);
    case 'L':
      if (b === f.bytes[f.i]) out.push(f.i + 1 === f.bytes.length ? valueDone(up) : { f: { ...f, i: f.i + 1 }, up });
      return;
    case 'N': return numberByte(f, up, b, out);
    case 'O': return objectByte(f, up, b, out);
    case 'A': return arrayByte(f, up, b, out);
    case 'Q': return startValue(f.node.parts[f.next]!, { f: { ...f, next: f.next + 1 }, up }, b, out, 0);
  }
}

/** A value of `node` begins with byte b (not whitespace). `depth` guards against a reference cycle that consumes nothing. */
function startValue(node: GrammarNode, up: ParseStack | null, b: number, out: ParseStack[], depth: number): void {
  if (depth > 64) throw new Error('internal: the grammar refers to itself without consuming a byte');
  switch (node.kind) {
    case 'ref': return startValue((node as RefNode).target!, up, b, out, depth + 1);
    case 'anyOf':
      for (const option of node.options) startValue(option, up, b, out, depth + 1);
      return;
    case 'any':
      for (const option of ANY_OPTIONS) startValue(option, up, b, out, depth + 1);
      return;
    case 'literal':
      if (b === node.bytes[0]) out.push(node.bytes.length === 1 ? valueDone(up) : { f: { t: 'L', bytes: node.bytes, i: 1 }, up });
      return;
    case 'string':
      if (b === QUOTE) out.push({ f: { t: 'S', node, len: 0, esc: 0, utf8: 0 }, up });
      return;
    case 'number': {
      if (b === MINUS) {
        const f: Frame = { t: 'N', node, phase: 'sign', neg: true, digits: '', frac: 0, exp: 0 };
        if (integerFeasible(f)) out.push({ f, up });
      } else if (isDigit(b)) {
        const f: Frame = { t: 'N', node, phase: b === 0x30 ? 'zero' : 'int', neg: false, digits: String.fromCharCode(b), frac: 0, exp: 0 };
        if (integerFeasible(f)) out.push({ f, up });
      }
      return;
    }
    case 'object':
      if (b === LBRACE) out.push({ f: { t: 'O', node, phase: 'open', next: 0, pending: -1, ws: 0 }, up });
      return;
    case 'array':
      if (b === LBRACKET) out.push({ f: { t: 'A', node, phase: 'open', count: 0, ws: 0 }, up });
      return;
    case 'sequence':
      return startValue(node.parts[0]!, node.parts.length > 1 ? { f: { t: 'Q', node, next: 1 }, up } : up, b, out, depth + 1);
  }
}

/** The enclosing frame once the value inside it is complete (DONE for the top value). */
function valueDone(up: ParseStack | null): ParseStack {
  if (up === null) return DONE;
  const f = up.f;
  if (f.t === 'O') return { f: { ...f, phase: f.phase === 'key' ? 'colon' : 'after', ws: 0 }, up: up.up };
  if (f.t === 'A') return { f: { ...f, phase: 'after', count: f.count + 1, ws: 0 }, up: up.up };
  if (f.t === 'Q') return f.next === f.node.parts.length ? valueDone(up.up) : up;
  throw new Error(`internal: a value completed inside a '${f.t}' frame`);
}

function stringByte(f: Extract<Frame, { t: 'S' }>, up: ParseStack | null, b: number, out: ParseStack[]): void {
  const push = (next: Frame): void => { out.push({ f: next, up }); };
  if (f.esc === 1) {
    if (SIMPLE_ESCAPES.has(b)) push({ ...f, esc: 0, len: f.len + 1 });
    else if (b === 0x75) push({ ...f, esc: 2 });
    return;
  }
  if (f.esc >= 2) {
    if (isHex(b)) push(f.esc === 5 ? { ...f, esc: 0, len: f.len + 1 } : { ...f, esc: f.esc + 1 });
    return;
  }
  if (f.utf8 > 0) {
    const next = utf8Continue(f.utf8, b);
    if (next >= 0) push({ ...f, utf8: next });
    return;
  }
  if (b === QUOTE) {
    if (f.len >= f.node.minLength) out.push(valueDone(up));
    return;
  }
  if (f.len >= f.node.maxLength || b < 0x20) return;
  if (b === BACKSLASH) return push({ ...f, esc: 1 });
  if (b < 0x80) return push({ ...f, len: f.len + 1 });
  const due = utf8Lead(b);
  if (due > 0) push({ ...f, len: f.len + 1, utf8: due });
}

/**
 * Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as a state: the continuation
 * bytes still due, 1–3 of any (0x80–0xBF), or 4–7 where the first of them has a narrower range (after E0:
 * A0–BF, ED: 80–9F, F0: 90–BF, F4: 80–8F; then 1, 1, 2, 2 more of any).
 */
const UTF8_FIRST: readonly (readonly [number, number, number])[] = [[0xa0, 0xbf, 1], [0x80, 0x9f, 1], [0x90, 0xbf, 2], [0x80, 0x8f, 2]];

/** The state after lead byte b (0: b leads nothing — an ASCII byte, a stray continuation, C0, C1, F5–FF). */
export function utf8Lead(b: number): number {
  if (b >= 0xc2 && b <= 0xdf) return 1;
  if (b === 0xe0) return 4;
  if (b === 0xed) return 5;
  if (b >= 0xe1 && b <= 0xef) return 2;
  if (b === 0xf0) return 6;
  if (b === 0xf4) return 7;
  if (b >= 0xf1 && b <= 0xf3) return 3;
  return 0;
}

/** The state after continuation byte b in state `due` (> 0), or −1 where b may not come. */
export function utf8Continue(due: number, b: number): number {
  if (due >= 4) {
    const [lo, hi, rest] = UTF8_FIRST[due - 4]!;
    return b >= lo && b <= hi ? rest : -1;
  }
  return b >= 0x80 && b <= 0xbf ? due - 1 : -1;
}

function numberByte(f: Extract<Frame, { t: 'N' }>, up: ParseStack | null, b: number, out: ParseStack[]): void {
  const push = (next: Extract<Frame, { t: 'N' }>) => {
    if (integerFeasible(next)) out.push({ f: next, up });
  };
  const fraction = !f.node.integer;
  switch (f.phase) {
    case 'sign':
      if (isDigit(b)) push({ ...f, phase: b === 0x30 ? 'zero' : 'int', digits: String.fromCharCode(b) });
      return;
    case 'zero':
    case 'int':
      if (isDigit(b) && f.phase === 'int' && f.digits.length < MAX_INTEGER_DIGITS) push({ ...f, digits: f.digits + String.fromCharCode(b) });
      else if (fraction && b === DOT) push({ ...f, phase: 'dot' });
      else if (fraction && (b === 0x65 || b === 0x45)) push({ ...f, phase: 'exp' });
      break;
    case 'dot':
      if (isDigit(b)) push({ ...f, phase: 'frac', frac: 1 });
      return;
    case 'frac':
      if (isDigit(b) && f.frac < MAX_FRACTION_DIGITS) push({ ...f, frac: f.frac + 1 });
      else if (b === 0x65 || b === 0x45) push({ ...f, phase: 'exp' });
      break;
    case 'exp':
      if (b === PLUS || b === MINUS) push({ ...f, phase: 'expSign' });
      else if (isDigit(b)) push({ ...f, phase: 'expDigits', exp: 1 });
      return;
    case 'expSign':
      if (isDigit(b)) push({ ...f, phase: 'expDigits', exp: 1 });
      return;
    case 'expDigits':
      if (isDigit(b) && f.exp < MAX_EXPONENT_DIGITS) push({ ...f, exp: f.exp + 1 });
      break;
  }
  // The number may end here, b then belongs to what encloses it (a digit or '.' never does: no double parse).
  if (numberEnds(f)) advance(valueDone(up), b, out);
}

/** A number may end after what it has (and, for a bounded integer, lies within its bounds). */
function numberEnds(f: Extract<Frame, { t: 'N' }>): boolean {
  if (f.phase !== 'zero' && f.phase !== 'int' && f.phase !== 'frac' && f.phase !== 'expDigits') return false;
  const { minimum, maximum } = f.node;
  if (minimum === null && maximum === null) return true;
  const value = (f.neg ? -1n : 1n) * BigInt(f.digits);
  return (minimum === null || value >= minimum) && (maximum === null || value <= maximum);
}

/** Some integer starting with f's sign and digits (at most MAX_INTEGER_DIGITS of them) lies within f.node's bounds. */
function integerFeasible(f: Extract<Frame, { t: 'N' }>): boolean {
  const { minimum, maximum } = f.node;
  if (minimum === null && maximum === null) return true;
  const sign = f.neg ? -1n : 1n;
  const fits = (lo: bigint, hi: bigint) => (minimum === null || hi >= minimum) && (maximum === null || lo <= maximum);
  // Magnitudes with these digits as a prefix: [D·10^k, D·10^k + 10^k − 1] for k more digits ("0" takes none).
  const ranges: [bigint, bigint][] = [];
  if (f.digits === '') {
    ranges.push([1n, 10n ** BigInt(MAX_INTEGER_DIGITS) - 1n]);
  } else {
    const d = BigInt(f.digits);
    const extra = f.digits === '0' ? 0 : MAX_INTEGER_DIGITS - f.digits.length;
    for (let k = 0, p = 1n; k <= extra; k++, p *= 10n) ranges.push([d * p, d * p + p - 1n]);
  }
  return ranges.some(([lo, hi]) => (sign > 0n ? fits(lo, hi) : fits(-hi, -lo)));
}

function objectByte(f: Extract<Frame, { t: 'O' }>, up: ParseStack | null, b: number, out: ParseStack[]): void {
  const node = f.node;
  if (isWhitespace(b)) {
    const ws = whitespaceAfter(f.ws, b);
    if (ws >= 0) out.push({ f: { ...f, ws }, up });
    return;
  }
  switch (f.phase) {
    case 'open':
    case 'after':
      if (b === RBRACE && !requiredFrom(node.properties, f.next)) out.push(valueDone(up));
      else if (f.phase === 'open' && b === QUOTE) startKey(f, up, out);
      else if (f.phase === 'after' && b === COMMA && (f.next < node.properties.length || node.additional !== null)) out.push({ f: { ...f, phase: 'comma', ws: 0 }, up });
      return;
    case 'comma':
      if (b === QUOTE) startKey(f, up, out);
      return;
    case 'colon':
      if (b === COLON) {
        const value = f.pending >= 0 ? node.properties[f.pending]!.value : node.additional!;
        out.push({ f: { t: 'V', node: value, ws: 0 }, up: { f: { ...f, phase: 'value' }, up } });
      }
      return;
    default:
      throw new Error(`internal: an object frame in phase '${f.phase}' read a byte`);
  }
}

/**
 * A key's opening quote read: the listed properties from f.next on, up to and including the first required
 * one (the ones before it are optional and may be skipped), then any other key where additional ones are allowed.
 */
function startKey(f: Extract<Frame, { t: 'O' }>, up: ParseStack | null, out: ParseStack[]): void {
  const { properties, additional } = f.node;
  for (let j = f.next; j < properties.length; j++) {
    out.push({ f: { t: 'L', bytes: properties[j]!.key, i: 1 }, up: { f: { ...f, phase: 'key', pending: j, next: j + 1, ws: 0 }, up } });
    if (properties[j]!.required) return;
  }
  if (additional !== null) out.push({ f: { t: 'S', node: ANY_STRING, len: 0, esc: 0, utf8: 0 }, up: { f: { ...f, phase: 'key', pending: -1, next: properties.length, ws: 0 }, up } });
}

function requiredFrom(properties: readonly PropertyRule[], next: number): boolean {
  for (let j = next; j < properties.length; j++) if (properties[j]!.required) return true;
  return false;
}

function arrayByte(f: Extract<Frame, { t: 'A' }>, up: ParseStack | null, b: number, out: ParseStack[]): void {
  const node = f.node;
  if (isWhitespace(b)) {
    const ws = whitespaceAfter(f.ws, b);
    if (ws >= 0) out.push({ f: { ...f, ws }, up });
    return;
  }
  const item = f.count < node.maxItems ? (node.prefix[f.count] ?? node.items) : null;
  switch (f.phase) {
    case 'open':
      if (b === RBRACKET && node.minItems === 0) out.push(valueDone(up));
      else if (item) startValue(item, { f: { ...f, phase: 'value' }, up }, b, out, 0);
      return;
    case 'after':
      if (b === RBRACKET && f.count >= node.minItems) out.push(valueDone(up));
      else if (b === COMMA && item) out.push({ f: { ...f, phase: 'comma', ws: 0 }, up });
      return;
    case 'comma':
      if (item) startValue(item, { f: { ...f, phase: 'value' }, up }, b, out, 0);
      return;
    default:
      throw new Error(`internal: an array frame in phase '${f.phase}' read a byte`);
  }
}

/** A matcher for one text: bytes in, whether they fit; what may end it. */
export class JsonMatcher {
  private states: ParseStack[];

  constructor(root: GrammarNode) {
    this.states = initialStates(root);
  }

  get current(): readonly ParseStack[] { return this.states; }

  /** Takes the bytes if they all fit (true), else leaves the state as it was (false). */
  push(bytes: Uint8Array): boolean {
    const next = advanceBytes(this.states, bytes);
    if (!next) return false;
    this.states = next;
    return true;
  }

  get accepting(): boolean { return isAccepting(this.states); }
  get finished(): boolean { return isFinished(this.states); }
}
