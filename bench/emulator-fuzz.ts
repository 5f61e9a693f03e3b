// `node dist/bench/emulator-fuzz.js [--minutes M] [--seed S]`: the decode step's GEMV-family ops at random
// shapes on the kernel emulator (docs/emulator.md) against the CPU reference — normLinear (the norm in the
// GEMV's prologue at 1–4 rows, its fallback above), gatedLinear, normMlp — until the time is up. Rows 1–6, widths
// drawn from awkward values (odd, not a multiple of the vector width, a little past a power of two) as well as
// model widths; shapes the fused kernels refuse take the backend's other path, which is checked too. Prints
// every failing case with the seed that reproduces it, and a summary. No GPU needed.

import { parseArgs } from 'node:util';
import type { Activation, GemmEpilogue } from '../src/backend/backend.js';
import { CpuBackend } from '../src/backend/cpu/index.js';
import type { FloatDType } from '../src/dtype.js';
import { caseFailures } from '../src/testing/conformance.js';
import { emulatedCudaBackend, emulatorUnavailable } from '../src/testing/emulator/host.js';
import { gatedLinearCases, normLinearCases, normMlpCase, type NormLinearShape } from '../src/testing/infer-op-cases.js';
import type { OpCase } from '../src/testing/op-cases.js';
import { Rng } from '../src/testing/random.js';

const { values } = parseArgs({ options: { minutes: { type: 'string', default: '10' }, seed: { type: 'string' } } });
const unavailable = emulatorUnavailable();
if (unavailable) { console.error(`emulator-fuzz: ${unavailable}`); process.exit(1); }
const seed = values.seed ? Number(values.seed) : Date.now() >>> 0;
const rng = new Rng(seed);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng.next() * xs.length)]!;
const WIDTHS = [8, 24, 64, 72, 96, 120, 128, 136, 200, 256, 264, 320, 512, 520, 768, 1000, 1024, 1032, 2048];
const ODD = [3, 7, 77, 100, 131, 257, 1001];
const width = () => (rng.next() < 0.8 ? pick(WIDTHS) : pick(ODD));
const DTYPES: FloatDType[] = ['f32', 'f16', 'bf16'];
const ACTIVATIONS: Activation[] = ['silu', 'gelu_tanh', 'relu', 'gelu'];
const EPILOGUES: GemmEpilogue[] = ['none', 'bias', 'gelu_bias', 'relu_bias'];

function randomCase(): OpCase | undefined {
  const dtype = pick(DTYPES), rows = 1 + Math.floor(rng.next() * 6), kind = rng.next();
  if (kind < 0.45) {
    const H = width(), yF32 = dtype === 'bf16' && rng.next() < 0.3;
    const product = rng.next() < 0.6 ? { N: width(), epilogue: pick(EPILOGUES) } : { F: width(), activation: pick(ACTIVATIONS) };
    const residual = yF32 || rng.next() < 0.7;  // a residual bias comes with y
    const shape: NormLinearShape = [rows, H, pick(['layer', 'rms'] as const), residual, residual && rng.next() < 0.5, product, yF32 ? 'f32' : undefined];
    return normLinearCases(dtype, [shape])[0];
  }
  if (kind < 0.75) return gatedLinearCases(dtype, [[rows, width(), width(), pick(ACTIVATIONS), rng.next() < 0.5]])[0];
  // normMlp runs as one kernel only (1–4 rows, whole 16-byte rows, a block size dividing F): draw what it takes.
  const vec = dtype === 'f32' ? 4 : 8, H = vec * (1 + Math.floor(rng.next() * 128)), F = 8 * (1 + Math.floor(rng.next() * 512));
  return normMlpCase(dtype, Math.min(rows, 4), H, F, pick(ACTIVATIONS), rng.next() < 0.5, dtype !== 'f32' && rng.next() < 0.5);
}

const { backend } = emulatedCudaBackend();
const cpu = new CpuBackend();
const deadline = Date.now() + Number(values.minutes) * 60_000;
let run = 0, failed = 0, refused = 0;
console.log(`emulator-fuzz: seed ${seed}`);
while (Date.now() < deadline) {
  const c = randomCase();
  if (!c) continue;
  const caseSeed = Math.floor(rng.next() * 2 ** 31);
  let failures: string[];
  try {
    failures = caseFailures(c, backend, cpu, caseSeed);
  } catch (error) {
    const message = (error as Error).message;
    // A shape the op itself refuses on both backends is not a finding (normMlp's contract).
    if (/runs as one kernel only/.test(message)) { refused++; continue; }
    failures = [`threw: ${message.slice(0, 400)}`];
  }
  run++;
  if (failures.length > 0) {
    failed++;
    console.log(`FAIL ${c.name} (case seed ${caseSeed})\n  ${failures.join('\n  ')}`);
  }
}
console.log(`emulator-fuzz: ${run} cases, ${failed} failed, ${refused} refused by the op (seed ${seed})`);
process.exitCode = failed > 0 ? 1 : 0;
