// A JSON Schema compiled into the grammar the byte matcher runs (json-matcher.ts): structured outputs, the
// OpenAI API's response_format {"type": "json_schema"} and {"type": "json_object"}.
//
// What is enforced, token by token, is exactly what the grammar below can say; every other keyword is refused
// by name (SchemaError, with its path in the schema), never ignored — an ignored "pattern" or "minimum" would
// hand back JSON the caller's own validator rejects.
//
//   type                 "object", "array", "string", "number", "integer", "boolean", "null", or a list of them
//   object               properties (written in the schema's order, as xgrammar does), required,
//                        additionalProperties (absent or false: no other keys, as OpenAI's strict mode asks;
//                        true or a schema: other keys after the listed ones)
//   array                items (a schema, or false), prefixItems, minItems, maxItems
//   string               minLength, maxLength (in characters; an escape counts as one)
//   integer              minimum, maximum, exclusiveMinimum, exclusiveMaximum (integers only)
//   enum, const          any JSON values: strings, numbers, true / false / null as JSON.stringify writes them,
//                        objects and arrays as their structure (keys in the value's order, any spacing)
//   anyOf, oneOf         alternatives (oneOf's "exactly one" is not checked: the alternatives of real schemas —
//                        pydantic's unions — rarely overlap, and where they do the first one that fits is what
//                        was generated); allOf with a single schema
//   $ref                 "#", "#/$defs/…", "#/definitions/…" (recursion allowed)
//   annotations          title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
//                        writeOnly, discriminator (read as a note: the alternatives themselves decide)
//
// Numbers are written in JSON's grammar with at most MAX_INTEGER_DIGITS digits before the point and
// MAX_FRACTION_DIGITS after it (a model that repeats a digit would otherwise never end the number).

import { FuseformerError } from '../../errors.js';

export class SchemaError extends FuseformerError {
  constructor(readonly path: string, message: string) {
    super(`${path}: ${message}`);
  }
}

/** A node of the grammar (a directed graph: a recursive $ref points back at an ancestor). */
export type GrammarNode =
  | { readonly kind: 'any' }
  | { readonly kind: 'object'; readonly properties: readonly PropertyRule[]; readonly additional: GrammarNode | null }
  | { readonly kind: 'array'; readonly prefix: readonly GrammarNode[]; readonly items: GrammarNode | null; readonly minItems: number; readonly maxItems: number }
  | { readonly kind: 'string'; readonly minLength: number; readonly maxLength: number }
  | { readonly kind: 'number'; readonly integer: boolean; readonly minimum: bigint | null; readonly maximum: bigint | null }
  | { readonly kind: 'literal'; readonly bytes: Uint8Array }
  | { readonly kind: 'anyOf'; readonly options: readonly GrammarNode[] }
  /** Parts one after another with nothing between them (a tool call's tags around its JSON; never from a schema). */
  | { readonly kind: 'sequence'; readonly parts: readonly GrammarNode[] }
  | RefNode;

/** A $ref, resolved once its target is compiled (the target may be an ancestor still being compiled). */
export interface RefNode {
  readonly kind: 'ref';
  target: GrammarNode | null;
  readonly name: string;
}

export interface PropertyRule {
  readonly name: string;
  /** The key as written: JSON.stringify(name)'s UTF-8 bytes, quotes included. */
  readonly key: Uint8Array;
  readonly value: GrammarNode;
  readonly required: boolean;
}

export const MAX_INTEGER_DIGITS = 20;
export const MAX_FRACTION_DIGITS = 20;
export const MAX_EXPONENT_DIGITS = 3;

const ANY: GrammarNode = { kind: 'any' };
const ANNOTATIONS = new Set(['title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly', 'discriminator', '$defs', 'definitions']);
const TYPES = ['object', 'array', 'string', 'number', 'integer', 'boolean', 'null'] as const;
type TypeName = (typeof TYPES)[number];
/** Keywords each type reads (beside the annotations, type, enum, const and the combinators). */
const TYPE_KEYWORDS: Readonly<Record<TypeName, readonly string[]>> = {
  object: ['properties', 'required', 'additionalProperties'],
  array: ['items', 'prefixItems', 'minItems', 'maxItems'],
  string: ['minLength', 'maxLength'],
  integer: ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'],
  number: [],
  boolean: [],
  null: [],
};
const COMBINATORS = ['anyOf', 'oneOf', 'allOf', '$ref'];

const utf8 = new TextEncoder();
const describe = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `${typeof v} ${JSON.stringify(v)}`);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Fixed bytes (text around a JSON value, such as a tool call's tags). */
export function textLiteral(text: string): GrammarNode {
  return { kind: 'literal', bytes: utf8.encode(text) };
}

/** An object of exactly these properties, all required, in this order. */
export function objectOf(properties: readonly (readonly [string, GrammarNode])[]): GrammarNode {
  return { kind: 'object', properties: properties.map(([name, value]) => ({ name, key: utf8.encode(JSON.stringify(name)), value, required: true })), additional: null };
}

/** Any JSON object (response_format {"type": "json_object"}): keys and values unconstrained. */
export function anyJsonObject(): GrammarNode {
  return { kind: 'object', properties: [], additional: ANY };
}

/** Compiles a JSON Schema (an object, or true for any value); SchemaError names the first problem and its path. */
export function compileJsonSchema(schema: unknown): GrammarNode {
  const compiler = new SchemaCompiler(schema);
  const root = compiler.compile(schema, '#');
  for (const ref of compiler.references()) refuseEmptyCycle(ref);
  return root;
}

/** A reference that reaches itself through references and alternatives alone would describe no finite text. */
function refuseEmptyCycle(start: RefNode): void {
  const seen = new Set<GrammarNode>();
  const visit = (node: GrammarNode): void => {
    if (node === start && seen.size > 0) throw new SchemaError(start.name, 'refers to itself without an object or array in between, so no text fits it');
    if (seen.has(node)) return;
    seen.add(node);
    if (node.kind === 'ref') visit(node.target!);
    else if (node.kind === 'anyOf') node.options.forEach(visit);
  };
  visit(start.target!);
  if (start.target === start) throw new SchemaError(start.name, 'refers to itself');
}

class SchemaCompiler {
  private readonly refs = new Map<string, RefNode>();

  constructor(private readonly root: unknown) {}

  references(): IterableIterator<RefNode> {
    return this.refs.values();
  }

  compile(schema: unknown, path: string): GrammarNode {
    if (schema === true) return ANY;
    if (schema === false) throw new SchemaError(path, 'is false: no value fits it');
    if (!isObject(schema)) throw new SchemaError(path, `is ${describe(schema)}; a schema is an object (or true)`);
    for (const key of Object.keys(schema)) {
      if (ANNOTATIONS.has(key) || key === 'type' || key === 'enum' || key === 'const' || COMBINATORS.includes(key)) continue;
      if (!Object.values(TYPE_KEYWORDS).some((keys) => keys.includes(key))) throw new SchemaError(`${path}/${key}`, `the keyword '${key}' is not supported in structured outputs (${supportedList()})`);
    }
    if (schema['$ref'] !== undefined) {
      if (Object.keys(schema).some((k) => !ANNOTATIONS.has(k) && k !== '$ref')) throw new SchemaError(path, "'$ref' beside other keywords is not supported; put them in the referenced schema");
      return this.ref(schema['$ref'], `${path}/$ref`);
    }
    if (schema['allOf'] !== undefined) {
      const all = schema['allOf'];
      if (!Array.isArray(all) || all.length !== 1) throw new SchemaError(`${path}/allOf`, 'only an allOf of exactly one schema is supported');
      if (Object.keys(schema).some((k) => !ANNOTATIONS.has(k) && k !== 'allOf')) throw new SchemaError(path, "'allOf' beside other keywords is not supported");
      return this.compile(all[0], `${path}/allOf/0`);
    }
    for (const key of ['anyOf', 'oneOf'] as const) {
      if (schema[key] === undefined) continue;
      const list = schema[key];
      if (!Array.isArray(list) || list.length === 0) throw new SchemaError(`${path}/${key}`, `is ${describe(list)}; expected a non-empty array of schemas`);
      if (Object.keys(schema).some((k) => !ANNOTATIONS.has(k) && k !== key)) throw new SchemaError(path, `'${key}' beside other keywords is not supported; move them into each alternative`);
      return alternatives(list.map((s, i) => this.compile(s, `${path}/${key}/${i}`)));
    }
    if (schema['const'] !== undefined) return literal(schema['const'], `${path}/const`);
    if (schema['enum'] !== undefined) {
      const values = schema['enum'];
      if (!Array.isArray(values) || values.length === 0) throw new SchemaError(`${path}/enum`, `is ${describe(values)}; expected a non-empty array`);
      return alternatives(values.map((v, i) => literal(v, `${path}/enum/${i}`)));
    }
    const types = this.types(schema, path);
    const nodes = types.map((t) => this.typed(t, schema, path));
    return alternatives(nodes);
  }

  /** The types a schema allows: its "type" (one or a list), else what its keywords imply, else any. */
  private types(schema: Record<string, unknown>, path: string): TypeName[] {
    const type = schema['type'];
    if (type === undefined) {
      const implied = TYPES.filter((t) => TYPE_KEYWORDS[t].some((k) => schema[k] !== undefined));
      if (implied.length > 1) throw new SchemaError(path, `has keywords of several types (${implied.join(', ')}) and no "type"`);
      if (implied[0] === 'integer') throw new SchemaError(path, `'${TYPE_KEYWORDS.integer.find((k) => schema[k] !== undefined)}' without "type": "integer" (bounds are enforced on integers only)`);
      if (implied.length === 1) return implied;
      return [...TYPES.filter((t) => t !== 'integer')];
    }
    const list = Array.isArray(type) ? type : [type];
    if (list.length === 0) throw new SchemaError(`${path}/type`, 'is an empty list');
    for (const t of list) if (!(TYPES as readonly unknown[]).includes(t)) throw new SchemaError(`${path}/type`, `${describe(t)} is not a JSON Schema type (${TYPES.join(', ')})`);
    const names = list as TypeName[];
    const bound = TYPE_KEYWORDS.integer.find((k) => schema[k] !== undefined);
    if (bound && names.includes('number')) throw new SchemaError(`${path}/${bound}`, `'${bound}' is enforced on integers only, and "type" allows any number`);
    for (const key of Object.keys(schema)) {
      const owner = TYPES.find((t) => TYPE_KEYWORDS[t].includes(key));
      if (owner && !names.includes(owner)) throw new SchemaError(`${path}/${key}`, `'${key}' applies to type ${owner}, which "type" does not allow`);
    }
    return names;
  }

  private typed(type: TypeName, s: Record<string, unknown>, path: string): GrammarNode {
    switch (type) {
      case 'null': return literal(null, path);
      case 'boolean': return alternatives([literal(true, path), literal(false, path)]);
      case 'number': return { kind: 'number', integer: false, minimum: null, maximum: null };
      case 'integer': return this.integer(s, path);
      case 'string': {
        const minLength = count(s, 'minLength', path, 0), maxLength = count(s, 'maxLength', path, Infinity);
        if (minLength > maxLength) throw new SchemaError(path, `minLength ${minLength} is above maxLength ${maxLength}`);
        return { kind: 'string', minLength, maxLength };
      }
      case 'array': return this.array(s, path);
      case 'object': return this.object(s, path);
    }
  }

  private integer(s: Record<string, unknown>, path: string): GrammarNode {
    const bound = (key: string): number | undefined => {
      const v = s[key];
      if (v === undefined) return undefined;
      if (typeof v !== 'number' || !Number.isFinite(v)) throw new SchemaError(`${path}/${key}`, `is ${describe(v)}; expected a number`);
      return v;
    };
    const lows = [bound('minimum'), bound('exclusiveMinimum')], highs = [bound('maximum'), bound('exclusiveMaximum')];
    // The smallest / largest integer each bound admits.
    const candidatesLow = [lows[0] !== undefined ? Math.ceil(lows[0]) : undefined, lows[1] !== undefined ? Math.floor(lows[1]) + 1 : undefined].filter((v) => v !== undefined);
    const candidatesHigh = [highs[0] !== undefined ? Math.floor(highs[0]) : undefined, highs[1] !== undefined ? Math.ceil(highs[1]) - 1 : undefined].filter((v) => v !== undefined);
    const minimum = candidatesLow.length ? BigInt(Math.max(...candidatesLow)) : null, maximum = candidatesHigh.length ? BigInt(Math.min(...candidatesHigh)) : null;
    if (minimum !== null && maximum !== null && minimum > maximum) throw new SchemaError(path, `no integer lies between its bounds (${minimum} > ${maximum})`);
    return { kind: 'number', integer: true, minimum, maximum };
  }

  private array(s: Record<string, unknown>, path: string): GrammarNode {
    const prefixRaw = s['prefixItems'];
    if (prefixRaw !== undefined && !Array.isArray(prefixRaw)) throw new SchemaError(`${path}/prefixItems`, `is ${describe(prefixRaw)}; expected an array of schemas`);
    const prefix = (prefixRaw ?? []).map((p, i) => this.compile(p, `${path}/prefixItems/${i}`));
    const itemsRaw = s['items'];
    if (Array.isArray(itemsRaw)) throw new SchemaError(`${path}/items`, 'an array of schemas (draft 4 tuples) is not supported; use prefixItems');
    const items = itemsRaw === false ? null : itemsRaw === undefined ? ANY : this.compile(itemsRaw, `${path}/items`);
    let minItems = count(s, 'minItems', path, 0), maxItems = count(s, 'maxItems', path, Infinity);
    if (items === null) maxItems = Math.min(maxItems, prefix.length);
    if (minItems > maxItems) throw new SchemaError(path, `minItems ${minItems} is above the most items it allows (${maxItems})`);
    minItems = Math.max(0, minItems);
    return { kind: 'array', prefix, items, minItems, maxItems };
  }

  private object(s: Record<string, unknown>, path: string): GrammarNode {
    const props = s['properties'] ?? {};
    if (!isObject(props)) throw new SchemaError(`${path}/properties`, `is ${describe(props)}; expected an object of schemas`);
    const required = s['required'] ?? [];
    if (!Array.isArray(required) || required.some((r) => typeof r !== 'string')) throw new SchemaError(`${path}/required`, `is ${describe(required)}; expected an array of property names`);
    for (const name of required as string[]) if (!(name in props)) throw new SchemaError(`${path}/required`, `names '${name}', which "properties" does not list`);
    const additionalRaw = s['additionalProperties'];
    const additional = additionalRaw === undefined || additionalRaw === false ? null : additionalRaw === true ? ANY : this.compile(additionalRaw, `${path}/additionalProperties`);
    const properties = Object.entries(props).map(([name, value]) => ({
      name, key: utf8.encode(JSON.stringify(name)), value: this.compile(value, `${path}/properties/${escapePointer(name)}`), required: (required as string[]).includes(name),
    }));
    return { kind: 'object', properties, additional };
  }

  private ref(ref: unknown, path: string): GrammarNode {
    if (typeof ref !== 'string') throw new SchemaError(path, `is ${describe(ref)}; expected a string such as "#/$defs/Name"`);
    let node = this.refs.get(ref);
    if (node) return node;
    if (ref !== '#' && !ref.startsWith('#/')) throw new SchemaError(path, `'${ref}' is not a reference inside this schema ("#" or "#/$defs/…"); other documents are not fetched`);
    let target: unknown = this.root;
    for (const part of ref === '#' ? [] : ref.slice(2).split('/')) {
      const key = part.replace(/~1/g, '/').replace(/~0/g, '~');
      if (!isObject(target) || !(key in target)) throw new SchemaError(path, `'${ref}' points at nothing in the schema`);
      target = target[key];
    }
    node = { kind: 'ref', target: null, name: ref };
    this.refs.set(ref, node);
    node.target = this.compile(target, ref);
    return node;
  }
}

export function alternatives(nodes: GrammarNode[]): GrammarNode {
  return nodes.length === 1 ? nodes[0]! : { kind: 'anyOf', options: nodes };
}

/** A const / enum value: scalars as JSON.stringify writes them; objects and arrays as structure, so any spacing fits. */
function literal(value: unknown, path: string): GrammarNode {
  if (value !== null && !['string', 'number', 'boolean', 'object'].includes(typeof value)) throw new SchemaError(path, `is ${describe(value)}; not a JSON value`);
  if (typeof value === 'number' && !Number.isFinite(value)) throw new SchemaError(path, `is ${value}; not a JSON value`);
  if (Array.isArray(value)) {
    const prefix = value.map((v, i) => literal(v, `${path}/${i}`));
    return { kind: 'array', prefix, items: null, minItems: prefix.length, maxItems: prefix.length };
  }
  if (isObject(value)) {
    const properties = Object.entries(value).map(([name, v]) => ({ name, key: utf8.encode(JSON.stringify(name)), value: literal(v, `${path}/${escapePointer(name)}`), required: true }));
    return { kind: 'object', properties, additional: null };
  }
  return { kind: 'literal', bytes: utf8.encode(JSON.stringify(value)) };
}

function count(s: Record<string, unknown>, key: string, path: string, fallback: number): number {
  const v = s[key];
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new SchemaError(`${path}/${key}`, `is ${describe(v)}; expected a non-negative integer`);
  return v;
}

function escapePointer(name: string): string {
  return name.replace(/~/g, '~0').replace(/\//g, '~1');
}

function supportedList(): string {
  return `supported: type, ${Object.values(TYPE_KEYWORDS).flat().join(', ')}, enum, const, anyOf, oneOf, allOf of one schema, $ref, and annotations`;
}
