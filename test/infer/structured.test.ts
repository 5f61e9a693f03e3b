// Structured outputs' grammar: JSON Schemas compiled (and refused by keyword), the byte matcher against
// JSON.parse and an independent validator on random documents both ways — text the grammar lets a random
// walk write always parses and validates; valid documents, however they are spaced, are always taken — and
// token masks against a token-by-token check over GPT-2's vocabulary.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gpt2TokenizerConfig, gpt2TokenizerJson } from '../../src/io/gpt2-tokenizer-json.js';
import { tokenByteTable } from '../../src/io/token-bytes.js';
import { createTokenizer } from '../../src/io/tokenizer.js';
import { anyJsonObject, compileJsonSchema, SchemaError } from '../../src/infer/structured/json-schema.js';
import type { GrammarNode } from '../../src/infer/structured/json-schema.js';
import { advanceAll, advanceBytes, initialStates, isAccepting, isFinished, JsonMatcher, MAX_INDENT } from '../../src/infer/structured/json-matcher.js';
import type { ParseStack } from '../../src/infer/structured/json-matcher.js';
import { JsonConstraint, maskAllows, TokenVocabulary } from '../../src/infer/structured/token-mask.js';
import { TriggeredConstraint } from '../../src/infer/structured/triggered.js';

const utf8 = new TextEncoder();

/** A small PRNG (mulberry32) so failures reproduce. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Schema = Record<string, unknown>;

const PERSON: Schema = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 150 },
    email: { type: 'string' },
    tags: { type: 'array', items: { enum: ['a', 'b', 'c d', 1, null] }, minItems: 1, maxItems: 3 },
    address: { $ref: '#/$defs/Address' },
    score: { type: ['number', 'null'] },
  },
  required: ['name', 'age', 'tags'],
  additionalProperties: false,
  $defs: {
    Address: { type: 'object', properties: { city: { type: 'string' }, zip: { anyOf: [{ type: 'string', maxLength: 5 }, { type: 'integer', exclusiveMinimum: -10, exclusiveMaximum: 99999 }] } }, required: ['city'] },
  },
};

const TREE: Schema = {
  $ref: '#/$defs/Node',
  $defs: { Node: { type: 'object', properties: { v: { type: 'boolean' }, kids: { type: 'array', items: { $ref: '#/$defs/Node' }, maxItems: 2 } }, required: ['v'] } },
};

const TUPLE: Schema = { type: 'array', prefixItems: [{ type: 'integer', minimum: -5, maximum: 5 }, { const: { k: [1, 'x'] } }], items: false, minItems: 1 };

/** An independent check of a parsed value against the schema subset (what the grammar must guarantee). */
function validates(value: unknown, schema: unknown, root: Schema): boolean {
  if (schema === true) return true;
  const s = schema as Schema;
  if (s['$ref'] !== undefined) {
    const path = (s['$ref'] as string).slice(2).split('/');
    return validates(value, path.reduce<unknown>((o, k) => (o as Schema)[k], root), root);
  }
  if (s['anyOf']) return (s['anyOf'] as unknown[]).some((x) => validates(value, x, root));
  if (s['const'] !== undefined) return JSON.stringify(value) === JSON.stringify(s['const']);
  if (s['enum']) return (s['enum'] as unknown[]).some((x) => JSON.stringify(x) === JSON.stringify(value));
  const types = s['type'] === undefined ? null : ([] as unknown[]).concat(s['type']);
  const typeOf = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v);
  const t = typeOf(value);
  if (types && !types.includes(t) && !(t === 'integer' && types.includes('number'))) return false;
  if (t === 'integer' && types?.includes('integer')) {
    const v = value as number;
    if ((s['minimum'] !== undefined && v < (s['minimum'] as number)) || (s['maximum'] !== undefined && v > (s['maximum'] as number))) return false;
    if ((s['exclusiveMinimum'] !== undefined && v <= (s['exclusiveMinimum'] as number)) || (s['exclusiveMaximum'] !== undefined && v >= (s['exclusiveMaximum'] as number))) return false;
  }
  if (t === 'string') {
    const n = [...(value as string)].length;
    if ((s['minLength'] !== undefined && n < (s['minLength'] as number)) || (s['maxLength'] !== undefined && n > (s['maxLength'] as number))) return false;
  }
  if (t === 'array') {
    const a = value as unknown[], prefix = (s['prefixItems'] as unknown[] | undefined) ?? [];
    if ((s['minItems'] !== undefined && a.length < (s['minItems'] as number)) || (s['maxItems'] !== undefined && a.length > (s['maxItems'] as number))) return false;
    if (s['items'] === false && a.length > prefix.length) return false;
    return a.every((x, i) => validates(x, i < prefix.length ? prefix[i] : (s['items'] ?? true), root));
  }
  if (t === 'object') {
    const o = value as Schema, props = (s['properties'] as Schema | undefined) ?? {};
    if (((s['required'] as string[] | undefined) ?? []).some((k) => !(k in o))) return false;
    for (const [k, v] of Object.entries(o)) {
      if (k in props) { if (!validates(v, props[k], root)) return false; }
      else if (s['additionalProperties'] === undefined || s['additionalProperties'] === false) return false;
      else if (!validates(v, s['additionalProperties'], root)) return false;
    }
  }
  return true;
}

/** Text written by a random walk over the bytes the grammar allows (printable ASCII and a few UTF-8 lead/continuation bytes). */
function randomText(grammar: GrammarNode, random: () => number, maxBytes = 400): { text: Uint8Array; complete: boolean } {
  const alphabet = [...Array.from({ length: 95 }, (_, i) => 32 + i), 0x0a, 0x09, 0xc3, 0xa9, 0xe2, 0x82, 0xac];
  let states: ParseStack[] = initialStates(grammar);
  const out: number[] = [];
  while (out.length < maxBytes) {
    if (isFinished(states) || (isAccepting(states) && random() < 0.3)) return { text: Uint8Array.from(out), complete: true };
    const options = alphabet.map((b) => [b, advanceAll(states, b)] as const).filter(([, next]) => next.length > 0);
    assert.ok(options.length > 0, `the grammar leaves no byte after ${JSON.stringify(new TextDecoder().decode(Uint8Array.from(out)))}`);
    // Favour closing brackets and quotes as the text grows, so walks end.
    const closers = options.filter(([b]) => b === 0x7d || b === 0x5d || b === 0x22);
    const pick = closers.length > 0 && random() < out.length / maxBytes ? closers[Math.floor(random() * closers.length)]! : options[Math.floor(random() * options.length)]!;
    out.push(pick[0]);
    states = pick[1];
  }
  return { text: Uint8Array.from(out), complete: false };
}

test('text the grammar lets a random walk write parses as JSON and fits the schema', () => {
  const random = rng(7);
  for (const [name, schema] of Object.entries({ PERSON, TREE, TUPLE })) {
    const grammar = compileJsonSchema(schema);
    let complete = 0;
    for (let i = 0; i < 150; i++) {
      const { text, complete: done } = randomText(grammar, random);
      if (!done) continue;
      complete++;
      const s = new TextDecoder('utf-8', { fatal: true }).decode(text);
      let value: unknown;
      assert.doesNotThrow(() => { value = JSON.parse(s); }, `${name}: ${s}`);
      assert.ok(validates(value, schema, schema), `${name}: ${s} does not fit the schema`);
    }
    assert.ok(complete >= 50, `${name}: only ${complete} walks ended`);
  }
});

test('valid documents are taken however they are spaced; changed ones are refused', () => {
  const person = compileJsonSchema(PERSON);
  const accepts = (grammar: GrammarNode, text: string) => {
    const m = new JsonMatcher(grammar);
    return m.push(utf8.encode(text)) && m.accepting;
  };
  const docs = [
    { name: 'Ann', age: 30, tags: ['a'] },
    { name: 'Émile €', age: 0, email: 'x\n"y"', tags: [1, null, 'c d'], address: { city: 'Oslo', zip: '0150' }, score: -1.5e3 },
    { name: 'B', age: 150, tags: ['b'], address: { city: '', zip: 99998 }, score: null },
    { name: 'B', age: 7, tags: ['b'], address: { city: 'x', zip: -9 } },
  ];
  for (const doc of docs) {
    for (const spacing of [undefined, 2, '\t']) assert.ok(accepts(person, JSON.stringify(doc, null, spacing)), JSON.stringify(doc, null, spacing));
  }
  assert.ok(accepts(person, '{"name":"\\u00e9\\"","age":1,"tags":["a"]}'));
  assert.ok(accepts(person, `{\n${' '.repeat(MAX_INDENT)}"name": "Ann",\n\t"age": 30, "tags": [\n"a"\n]\n}`));
  const refused = [
    '{"age": 30, "name": "Ann", "tags": ["a"]}', // out of the schema's order
    '{"name": "Ann", "tags": ["a"]}', // a required property missing
    '{"name": "Ann", "age": 30, "tags": ["a"], "x": 1}', // no additional properties
    '{"name": "", "age": 30, "tags": ["a"]}', // minLength 1
    '{"name": "Annabelle Smith", "age": 30, "tags": ["a"]}', // maxLength 12
    '{"name": "Ann", "age": 151, "tags": ["a"]}', // maximum 150
    '{"name": "Ann", "age": -1, "tags": ["a"]}', // minimum 0
    '{"name": "Ann", "age": 30.5, "tags": ["a"]}', // integer
    '{"name": "Ann", "age": 30, "tags": []}', // minItems 1
    '{"name": "Ann", "age": 30, "tags": ["a", "b", "a", "b"]}', // maxItems 3
    '{"name": "Ann", "age": 30, "tags": ["e"]}', // enum
    '{"name": "Ann", "age": 30, "tags": ["a"], "address": {"zip": "1"}}', // required city
    '{"name": "Ann", "age": 30, "tags": ["a"], "address": {"city": "x", "zip": 99999}}', // exclusiveMaximum
    '{"name": "Ann", "age": 30, "tags": ["a"]} x', // text after the value
    '{"name": "A\u0001", "age": 30, "tags": ["a"]}', // a control character in a string
    '{"name": "A\\q", "age": 30, "tags": ["a"]}', // not an escape
    '{"name": "Ann", "age": 030, "tags": ["a"]}', // a leading zero
    `{\n${' '.repeat(MAX_INDENT + 1)}"name": "Ann", "age": 30, "tags": ["a"]}`, // too much indentation
    '{"name":  "Ann", "age": 30, "tags": ["a"]}', // two spaces
    '{"name": "Ann", \n"age": 30, "tags": ["a"]}', // a space before a newline
    '{\n\n"name": "Ann", "age": 30, "tags": ["a"]}', // two newlines in a row
    '{\r\n"name": "Ann", "age": 30, "tags": ["a"]}', // a carriage return
  ];
  for (const text of refused) assert.ok(!accepts(person, text), text);
  // Bytes that are not well-formed UTF-8 inside a string.
  const m = new JsonMatcher(person);
  assert.ok(m.push(utf8.encode('{"name": "')));
  assert.equal(m.push(Uint8Array.of(0x80)), false);
  assert.equal(m.push(Uint8Array.of(0xc3, 0x41)), false);
  assert.ok(m.push(Uint8Array.of(0xc3, 0xa9)));
  // Overlong forms, surrogates and code points past U+10FFFF are not well-formed UTF-8.
  for (const bad of [[0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf0, 0x80, 0x80, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xc0, 0x80], [0xf5]]) assert.equal(m.push(Uint8Array.from(bad)), false, bad.join(' '));
  for (const good of [[0xe0, 0xa0, 0x80], [0xed, 0x9f, 0xbf], [0xf0, 0x90, 0x80, 0x80], [0xf4, 0x8f, 0xbf, 0xbf], [0xef, 0xbf, 0xbf]]) assert.ok(m.push(Uint8Array.from(good)), good.join(' '));

  const any = anyJsonObject();
  assert.ok(accepts(any, '{"a": [1, {"b": null}, "x", true, -0.5e-7], "a": {}}'));
  assert.ok(!accepts(any, '[1]'), 'json_object mode takes objects only');
  assert.ok(!accepts(any, '{"a": 1,}'), 'no trailing comma');
  assert.ok(!accepts(any, '{"a": 01}'));
  const tuple = compileJsonSchema(TUPLE);
  assert.ok(accepts(tuple, '[-5, {"k": [1, "x"]}]') && accepts(tuple, '[5]') && !accepts(tuple, '[6]') && !accepts(tuple, '[1, {"k": [1, "x"]}, 2]') && !accepts(tuple, '[]'));
});

test('a top-level number may end where the text ends, yet still grow; an object is finished at its brace', () => {
  const number = new JsonMatcher(compileJsonSchema({ type: 'integer', minimum: 10, maximum: 999 }));
  assert.ok(number.push(utf8.encode('1')));
  assert.equal(number.accepting, false, '1 is below the minimum: not yet complete');
  assert.ok(number.push(utf8.encode('2')));
  assert.equal(number.accepting, true);
  assert.equal(number.finished, false);
  assert.equal(number.push(utf8.encode('0000')), false, '120000 is past the maximum');
  const object = new JsonMatcher(compileJsonSchema({ type: 'object', properties: { a: { type: 'null' } } }));
  assert.ok(object.push(utf8.encode('{}')));
  assert.ok(object.finished && object.accepting);
  assert.equal(object.push(utf8.encode(' ')), false);
});

test('schemas are refused by the keyword that cannot be enforced, with its path', () => {
  const refuse = (schema: unknown, pattern: RegExp) => assert.throws(() => compileJsonSchema(schema), (e: unknown) => e instanceof SchemaError && pattern.test(e.message));
  refuse({ type: 'string', pattern: '^a' }, /#\/pattern: the keyword 'pattern' is not supported/);
  refuse({ type: 'object', properties: { d: { type: 'string', format: 'date' } } }, /#\/properties\/d\/format/);
  refuse({ type: 'number', minimum: 0 }, /#\/minimum: 'minimum' is enforced on integers only/);
  refuse({ minimum: 0 }, /needs|without "type": "integer"/);
  refuse({ type: 'strnig' }, /not a JSON Schema type/);
  refuse({ $ref: 'https://example.com/s.json' }, /other documents are not fetched/);
  refuse({ $ref: '#/$defs/Missing' }, /points at nothing/);
  refuse({ $ref: '#/$defs/A', $defs: { A: { anyOf: [{ $ref: '#/$defs/A' }, { type: 'null' }] } } }, /refers to itself without an object or array/);
  refuse({ type: 'object', properties: { a: {} }, required: ['b'] }, /required: names 'b'/);
  refuse({ type: 'integer', minimum: 5, maximum: 4 }, /no integer lies between/);
  refuse({ type: 'array', minItems: 3, maxItems: 2 }, /minItems 3 is above/);
  refuse({ allOf: [{ type: 'string' }, { maxLength: 3 }] }, /allOf of exactly one/);
  refuse(false, /no value fits/);
  refuse('object', /a schema is an object/);
  // A recursive schema through an object is fine.
  assert.doesNotThrow(() => compileJsonSchema(TREE));
});

test('token masks over GPT-2\'s vocabulary equal a token-by-token check, the free-string shortcut included', () => {
  const tokenizer = createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'gpt2');
  const table = tokenByteTable(tokenizer, tokenizer.vocabSize + 7); // a model vocabulary padded past the tokenizer's
  assert.equal(table[50256], null, '<|endoftext|> adds no text');
  assert.equal(table[50257], null);
  assert.deepEqual(table[262], utf8.encode(' the'));
  const vocabulary = new TokenVocabulary(table);
  const grammar = compileJsonSchema(PERSON);
  const prefixes = ['', '{', '{"', '{"na', '{"name": "Jo', '{"name": "Jo', '{"name":"x","age":1', '{"name":"x","age":15,', '{"name":"x","age":15,"tags":[',
    '{"name":"x","age":1,"email":"abc', '{"name":"x","age":1,"email":"\u00e9', '{"name":"x","age":1,"email":"\\u00', '{"name":"x","age":1,"tags":["a"]'];
  for (const prefix of prefixes) {
    const states = advanceBytes(initialStates(grammar), utf8.encode(prefix));
    assert.ok(states, prefix);
    const mask = vocabulary.allowed(states);
    let allowed = 0;
    for (let t = 0; t < table.length; t++) {
      const expected: boolean = table[t] !== null && advanceBytes(states, table[t]!) !== null;
      assert.equal(maskAllows(mask, t), expected, `after ${JSON.stringify(prefix)}: token ${t} ${JSON.stringify(tokenizer.decode([Math.min(t, 50256)]))}`);
      if (expected) allowed++;
    }
    assert.ok(allowed > 0, prefix);
  }
  // Inside a free string in the middle of a character: only tokens that go on with it.
  for (const lead of [[0xc3], [0xe0], [0xed], [0xe2, 0x82], [0xf0], [0xf4, 0x8f]]) {
    const split = advanceBytes(initialStates(grammar), Uint8Array.from([...utf8.encode('{"name":"x","age":1,"email":"'), ...lead]))!;
    const mask = vocabulary.allowed(split);
    for (let t = 0; t < table.length; t++) assert.equal(maskAllows(mask, t), table[t] !== null && advanceBytes(split, table[t]!) !== null, `after ${lead.join(' ')}: token ${t}`);
  }
});

test('a JsonConstraint allows the stop tokens once the value is complete and ends at the closing brace; reasoning comes first unmasked', () => {
  const tokenizer = createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'gpt2');
  const vocabulary = new TokenVocabulary(tokenByteTable(tokenizer, tokenizer.vocabSize));
  const eos = 50256;
  const ids = (text: string) => tokenizer.encode(text);
  const number = new JsonConstraint(compileJsonSchema({ type: 'integer' }), vocabulary, [eos]);
  assert.equal(maskAllows(number.allowedTokens()!, eos), false, 'nothing written yet');
  for (const t of ids('42')) number.accept(t);
  assert.ok(maskAllows(number.allowedTokens()!, eos) && !number.complete);
  const object = new JsonConstraint(anyJsonObject(), vocabulary, [eos]);
  for (const t of ids('{"a": [1, "b"]')) {
    assert.ok(maskAllows(object.allowedTokens()!, t));
    object.accept(t);
  }
  assert.equal(maskAllows(object.allowedTokens()!, eos), false);
  object.accept(ids('}')[0]!);
  assert.ok(object.complete);
  assert.throws(() => object.accept(ids(' ')[0]!), /does not fit/);
  // Reasoning between two marker tokens (here: any two ids) before the JSON: no mask until the close.
  const [open, close] = [ids('<')[0]!, ids('>')[0]!];
  const thinking = new JsonConstraint(anyJsonObject(), vocabulary, [eos], { open, close, opensItself: true });
  assert.ok(maskAllows(thinking.allowedTokens()!, open) && maskAllows(thinking.allowedTokens()!, ids('{')[0]!) && !maskAllows(thinking.allowedTokens()!, ids('x')[0]!));
  thinking.accept(open);
  assert.equal(thinking.allowedTokens(), null);
  for (const t of ids('hmm, x')) thinking.accept(t);
  thinking.accept(close);
  assert.equal(maskAllows(thinking.allowedTokens()!, ids('x')[0]!), false);
  assert.ok(maskAllows(thinking.allowedTokens()!, ids('{')[0]!));
});

test('a triggered constraint: free text until <tool_call>, then the call held to its grammar up to </tool_call>, then free again', () => {
  const tokenizer = createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'gpt2');
  const table = tokenByteTable(tokenizer, tokenizer.vocabSize);
  const vocabulary = new TokenVocabulary(table);
  const call = compileJsonSchema({ type: 'object', properties: { name: { const: 'f' }, arguments: { type: 'object', properties: { n: { type: 'integer', maximum: 9 } }, required: ['n'] } }, required: ['name', 'arguments'] });
  const body: GrammarNode = { kind: 'sequence', parts: [{ kind: 'literal', bytes: utf8.encode('\n') }, call, { kind: 'literal', bytes: utf8.encode('\n</tool_call>') }] };
  const c = new TriggeredConstraint(utf8.encode('<tool_call>'), body, vocabulary);
  const feed = (text: string) => { for (const t of tokenizer.encode(text)) { const m = c.allowedTokens(); assert.ok(m === null || maskAllows(m, t), `${JSON.stringify(text)}: token ${t}`); c.accept(t); } };
  // GPT-2 has no token holding the whole trigger: nothing is masked in free text.
  assert.equal(c.allowedTokens(), null);
  feed('Let me check. <tool_call');
  // Part way through the trigger: the tokens that would complete it and go on wrongly are left out, the rest allowed.
  const partial = c.allowedTokens()!;
  assert.ok(partial !== null);
  let left = 0;
  for (let t = 0; t < table.length; t++) {
    const text = table[t] ? Buffer.from(table[t]!).toString('latin1') : '';
    const wrong = text.startsWith('>') && text.length > 1 && text[1] !== '\n';
    assert.equal(maskAllows(partial, t), !wrong, JSON.stringify(text)); // special tokens (no text) too: EOS may end free text
    if (wrong) left++;
  }
  assert.ok(left > 0);
  feed('>');
  // Inside the call: only its grammar.
  const inside = c.allowedTokens()!;
  assert.ok(maskAllows(inside, tokenizer.encode('\n')[0]!) && !maskAllows(inside, tokenizer.encode('x')[0]!));
  feed('\n{"name": "f", "arguments": {"n": 7');
  assert.equal(maskAllows(c.allowedTokens()!, tokenizer.encode('0')[0]!), false, 'n ≤ 9');
  feed('}}\n</tool_call>');
  assert.equal(c.allowedTokens(), null, 'free text again');
  feed(' Done, and more text.');
  assert.equal(c.complete, false);
});

test('allows(token) says what the mask says, without making it (the engine\'s check of a greedy pick)', () => {
  const tokenizer = createTokenizer(gpt2TokenizerJson(), gpt2TokenizerConfig(), 'gpt2');
  const vocabulary = new TokenVocabulary(tokenByteTable(tokenizer, tokenizer.vocabSize));
  const grammar = compileJsonSchema(PERSON), eos = 50256;
  const checked = new JsonConstraint(grammar, vocabulary, [eos]), masked = new JsonConstraint(grammar, vocabulary, [eos]);
  const sample = Array.from({ length: 3000 }, (_, i) => (i * 7919) % 50257);
  for (const t of tokenizer.encode('{"name": "Jo", "age": 41, "tags": ["a", null], "score": 2.5}')) {
    const mask = masked.allowedTokens()!;
    for (const s of [...sample, t, eos]) assert.equal(checked.allows(s), maskAllows(mask, s), `token ${s}`);
    checked.accept(t);
    masked.accept(t);
  }
  assert.ok(checked.complete && masked.complete);
});
