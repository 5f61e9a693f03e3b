// Data movement on the CPU backend: upload, download, fill, copy with dtype conversion, and views.
// Values written to a float tensor are rounded to its dtype; values written to an integer tensor
// must be integers that fit it (a silent wrap-around would hide a bug). Converting a float to an
// integer dtype truncates toward zero, as a C cast does.

import type { DType } from '../../dtype.js';
import { isFloat } from '../../dtype.js';
import { ArgumentError, ShapeError } from '../../errors.js';
import type { HostArray, Tensor } from '../../tensor.js';
import { formatShape, shapeNumel } from '../../tensor.js';
import { CpuCheck } from './check.js';
import type { CpuWork } from './graph.js';
import { CpuTensor, elementsOf, newStorage, rounder } from './tensor.js';

const INTEGER_RANGES: Record<'i32' | 'i8' | 'u8', readonly [number, number]> = {
  i32: [-(2 ** 31), 2 ** 31 - 1],
  i8: [-128, 127],
  u8: [0, 255],
};

/** `value` as stored in `dtype`, or an error naming `what` when it does not fit an integer dtype. */
function convert(op: string, what: string, value: number, dtype: DType): number {
  if (isFloat(dtype)) return rounder(dtype)(value);
  const [lo, hi] = INTEGER_RANGES[dtype];
  const truncated = Math.trunc(value);
  if (!(truncated >= lo && truncated <= hi)) throw new ArgumentError(`${op}: ${what} = ${value} does not fit in ${dtype} [${lo}, ${hi}]`);
  return truncated;
}

/** Host values converted into fresh storage for `dtype`; integer dtypes require integer values. */
export function hostValues(op: string, values: HostArray | readonly number[], shape: readonly number[], dtype: DType): HostArray {
  const numel = shapeNumel(shape);
  if (values.length !== numel) {
    throw new ShapeError(`${op}: 'values' has ${values.length} elements but shape ${formatShape(shape)} holds ${numel}`);
  }
  // An Int32Array holds valid i32 values by construction: copied as they are (a serving step's uploads).
  if (dtype === 'i32' && values instanceof Int32Array) return values.slice();
  if (isFloat(dtype)) {
    const floats = new Float32Array(numel);
    floats.set(values); // rounds to float32
    const round = rounder(dtype);
    if (dtype !== 'f32') for (let i = 0; i < numel; i++) floats[i] = round(floats[i]!);
    return floats;
  }
  const out = newStorage(dtype, numel);
  for (let i = 0; i < numel; i++) {
    const v = values[i]!;
    if (!Number.isInteger(v)) throw new ArgumentError(`${op}: 'values'[${i}] = ${v} is not an integer, as ${dtype} requires`);
    out[i] = convert(op, `'values'[${i}]`, v, dtype);
  }
  return out;
}

export function prepareUpload(t: Tensor, values: HostArray | readonly number[], op = 'upload'): CpuWork {
  const check = new CpuCheck(op);
  const dst = check.tensor('t', t);
  const converted = hostValues(op, values, dst.shape, dst.dtype);
  return check.work(() => elementsOf(dst).set(converted));
}

export function download(t: Tensor): HostArray {
  return elementsOf(new CpuCheck('download').tensor('t', t)).slice();
}

export function prepareFill(t: Tensor, value: number): CpuWork {
  const check = new CpuCheck('fill');
  const dst = check.tensor('t', t);
  if (!isFloat(dst.dtype) && !Number.isInteger(value)) check.fail(`'value' = ${value} is not an integer, as ${dst.dtype} requires`);
  const stored = convert('fill', "'value'", value, dst.dtype);
  return check.work(() => elementsOf(dst).fill(stored));
}

export function prepareCopy(src: Tensor, dst: Tensor): CpuWork {
  const check = new CpuCheck('copy');
  const from = check.tensor('src', src);
  const to = check.tensor('dst', dst);
  if (from.numel !== to.numel) {
    throw new ShapeError(`copy: 'src' ${formatShape(from.shape)} has ${from.numel} elements but 'dst' ${formatShape(to.shape)} has ${to.numel}`);
  }
  return check.work(() => {
    const values = elementsOf(from).slice(); // src and dst may overlap
    const out = elementsOf(to);
    for (let i = 0; i < values.length; i++) out[i] = convert('copy', `'src'[${i}]`, values[i]!, to.dtype);
  });
}

export function makeView(t: Tensor, offset: number, shape: readonly number[]): CpuTensor {
  const check = new CpuCheck('view');
  const base = check.tensor('t', t);
  check.integer('offset', offset);
  for (const d of shape) if (!Number.isInteger(d) || d < 0) throw new ShapeError(`view: 'shape' ${formatShape(shape)} must have non-negative integer dimensions`);
  const numel = shapeNumel(shape);
  if (offset + numel > base.numel) {
    throw new ShapeError(`view: ${formatShape(shape)} at offset ${offset} needs ${offset + numel} elements but 't' ${formatShape(base.shape)} has ${base.numel}`);
  }
  return new CpuTensor(shape, base.dtype, base.storage, { offset: base.offset + offset, allocation: base.allocation, isView: true });
}
