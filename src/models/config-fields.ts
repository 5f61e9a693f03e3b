// Typed readers for the fields of a Hugging Face config.json. Every failure is a ConfigError that names
// the file, the field and its value, and says what was expected:
//   gpt2/config.json: field "n_head" is 5; expected a divisor of n_embd (768)
// HF writes null for "not set" (n_inner, head_dim, rope_scaling), so the optional readers treat null
// like a missing field and return the default. Field names are looked up as own properties only, so a
// hostile file cannot reach Object.prototype through a name like "constructor".

import { readFileSync } from 'node:fs';
import type { Activation } from '../backend/backend.js';
import { FuseformerError } from '../errors.js';

/** A model configuration (a config.json file, a preset name, a field) is missing, malformed or unsupported. */
export class ConfigError extends FuseformerError {}

export type JsonObject = Record<string, unknown>;

/** The activations our models use: the backend's (SiLU is Llama's SwiGLU gate and Marian's "swish"). */
export type ModelActivation = Activation;

/** HF's ACT2FN names for each activation. "gelu_new" and "gelu_fast" are the same tanh approximation. */
const ACTIVATION_OF_HF_NAME = new Map<string, ModelActivation>([
  ['gelu', 'gelu'], ['gelu_new', 'gelu_tanh'], ['gelu_pytorch_tanh', 'gelu_tanh'], ['gelu_fast', 'gelu_tanh'],
  ['relu', 'relu'], ['silu', 'silu'], ['swish', 'silu'],
]);
const HF_NAME_OF_ACTIVATION: Readonly<Record<ModelActivation, string>> = { gelu: 'gelu', gelu_tanh: 'gelu_new', relu: 'relu', silu: 'silu' };

export function hfActivationName(activation: ModelActivation): string {
  return HF_NAME_OF_ACTIVATION[activation];
}

/** What a number field may hold; the text after "expected" in an error. */
const NUMBER_RANGES = {
  positive: { test: (x: number) => x > 0, expected: 'a positive number' },
  probability: { test: (x: number) => x >= 0 && x < 1, expected: 'a probability in [0, 1)' },
  atLeastOne: { test: (x: number) => x >= 1, expected: 'a number >= 1' },
} as const;
export type NumberRange = keyof typeof NUMBER_RANGES;

/** The fields of one JSON object (the whole config, or a nested one such as rope_scaling), with the file they came from. */
export class ConfigFields {
  /** `prefix` names nested objects in messages: "rope_scaling.factor". */
  constructor(readonly json: JsonObject, readonly source: string, private readonly prefix = '') {}

  has(field: string): boolean {
    return this.value(field) !== undefined && this.value(field) !== null;
  }

  value(field: string): unknown {
    return Object.hasOwn(this.json, field) ? this.json[field] : undefined;
  }

  /** Throws a ConfigError for `field` with its current value: `field "x" is <value>; expected <expected>`. */
  fail(field: string, expected: string): never {
    throw new ConfigError(`${this.source}: field "${this.prefix}${field}" is ${describeValue(this.value(field))}; expected ${expected}`);
  }

  /** A positive integer; required unless a default is given. */
  positiveInteger(field: string, fallback?: number): number {
    const value = this.present(field, fallback, 'a positive integer');
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) this.fail(field, 'a positive integer');
    return value as number;
  }

  /** A token id (a non-negative integer); required unless a default is given. */
  tokenId(field: string, fallback?: number): number {
    const value = this.present(field, fallback, 'a token id (a non-negative integer)');
    if (!isTokenId(value)) this.fail(field, 'a token id (a non-negative integer)');
    return value as number;
  }

  /** One token id or a list of them (HF's eos_token_id may be either), as a list. */
  tokenIds(field: string, fallback: readonly number[]): number[] {
    const value = this.value(field);
    if (value === undefined || value === null) return [...fallback];
    if (isTokenId(value)) return [value];
    if (Array.isArray(value) && value.length > 0 && value.every(isTokenId)) return [...value];
    return this.fail(field, 'a token id or a non-empty list of token ids');
  }

  /** A finite number in `range`; required unless a default is given. */
  number(field: string, range: NumberRange, fallback?: number): number {
    const { test, expected } = NUMBER_RANGES[range];
    const value = this.present(field, fallback, expected);
    if (typeof value !== 'number' || !Number.isFinite(value) || !test(value)) this.fail(field, expected);
    return value as number;
  }

  boolean(field: string, fallback?: boolean): boolean {
    const value = this.present(field, fallback, 'true or false');
    if (typeof value !== 'boolean') this.fail(field, 'true or false');
    return value as boolean;
  }

  /** One of `allowed`; required unless a default is given. */
  oneOf<T extends string>(field: string, allowed: readonly T[], fallback?: T): T {
    const expected = `one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}`;
    const value = this.present(field, fallback, expected);
    if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) this.fail(field, expected);
    return value as T;
  }

  /** An HF activation name (ACT2FN), as the activation it computes. */
  activation(field: string, fallback: ModelActivation): ModelActivation {
    const value = this.value(field);
    if (value === undefined || value === null) return fallback;
    const activation = typeof value === 'string' ? ACTIVATION_OF_HF_NAME.get(value) : undefined;
    if (activation === undefined) this.fail(field, `one of ${[...ACTIVATION_OF_HF_NAME.keys()].map((a) => JSON.stringify(a)).join(', ')}`);
    return activation as ModelActivation;
  }

  /** A nested object, or undefined when missing or null. */
  object(field: string): ConfigFields | undefined {
    const value = this.value(field);
    if (value === undefined || value === null) return undefined;
    if (!isJsonObject(value)) this.fail(field, 'a JSON object or null');
    return new ConfigFields(value as JsonObject, this.source, `${this.prefix}${field}.`);
  }

  /** A field that must hold `expected` when present: a feature we do not implement is refused, not ignored. */
  requireIfPresent(field: string, expected: string | number | boolean, why: string): void {
    const value = this.value(field);
    if (value !== undefined && value !== null && value !== expected) this.fail(field, `${JSON.stringify(expected)} (${why})`);
  }

  /** HF's model_type names the config class; a file for another model is refused when it says so. */
  modelType(expected: string): void {
    this.requireIfPresent('model_type', expected, `this is a ${expected} configuration`);
  }

  private present(field: string, fallback: unknown, expected: string): unknown {
    const value = this.value(field);
    if (value !== undefined && value !== null) return value;
    if (fallback === undefined) this.fail(field, expected);
    return fallback;
  }
}

/** Reads and parses a JSON file whose top level is an object; errors name the file. */
export function readConfigFile(path: string): JsonObject {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new ConfigError(`${path}: file not found`);
    if (code === 'EISDIR') throw new ConfigError(`${path}: is a directory; expected a config.json file`);
    throw new ConfigError(`${path}: cannot be read (${(error as Error).message})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(`${path}: not valid JSON (${(error as Error).message})`);
  }
  if (!isJsonObject(value)) throw new ConfigError(`${path}: the top level is ${describeValue(value)}; expected a JSON object`);
  return value;
}

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isTokenId(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/** A value as a message shows it: missing, null, or its JSON (shortened). */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'missing';
  const json = JSON.stringify(value);
  return json.length > 80 ? `${json.slice(0, 77)}...` : json;
}
