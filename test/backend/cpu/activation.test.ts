import { test } from 'node:test';
import { erf, geluErfGrad, geluTanh, geluTanhGrad, geluErf } from '../../../src/backend/cpu/activation.js';
import { assertClose } from './helpers.js';

test('erf matches tabulated values to float64 accuracy', () => {
  const xs = [0, 0.1, 0.5, 1, 2, -3, 4.5, 6.5];
  const table = [0, 0.1124629160182849, 0.5204998778130465, 0.8427007929497149, 0.9953222650189527, -0.9999779095030014, 0.9999999998033839, 1];
  assertClose(xs.map(erf), table, 1e-15);
});

test('the GELU derivatives match central differences of the GELUs', () => {
  const xs = [-4, -1.5, -0.3, 0, 0.2, 1, 2.5];
  const h = 1e-6;
  assertClose(xs.map(geluErfGrad), xs.map((x) => (geluErf(x + h) - geluErf(x - h)) / (2 * h)), 1e-8, "gelu'");
  assertClose(xs.map(geluTanhGrad), xs.map((x) => (geluTanh(x + h) - geluTanh(x - h)) / (2 * h)), 1e-8, "gelu_tanh'");
});
