// Argument checks of the quantized-linear ops (int4Linear, int4QuantizeWeights, int8QuantizeRows,
// int8Gemm, int8Dequantize, int8Linear), shared by the backends. backend.ts states each op's math and layout.

import type { Tensor } from '../../tensor.js';
import type {
  Activation, Int4LinearArgs, Int4QuantizeWeightsArgs, Int8DequantizeArgs, Int8GemmArgs, Int8LinearArgs, Int8QuantizeRowsArgs,
} from '../backend.js';
import type { OpCheck } from '../validate.js';
import { checkActivation } from './elementwise.js';
import { checkRowArgmax } from './sample-tokens.js';

/** Nibbles per packed i32 word of an INT4 weight. */
export const INT4_PER_WORD = 8;

/** Group sizes are multiples of this: the GPU kernels read a group's packed words as whole 16-byte vectors. */
export const INT4_GROUP_MULTIPLE = 32;

/** groupSize is a positive multiple of 32 dividing K. */
export function checkGroupSize<T extends Tensor>(check: OpCheck<T>, groupSize: number, K: number): void {
  if (!Number.isInteger(groupSize) || groupSize < INT4_GROUP_MULTIPLE || groupSize % INT4_GROUP_MULTIPLE !== 0) {
    check.fail(`'groupSize' must be a positive multiple of ${INT4_GROUP_MULTIPLE}, got ${groupSize}`);
  }
  if (K % groupSize !== 0) check.fail(`'groupSize' ${groupSize} must divide K = ${K} (the input features)`);
}

function optionalActivation<T extends Tensor>(check: OpCheck<T>, activation: string | undefined): Activation | undefined {
  return activation === undefined ? undefined : checkActivation(check, activation);
}

/**
 * A quantized linear's output and epilogue for N weight rows: out [M, N], or gated (the gate's rows, then
 * the up projection's: N even) out [M, N/2] with an activation required; bias [N] in x's dtype.
 */
function checkLinearEpilogue<T extends Tensor>(check: OpCheck<T>, op: string, args: { bias?: Tensor | undefined; activation?: string | undefined; gated?: boolean | undefined }, x: T, out: T, N: number) {
  const gated = args.gated === true;
  if (gated && N % 2 !== 0) check.fail(`a gated ${op}'s weight holds the gate's rows then the up projection's, so an even N; got N = ${N}`);
  check.shape('out', out, ['M', gated ? N / 2 : 'N']);
  const bias = check.optional('bias', args.bias);
  if (bias) {
    check.shape('bias', bias, ['N']);
    check.sameDType(['x', 'bias'], [x, bias]);
  }
  const activation = optionalActivation(check, args.activation);
  if (gated && activation === undefined) check.fail(`a gated ${op} computes act(gate)·up: 'activation' is required`);
  return { bias, activation, gated };
}

/**
 * The packed weight, its scales and zeros for K input features and `rows` (a size name) output features, group
 * size G; `prefix` names the fields in errors (decodeAttention's 'project.weight.').
 */
export function checkInt4Weight<T extends Tensor>(check: OpCheck<T>, args: { qweight: Tensor; scales: Tensor; zeros: Tensor; groupSize: number }, K: number, prefix = '', rows = 'N') {
  const qweight = check.tensor(`${prefix}qweight`, args.qweight);
  const scales = check.tensor(`${prefix}scales`, args.scales);
  const zeros = check.tensor(`${prefix}zeros`, args.zeros);
  check.dtype(`${prefix}qweight`, qweight, ['i32']);
  check.dtype(`${prefix}scales`, scales, ['f16']);
  check.dtype(`${prefix}zeros`, zeros, ['u8']);
  checkGroupSize(check, args.groupSize, K);
  check.shape(`${prefix}qweight`, qweight, [rows, K / INT4_PER_WORD]);
  check.shape(`${prefix}scales`, scales, [rows, K / args.groupSize]);
  check.shape(`${prefix}zeros`, zeros, [rows, K / args.groupSize]);
  return { qweight, scales, zeros, groupSize: args.groupSize };
}

export function checkInt4Linear<T extends Tensor>(check: OpCheck<T>, args: Int4LinearArgs) {
  const x = check.tensor('x', args.x);
  const out = check.tensor('out', args.out);
  check.float('x', x);
  check.sameDType(['x', 'out'], [x, out]);
  check.shape('x', x, ['M', 'K']);
  const K = check.size('K');
  const { qweight, scales, zeros } = checkInt4Weight(check, args, K);
  const N = check.size('N');
  const { bias, activation, gated } = checkLinearEpilogue(check, 'int4Linear', args, x, out, N);
  if (args.argmax && gated) check.fail(`'argmax' is for an ungated int4Linear (an LM head), not a gated one`);
  const argmax = args.argmax ? checkRowArgmax(check, args.argmax, check.size('M'), N) : undefined;
  return { x, qweight, scales, zeros, out, bias, activation, gated, groupSize: args.groupSize, M: check.size('M'), N, K, argmax };
}

export function checkInt4QuantizeWeights<T extends Tensor>(check: OpCheck<T>, args: Int4QuantizeWeightsArgs) {
  const weight = check.tensor('weight', args.weight);
  check.float('weight', weight);
  check.shape('weight', weight, ['N', 'K']);
  const K = check.size('K');
  const { qweight, scales, zeros } = checkInt4Weight(check, args, K);
  return { weight, qweight, scales, zeros, groupSize: args.groupSize, N: check.size('N'), K };
}

export function checkInt8QuantizeRows<T extends Tensor>(check: OpCheck<T>, args: Int8QuantizeRowsArgs) {
  const x = check.tensor('x', args.x);
  const out = check.tensor('out', args.out);
  const scales = check.tensor('scales', args.scales);
  check.float('x', x);
  check.dtype('out', out, ['i8']);
  check.dtype('scales', scales, ['f32']);
  check.shape('x', x, ['M', 'K']);
  check.shape('out', out, ['M', 'K']);
  check.shape('scales', scales, ['M']);
  return { x, out, scales, M: check.size('M'), K: check.size('K') };
}

export function checkInt8Gemm<T extends Tensor>(check: OpCheck<T>, args: Int8GemmArgs) {
  const a = check.tensor('a', args.a);
  const b = check.tensor('b', args.b);
  const out = check.tensor('out', args.out);
  check.dtype('a', a, ['i8']);
  check.dtype('b', b, ['i8']);
  check.dtype('out', out, ['i32']);
  check.shape('a', a, ['M', 'K']);
  check.shape('b', b, ['N', 'K']);
  check.shape('out', out, ['M', 'N']);
  const K = check.size('K');
  // Every i32 sum must be exact: |Σ_k a·b| ≤ 127²·K < 2^31.
  if (K * 127 * 127 >= 2 ** 31) check.fail(`K = ${K} is too large for exact i32 accumulation (at most ${Math.floor((2 ** 31 - 1) / (127 * 127))})`);
  return { a, b, out, M: check.size('M'), N: check.size('N'), K };
}

export function checkInt8Dequantize<T extends Tensor>(check: OpCheck<T>, args: Int8DequantizeArgs) {
  const acc = check.tensor('acc', args.acc);
  const rowScales = check.tensor('rowScales', args.rowScales);
  const colScales = check.tensor('colScales', args.colScales);
  const out = check.tensor('out', args.out);
  check.dtype('acc', acc, ['i32']);
  check.dtype('rowScales', rowScales, ['f32']);
  check.dtype('colScales', colScales, ['f32']);
  check.float('out', out);
  check.shape('acc', acc, ['M', 'N']);
  check.shape('rowScales', rowScales, ['M']);
  check.shape('colScales', colScales, ['N']);
  check.shape('out', out, ['M', 'N']);
  const bias = check.optional('bias', args.bias);
  if (bias) {
    check.shape('bias', bias, ['N']);
    check.sameDType(['out', 'bias'], [out, bias]);
  }
  const activation = optionalActivation(check, args.activation);
  return { acc, rowScales, colScales, out, bias, activation, M: check.size('M'), N: check.size('N') };
}

export function checkInt8Linear<T extends Tensor>(check: OpCheck<T>, args: Int8LinearArgs) {
  const x = check.tensor('x', args.x);
  const qweight = check.tensor('qweight', args.qweight);
  const scales = check.tensor('scales', args.scales);
  const out = check.tensor('out', args.out);
  check.float('x', x);
  check.sameDType(['x', 'out'], [x, out]);
  check.dtype('qweight', qweight, ['i8']);
  check.dtype('scales', scales, ['f32']);
  check.shape('x', x, ['M', 'K']);
  check.shape('qweight', qweight, ['N', 'K']);
  check.shape('scales', scales, ['N']);
  const M = check.size('M'), N = check.size('N'), K = check.size('K');
  if (K * 127 * 127 >= 2 ** 31) check.fail(`K = ${K} is too large for exact i32 accumulation (at most ${Math.floor((2 ** 31 - 1) / (127 * 127))})`);
  const { bias, activation, gated } = checkLinearEpilogue(check, 'int8Linear', args, x, out, N);
  const s = args.scratch;
  if (s) {
    const xq = check.tensor('scratch.xq', s.xq), rowScales = check.tensor('scratch.rowScales', s.rowScales), acc = check.tensor('scratch.acc', s.acc);
    check.dtype('scratch.xq', xq, ['i8']);
    check.dtype('scratch.rowScales', rowScales, ['f32']);
    check.dtype('scratch.acc', acc, ['i32']);
    check.shape('scratch.xq', xq, ['M', 'K']);
    check.shape('scratch.rowScales', rowScales, ['M']);
    check.shape('scratch.acc', acc, ['M', 'N']);
    if (gated) {
      if (!s.up) check.fail(`a gated int8Linear's scratch needs 'up' [M, N] in x's dtype (the dequantized gate and up columns)`);
      const up = check.tensor('scratch.up', s.up);
      check.shape('scratch.up', up, ['M', 'N']);
      check.sameDType(['x', 'scratch.up'], [x, up]);
    }
  }
  if (args.argmax && gated) check.fail(`'argmax' is for an ungated int8Linear (an LM head), not a gated one`);
  const argmax = args.argmax ? checkRowArgmax(check, args.argmax, M, N) : undefined;
  return { x, qweight, scales, out, bias, activation, gated, scratch: s, M, N, K, argmax };
}
