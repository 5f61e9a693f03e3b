// Every op × dtype × shape on the CUDA backend against the CPU reference, forward and backward,
// on fresh random inputs with poisoned outputs. Skips cleanly without a CUDA GPU.
// FUSEFORMER_TEST_OPS=a,b runs only the cases whose name contains one of the substrings (e.g. "Norm").

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { probeCuda } from '../../src/cuda/probe.js';
import { casesSelectedByEnv } from '../../src/testing/conformance.js';
import { allOpCases } from '../../src/testing/op-cases.js';
import { checkOpCasesOnGpu } from './op-case-suite.js';
import './report-as-you-go.js';

const probe = probeCuda();
const skip = probe.available ? false : `no usable CUDA GPU: ${probe.reason}`;

test('CUDA ops match the CPU reference', { skip }, async (t) => {
  const { cases, words } = casesSelectedByEnv(allOpCases());
  if (words.length > 0) t.diagnostic(`FUSEFORMER_TEST_OPS: ${cases.length} cases`);
  assert.ok(cases.length > 0, `FUSEFORMER_TEST_OPS=${words.join(',')} matches no op case`);
  await checkOpCasesOnGpu(t, cases);
});
