// Argument checks of biasLogits (the API's logit_bias), shared by the backends.
//   logits (n, Vp) float;  rows i32 (m);  tokens i32 (m, k);  biases f32 (m, k).

import type { Tensor } from '../../tensor.js';
import type { BiasLogitsArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

export function checkBiasLogits<T extends Tensor>(check: OpCheck<T>, args: BiasLogitsArgs) {
  const logits = check.tensor('logits', args.logits);
  const rows = check.tensor('rows', args.rows);
  const tokens = check.tensor('tokens', args.tokens);
  const biases = check.typed('biases', args.biases, ['f32'], ['m', 'k']);
  check.float('logits', logits);
  check.dtype('rows', rows, ['i32']);
  check.dtype('tokens', tokens, ['i32']);
  check.shape('logits', logits, ['n', 'Vp']);
  check.shape('rows', rows, ['m']);
  check.shape('tokens', tokens, ['m', 'k']);
  return { logits, rows, tokens, biases, n: check.size('n'), Vp: check.size('Vp'), m: check.size('m'), k: check.size('k') };
}
