// OpCheck for the CPU backend: the shared checks of validate.ts, plus the ones only the CPU needs
// (the tensor is a CpuTensor that has not been freed). Every tensor an op validates is remembered,
// so a replayed graph can refuse to touch a tensor freed after capture.

import type { DropoutArgs } from '../backend.js';
import { ArgumentError, LayoutError } from '../../errors.js';
import type { Tensor } from '../../tensor.js';
import { OpCheck } from '../validate.js';
import type { CpuWork } from './graph.js';
import { CpuTensor } from './tensor.js';

const U64_LIMIT = 1n << 64n;

export class CpuCheck extends OpCheck {
  private readonly used: { name: string; tensor: CpuTensor }[] = [];

  constructor(op: string) {
    super(op, 'cpu');
  }

  /** A contiguous CpuTensor on this backend that has not been freed. */
  cpu(name: string, t: Tensor | undefined): CpuTensor {
    const checked = this.tensor(name, t);
    if (!(checked instanceof CpuTensor)) {
      throw new LayoutError(`${this.op}: '${name}' says it is a cpu tensor but was not made by the CPU backend`);
    }
    if (checked.allocation.freed) throw new ArgumentError(`${this.op}: '${name}' was freed`);
    this.used.push({ name, tensor: checked });
    return checked;
  }

  /** As cpu(), for an optional argument. */
  optionalCpu(name: string, t: Tensor | undefined): CpuTensor | undefined {
    return t === undefined ? undefined : this.cpu(name, t);
  }

  /** An argument this configuration does not use must not be passed (it is almost always a mistake). */
  absent(name: string, value: unknown, reason: string): void {
    if (value !== undefined) this.fail(`'${name}' is not used ${reason}; leave it out`);
  }

  nonNegative(name: string, x: number): void {
    if (!(x >= 0) || !Number.isFinite(x)) this.fail(`'${name}' must be a finite number >= 0, got ${x}`);
  }

  /** p in [0, 1); seed and offset are unsigned 64-bit integers (bigint). */
  dropout(args: DropoutArgs): void {
    this.probability('p', args.p);
    this.u64('seed', args.seed);
    this.u64('offset', args.offset);
  }

  private u64(name: string, x: bigint): void {
    if (typeof x !== 'bigint' || x < 0n || x >= U64_LIMIT) this.fail(`'${name}' must be a bigint in [0, 2^64), got ${String(x)}`);
  }

  /** The validated op, ready to run now or to be recorded into a graph. */
  work(run: () => void): CpuWork {
    return { op: this.op, tensors: [...this.used], run };
  }
}
