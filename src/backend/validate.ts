// Argument checks shared by every backend, so both reject the same bad calls with the same words.
// Each check names the op, the argument and what was expected.

import type { DType } from '../dtype.js';
import type { DropoutArgs, RandomFillArgs } from './backend.js';
import { isFloat } from '../dtype.js';
import { ArgumentError, DTypeError, LayoutError, ShapeError } from '../errors.js';
import type { BackendName } from '../tensor.js';
import { Tensor } from '../tensor.js';
import { formatShape } from '../tensor.js';

/** A dimension pattern: a number must match exactly; a string names a size that must agree across tensors. */
export type Dim = number | string;

const U64_LIMIT = 1n << 64n;

/**
 * Checks one op's arguments. T is the tensor type the backend works with: a backend's subclass
 * narrows tensor() to its own tensors (the CPU backend also refuses freed tensors), so the shared
 * per-op checks in op-checks/ hand each backend its own tensor type.
 */
export class OpCheck<T extends Tensor = Tensor> {
  private readonly sizes = new Map<string, { value: number; from: string }>();

  constructor(readonly op: string, readonly backend: BackendName) {}

  fail(message: string): never {
    throw new ArgumentError(`${this.op}: ${message}`);
  }

  /** The tensor lives on this backend and is contiguous. */
  tensor(name: string, t: Tensor | undefined): T {
    return this.onBackend(name, t) as T;
  }

  /** tensor(), then its dtype among `allowed` and its shape matching `pattern` (see shape()). */
  typed(name: string, t: Tensor | undefined, allowed: readonly DType[], pattern: readonly Dim[]): T {
    const checked = this.tensor(name, t);
    this.dtype(name, checked, allowed);
    this.shape(name, checked, pattern);
    return checked;
  }

  /** As tensor(), for an optional argument. */
  optional(name: string, t: Tensor | undefined): T | undefined {
    return t === undefined ? undefined : this.tensor(name, t);
  }

  /** p in [0, 1); seed and offset are unsigned 64-bit integers (bigint). */
  dropout(args: DropoutArgs): void {
    this.probability('p', args.p);
    for (const name of ['seed', 'offset'] as const) {
      const x = args[name];
      if (typeof x !== 'bigint' || x < 0n || x >= U64_LIMIT) this.fail(`'${name}' must be a bigint in [0, 2^64), got ${String(x)}`);
    }
    if (args.offsetBase !== undefined) {
      const base = this.onBackend('offsetBase', args.offsetBase);
      if (base.dtype !== 'i32' || base.rank !== 1 || base.shape[0] !== 2) {
        this.fail(`'offsetBase' must be an i32 [2] tensor (a u64, low word first), got ${base.dtype} [${base.shape.join(', ')}]`);
      }
    }
  }

  /** The backend-independent part of tensor(): on this backend, and contiguous. */
  protected onBackend(name: string, t: Tensor | undefined): Tensor {
    if (t === undefined) throw new ArgumentError(`${this.op}: argument '${name}' is required`);
    const notATensor = () => new ArgumentError(`${this.op}: '${name}' must be a tensor (backend.fromArray / empty make one), got ${Array.isArray(t) ? 'an array' : t === null ? 'null' : typeof t}`);
    if (typeof t !== 'object' || t === null || typeof (t as { backend?: unknown }).backend !== 'string') throw notATensor();
    if (t.backend !== this.backend) {
      throw new LayoutError(`${this.op}: '${name}' is a ${t.backend} tensor but this op runs on the ${this.backend} backend`);
    }
    if (!(t instanceof Tensor)) throw notATensor();
    if (!t.isContiguous) {
      throw new LayoutError(`${this.op}: '${name}' is a non-contiguous view ${formatShape(t.shape)} with strides [${t.strides.join(', ')}]; make a contiguous copy first`);
    }
    return t;
  }

  /** Shape matches the pattern; named dims bind on first use and must agree afterwards. */
  shape(name: string, t: Tensor, pattern: readonly Dim[]): void {
    this.dims(name, t.shape, pattern);
  }

  private dims(name: string, shape: readonly number[], pattern: readonly Dim[]): void {
    const patternText = `[${pattern.join(', ')}]`;
    if (shape.length !== pattern.length) {
      throw new ShapeError(`${this.op}: '${name}' has shape ${formatShape(shape)} but expected ${patternText}`);
    }
    pattern.forEach((dim, i) => {
      const actual = shape[i]!;
      if (typeof dim === 'number') {
        if (actual !== dim) throw new ShapeError(`${this.op}: '${name}' has shape ${formatShape(shape)} but expected ${patternText}`);
        return;
      }
      const bound = this.sizes.get(dim);
      if (bound === undefined) this.sizes.set(dim, { value: actual, from: name });
      else if (bound.value !== actual) {
        throw new ShapeError(`${this.op}: '${name}' has shape ${formatShape(shape)} (${dim} = ${actual}) but '${bound.from}' has ${dim} = ${bound.value}`);
      }
    });
  }

  /** Treats all leading dims as one `rows` dim: [..., H] → checks rows and H. */
  rows(name: string, t: Tensor, rowsName: string, lastName: Dim): void {
    if (t.rank < 1) throw new ShapeError(`${this.op}: '${name}' must have at least one dimension`);
    const rows = t.shape.slice(0, -1).reduce((a, b) => a * b, 1);
    this.dims(name, [rows, t.shape[t.rank - 1]!], [rowsName, lastName]);
  }

  size(dim: string): number {
    const bound = this.sizes.get(dim);
    if (bound === undefined) throw new Error(`internal: size '${dim}' not bound in ${this.op}`);
    return bound.value;
  }

  dtype(name: string, t: Tensor, allowed: readonly DType[]): void {
    if (!allowed.includes(t.dtype)) {
      throw new DTypeError(`${this.op}: '${name}' has dtype ${t.dtype} but expected ${allowed.join(' or ')}`);
    }
  }

  float(name: string, t: Tensor): void {
    if (!isFloat(t.dtype)) throw new DTypeError(`${this.op}: '${name}' has dtype ${t.dtype} but expected a float dtype (f32, f16, bf16)`);
  }

  sameDType(names: readonly string[], tensors: readonly Tensor[]): void {
    const first = tensors[0]!;
    tensors.forEach((t, i) => {
      if (t.dtype !== first.dtype) {
        throw new DTypeError(`${this.op}: '${names[i]}' has dtype ${t.dtype} but '${names[0]}' has ${first.dtype}; they must match`);
      }
    });
  }

  probability(name: string, p: number): void {
    if (!(p >= 0 && p < 1)) this.fail(`'${name}' must be in [0, 1), got ${p}`);
  }

  finite(name: string, x: number): void {
    if (!Number.isFinite(x)) this.fail(`'${name}' must be a finite number, got ${x}`);
  }

  nonNegative(name: string, x: number): void {
    if (!(x >= 0) || !Number.isFinite(x)) this.fail(`'${name}' must be a finite number >= 0, got ${x}`);
  }

  /** An argument this configuration does not use must not be passed (it is almost always a mistake). */
  absent(name: string, value: unknown, reason: string): void {
    if (value !== undefined) this.fail(`'${name}' is not used ${reason}; leave it out`);
  }

  positive(name: string, x: number): void {
    if (!(x > 0) || !Number.isFinite(x)) this.fail(`'${name}' must be a positive number, got ${x}`);
  }

  integer(name: string, x: number, min = 0): void {
    if (!Number.isInteger(x) || x < min) this.fail(`'${name}' must be an integer >= ${min}, got ${x}`);
  }
}

export type RandomDistribution = { kind: 'uniform'; low: number; high: number } | { kind: 'normal'; mean: number; std: number };

/** randomFill's distribution with defaults applied (uniform [0, 1), normal mean 0 std 1), validated. */
export function randomDistribution(check: OpCheck, args: RandomFillArgs): RandomDistribution {
  if (args.distribution === 'uniform') {
    const low = args.low ?? 0, high = args.high ?? 1;
    check.finite('low', low);
    check.finite('high', high);
    if (!(high > low)) check.fail(`'high' (${high}) must be greater than 'low' (${low})`);
    return { kind: 'uniform', low, high };
  }
  if (args.distribution === 'normal') {
    const mean = args.mean ?? 0, std = args.std ?? 1;
    check.finite('mean', mean);
    check.finite('std', std);
    if (!(std >= 0)) check.fail(`'std' must be >= 0, got ${std}`);
    return { kind: 'normal', mean, std };
  }
  return check.fail(`'distribution' must be 'uniform' or 'normal', got '${String((args as { distribution: unknown }).distribution)}'`);
}
