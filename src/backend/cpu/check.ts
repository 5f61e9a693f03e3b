// OpCheck for the CPU backend: the shared checks of validate.ts, plus the ones only the CPU needs
// (the tensor is a CpuTensor that has not been freed). Every tensor an op validates is remembered,
// so a replayed graph can refuse to touch a tensor freed after capture.

import { ArgumentError, LayoutError } from '../../errors.js';
import type { Tensor } from '../../tensor.js';
import { OpCheck } from '../validate.js';
import type { CpuWork } from './graph.js';
import { CpuTensor } from './tensor.js';

export class CpuCheck extends OpCheck<CpuTensor> {
  private readonly used: { name: string; tensor: CpuTensor }[] = [];

  constructor(op: string) {
    super(op, 'cpu');
  }

  /** A contiguous CpuTensor on this backend that has not been freed. */
  override tensor(name: string, t: Tensor | undefined): CpuTensor {
    const checked = this.onBackend(name, t);
    if (!(checked instanceof CpuTensor)) {
      throw new LayoutError(`${this.op}: '${name}' says it is a cpu tensor but was not made by the CPU backend`);
    }
    if (checked.allocation.freed) throw new ArgumentError(`${this.op}: '${name}' was freed`);
    this.used.push({ name, tensor: checked });
    return checked;
  }

  /** The validated op, ready to run now or to be recorded into a graph. */
  work(run: () => void): CpuWork {
    return { op: this.op, tensors: [...this.used], run };
  }
}
