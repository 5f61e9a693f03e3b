// Quantizing a GPT-2 model: every block's four linear layers (QKV, attention output, MLP in and out),
// by one of
//   INT4 W4A16  rtn   round-to-nearest per group (int4QuantizeWeights on the backend)
//               awq   activation-aware scales folded into the LayerNorms and the V projection, clip
//                     search, then round-to-nearest (awq.ts)
//               gptq  Hessian-compensated rounding, layer by layer (gptq.ts; run on the backend by gptq-device.ts)
//   INT8 W8A8   smoothquant  SmoothQuant migration (α, default 0.5) folded into ln_1/ln_2, then
//                     per-output-channel weight scales; activations are quantized per token at run time
//               rtn   the same without smoothing
// The calibrated INT4 methods go block by block: block i is calibrated on the outputs of blocks 0 … i−1
// already running their quantized weights (the real kernels), so later blocks see — and GPTQ
// compensates for — the error of the earlier ones. SmoothQuant needs one float pass for activation maxima.
//
// The model is left as it was: hooks are removed, the device copies of quantized weights freed and the
// float parameters restored. applyQuantizedModel (model.ts) then puts the result on a model.

import type { Backend } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import type { Gpt2Model } from '../models/gpt2-model.js';
import { quantizeInt8Rows } from '../backend/cpu/quant-math.js';
import { clipWeights, searchAwqScales } from './awq.js';
import { captureLinearInputs, StepExecutor } from './calibration.js';
import type { DeviceQuantizedWeight } from './device.js';
import { downloadInt4, freeQuantized, quantizedForward, uploadQuantized } from './device.js';
import { gptqQuantizeOnBackend } from './gptq-device.js';
import type { HostParams, QuantizedModel, QuantTarget } from './model.js';
import { gpt2QuantTargets, setTargetWeight, targetWeight } from './model.js';
import { foldIntoLayerNorm, scaleInputChannels, smoothingFactors } from './smoothquant.js';
import type { Int4HostWeight, QuantizedHostWeight } from './weights.js';
import type { Tensor } from '../tensor.js';

export type QuantMethod = 'rtn' | 'awq' | 'gptq' | 'smoothquant';

export const INT4_METHODS: readonly QuantMethod[] = ['rtn', 'awq', 'gptq'];
export const INT8_METHODS: readonly QuantMethod[] = ['smoothquant', 'rtn'];

export interface CalibrationData {
  /** Token windows of equal length (calibration.ts: calibrationWindows). */
  readonly windows: readonly Int32Array[];
  /** Windows per forward. */
  readonly batchSize: number;
}

export interface QuantizeOptions {
  readonly bits: 4 | 8;
  readonly method: QuantMethod;
  /** INT4 group size (a multiple of 32 dividing every layer's input width). */
  readonly groupSize?: number;
  /** SmoothQuant's α (default 0.5). */
  readonly smoothAlpha?: number;
  /** Required by awq, gptq and smoothquant. */
  readonly calibration?: CalibrationData;
  /** AWQ: α grid points (default 20), calibration rows in the search loss (default 512), clip search (default on). */
  readonly awq?: { readonly grid?: number; readonly searchRows?: number; readonly clip?: boolean };
  /** GPTQ: damping fraction (default 0.01), lazy-update block (default 128). */
  readonly gptq?: { readonly dampPercent?: number; readonly blockSize?: number; readonly actOrder?: boolean };
  /** Called after each layer is quantized. */
  readonly onProgress?: (done: number, total: number, what: string) => void;
}

export function checkQuantizeOptions(o: QuantizeOptions): void {
  if (o.bits !== 4 && o.bits !== 8) throw new ArgumentError(`quantize: bits must be 4 or 8, got ${String(o.bits)}`);
  const methods = o.bits === 4 ? INT4_METHODS : INT8_METHODS;
  if (!methods.includes(o.method)) throw new ArgumentError(`quantize: --method ${o.method} is not a ${o.bits}-bit method (use ${methods.join(' or ')})`);
  if (o.bits === 4) {
    const G = o.groupSize ?? 128;
    if (!(Number.isInteger(G) && G >= 32 && G % 32 === 0)) throw new ArgumentError(`quantize: group size must be a multiple of 32, got ${G}`);
  }
  if (o.gptq?.actOrder && o.method !== 'gptq') throw new ArgumentError(`quantize: act-order is a GPTQ option, not one of ${o.method}`);
  const needsCalibration = o.method === 'awq' || o.method === 'gptq' || o.method === 'smoothquant';
  if (needsCalibration && (!o.calibration || o.calibration.windows.length === 0)) throw new ArgumentError(`quantize: method ${o.method} needs calibration text`);
}

/** Per-channel statistics of one layer's calibration inputs, plus a row sample (AWQ) or X·Xᵀ (GPTQ, on the backend). */
export class InputStats {
  rows = 0;
  readonly absSum: Float64Array;
  readonly squareSum: Float64Array;
  readonly absMax: Float64Array;
  readonly sample: Float32Array[] = [];
  sampleRows = 0;

  constructor(readonly K: number, private readonly sampleLimit: number, private readonly rowsPerBatchSample: number) {
    this.absSum = new Float64Array(K);
    this.squareSum = new Float64Array(K);
    this.absMax = new Float64Array(K);
  }

  add(x: Float32Array, rows: number): void {
    const K = this.K;
    for (let r = 0; r < rows; r++) {
      for (let k = 0; k < K; k++) {
        const v = x[r * K + k]!;
        const a = Math.abs(v);
        this.absSum[k]! += a;
        this.squareSum[k]! += v * v;
        if (a > this.absMax[k]!) this.absMax[k] = a;
      }
    }
    this.rows += rows;
    // An even stride of rows from each batch, until the sample is full.
    const take = Math.min(this.rowsPerBatchSample, rows, this.sampleLimit - this.sampleRows);
    if (take > 0) {
      const stride = Math.floor(rows / take);
      const part = new Float32Array(take * K);
      for (let i = 0; i < take; i++) part.set(x.subarray(i * stride * K, (i * stride + 1) * K), i * K);
      this.sample.push(part);
      this.sampleRows += take;
    }
  }

  mean(sum: Float64Array): Float64Array {
    return sum.map((v) => v / Math.max(1, this.rows));
  }

  sampleMatrix(): Float32Array {
    const out = new Float32Array(this.sampleRows * this.K);
    let at = 0;
    for (const part of this.sample) { out.set(part, at); at += part.length; }
    return out;
  }
}

/** Round-to-nearest INT4 of weight [N, K] (f32, n-major) through the backend's quantizer. */
export function quantizeInt4OnBackend(backend: Backend, W: Float32Array, N: number, K: number, groupSize: number): Int4HostWeight {
  const weight = backend.fromArray(W, [N, K], 'f32');
  const device = { kind: 'int4' as const, inFeatures: K, outFeatures: N, groupSize, qweight: backend.empty([N, K / 8], 'i32'), scales: backend.empty([N, K / groupSize], 'f16'), zeros: backend.empty([N, K / groupSize], 'u8') };
  try {
    backend.int4QuantizeWeights({ weight, groupSize, qweight: device.qweight, scales: device.scales, zeros: device.zeros });
    return downloadInt4(backend, device);
  } finally {
    backend.free(weight);
    freeQuantized(backend, device);
  }
}

function hostParamsCopy(model: Gpt2Model): HostParams {
  const params: HostParams = new Map();
  for (const [name, t] of model.params.download()) params.set(name, { shape: t.shape, data: Float32Array.from(t.data) });
  return params;
}

export function quantizeGpt2(model: Gpt2Model, options: QuantizeOptions): QuantizedModel {
  checkQuantizeOptions(options);
  const backend = model.backend;
  const original = model.params.download();
  const params = hostParamsCopy(model);
  const targets = gpt2QuantTargets(model);
  const groupSize = options.groupSize ?? 128;
  if (options.bits === 4) {
    for (const t of targets) {
      if (t.linear.inFeatures % groupSize !== 0) throw new ArgumentError(`quantize: group size ${groupSize} does not divide the ${t.linear.inFeatures} inputs of ${t.prefix}`);
    }
  }
  const modules = new Map<string, QuantizedHostWeight>();
  const installed: { target: QuantTarget; weight: DeviceQuantizedWeight }[] = [];
  const executor = new StepExecutor(backend);
  let done = 0;
  const progress = (what: string) => options.onProgress?.(++done, targets.length, what);
  const install = (target: QuantTarget, w: QuantizedHostWeight) => {
    modules.set(target.prefix, w);
    const weight = uploadQuantized(backend, w);
    installed.push({ target, weight });
    target.linear.quantized = quantizedForward(weight);
  };
  const uploadParam = (name: string) => backend.upload(model.params.param(name).value, params.get(name)!.data);

  try {
    if (options.bits === 8) {
      const alpha = options.method === 'smoothquant' ? options.smoothAlpha ?? 0.5 : 0;
      if (alpha > 0) smoothAll(model, executor, targets, params, options.calibration!, alpha);
      for (const t of targets) {
        const { inFeatures: K, outFeatures: N } = t.linear;
        const { q, scales } = quantizeInt8Rows(targetWeight(t, params), N, K);
        modules.set(t.prefix, { kind: 'int8', inFeatures: K, outFeatures: N, qweight: q, scales });
        progress(t.prefix);
      }
    } else if (options.method === 'rtn') {
      for (const t of targets) {
        modules.set(t.prefix, quantizeInt4OnBackend(backend, targetWeight(t, params), t.linear.outFeatures, t.linear.inFeatures, groupSize));
        progress(t.prefix);
      }
    } else {
      const calibration = options.calibration!;
      for (let layer = 0; layer < model.blocks.length; layer++) {
        const layerTargets = targets.filter((t) => t.layer === layer);
        if (options.method === 'awq') {
          const searchRows = options.awq?.searchRows ?? 512;
          const stats = collectStats(model, executor, calibration, layerTargets, searchRows);
          const changed = awqBlock(model, layer, layerTargets, stats, params, groupSize, options);
          for (const name of changed) uploadParam(name);
          for (const t of layerTargets) {
            install(t, quantizeInt4OnBackend(backend, targetWeight(t, params), t.linear.outFeatures, t.linear.inFeatures, groupSize));
            progress(t.prefix);
          }
        } else {
          const hessians = collectHessians(model, executor, calibration, layerTargets);
          try {
            for (const t of layerTargets) {
              const { inFeatures: K, outFeatures: N } = t.linear;
              install(t, gptqQuantizeOnBackend(backend, targetWeight(t, params), N, K, hessians.get(t.prefix)!, { groupSize, ...options.gptq }));
              progress(t.prefix);
            }
          } finally {
            for (const H of hessians.values()) backend.free(H);
          }
        }
      }
    }
  } finally {
    for (const { target, weight } of installed) {
      delete target.linear.quantized;
      freeQuantized(backend, weight);
    }
    executor.dispose();
    model.params.upload(original, 'the model before quantization');
  }
  const floats: HostParams = new Map([...params].filter(([name]) => !modules.has(name.replace(/\.weight$/, ''))));
  return {
    info: {
      method: options.method, bits: options.bits, ...(options.bits === 4 ? { groupSize } : { smoothAlpha: options.method === 'smoothquant' ? options.smoothAlpha ?? 0.5 : 0 }),
      ...(options.gptq?.actOrder ? { actOrder: true } : {}),
    },
    modules, floats,
  };
}

function collectStats(model: Gpt2Model, executor: StepExecutor, calibration: CalibrationData, targets: readonly QuantTarget[], sampleRows: number): Map<string, InputStats> {
  const batches = Math.ceil(calibration.windows.length / calibration.batchSize);
  const stats = new Map(targets.map((t) => [t.prefix, new InputStats(t.linear.inFeatures, sampleRows, Math.ceil(sampleRows / batches))]));
  captureLinearInputs(model, executor, calibration.windows, calibration.batchSize, targets, (t, x, rows) => stats.get(t.prefix)!.add(x, rows));
  return stats;
}

/** H = Σ XᵀX per target, accumulated by f32 GEMMs on the backend and left there (the caller frees them). */
function collectHessians(model: Gpt2Model, executor: StepExecutor, calibration: CalibrationData, targets: readonly QuantTarget[]): Map<string, Tensor> {
  const backend = model.backend;
  const sums = new Map(targets.map((t) => [t.prefix, { H: backend.empty([t.linear.inFeatures, t.linear.inFeatures], 'f32'), started: false }]));
  try {
    captureLinearInputs(model, executor, calibration.windows, calibration.batchSize, targets, (t, x, rows) => {
      const s = sums.get(t.prefix)!;
      const X = backend.fromArray(x, [rows, t.linear.inFeatures], 'f32');
      backend.gemm({ a: X, b: X, out: s.H, transA: true, beta: s.started ? 1 : 0 });
      s.started = true;
      backend.free(X);
    });
    return new Map([...sums].map(([prefix, s]) => [prefix, s.H]));
  } catch (e) {
    for (const s of sums.values()) backend.free(s.H);
    throw e;
  }
}

/**
 * AWQ on one GPT-2 block: scales for QKV (folded into ln_1), the attention output (folded into the V
 * columns of c_attn) and the MLP input (folded into ln_2); the MLP output follows a GELU and keeps s = 1.
 * Then clipping for all four. Returns the float parameters it changed (besides the four weights).
 */
function awqBlock(model: Gpt2Model, layer: number, targets: readonly QuantTarget[], stats: Map<string, InputStats>, params: HostParams, G: number, options: QuantizeOptions): string[] {
  const backend = model.backend, dtype = model.dtype;
  const byRole = (role: string) => targets.find((t) => t.role === role)!;
  const qkv = byRole('qkv'), attnOut = byRole('attn_out'), fc1 = byRole('fc1'), fc2 = byRole('fc2');
  const h = `transformer.h.${layer}`;
  const weights = new Map(targets.map((t) => [t.prefix, targetWeight(t, params)]));
  const inputScales = new Map<string, Float64Array>();
  const search = (t: QuantTarget) => {
    const st = stats.get(t.prefix)!;
    const result = searchAwqScales(backend, dtype, st.sampleMatrix(), st.sampleRows, weights.get(t.prefix)!, t.linear.outFeatures, t.linear.inFeatures, st.mean(st.absSum), { groupSize: G, ...(options.awq?.grid ? { grid: options.awq.grid } : {}) });
    scaleInputChannels(weights.get(t.prefix)!, t.linear.outFeatures, t.linear.inFeatures, result.scales);
    inputScales.set(t.prefix, result.scales);
    return result.scales;
  };
  const changed: string[] = [];
  const foldNorm = (norm: string, s: Float64Array) => {
    foldIntoLayerNorm(params.get(`${norm}.weight`)!.data, params.get(`${norm}.bias`)!.data, s);
    changed.push(`${norm}.weight`, `${norm}.bias`);
  };
  foldNorm(`${h}.ln_1`, search(qkv));
  // The attention output's input is P·V: dividing V's output columns (rows of the n-major QKV weight, and
  // the bias) by s divides it by s.
  const sOut = search(attnOut);
  const C = attnOut.linear.inFeatures, K = qkv.linear.inFeatures;
  const wQkv = weights.get(qkv.prefix)!, bQkv = params.get(`${qkv.prefix}.bias`)!.data;
  for (let j = 0; j < C; j++) {
    for (let k = 0; k < K; k++) wQkv[(2 * C + j) * K + k] = wQkv[(2 * C + j) * K + k]! / sOut[j]!;
    bQkv[2 * C + j] = bQkv[2 * C + j]! / sOut[j]!;
  }
  changed.push(`${qkv.prefix}.bias`);
  foldNorm(`${h}.ln_2`, search(fc1));
  for (const t of [qkv, attnOut, fc1, fc2]) {
    const w = weights.get(t.prefix)!;
    if (options.awq?.clip !== false) {
      const st = stats.get(t.prefix)!, s = inputScales.get(t.prefix);
      const meanSquare = st.mean(st.squareSum).map((v, k) => (s ? v / (s[k]! * s[k]!) : v));
      clipWeights(backend, w, t.linear.outFeatures, t.linear.inFeatures, G, meanSquare);
    }
    setTargetWeight(t, params, w);
  }
  return changed;
}

/** SmoothQuant for every block: one float pass for per-channel maxima of the QKV and MLP inputs, then the folds. */
function smoothAll(model: Gpt2Model, executor: StepExecutor, targets: readonly QuantTarget[], params: HostParams, calibration: CalibrationData, alpha: number): void {
  const smoothed = targets.filter((t) => t.role === 'qkv' || t.role === 'fc1');
  const stats = collectStats(model, executor, calibration, smoothed, 0);
  for (const t of smoothed) {
    const { inFeatures: K, outFeatures: N } = t.linear;
    const W = targetWeight(t, params);
    const s = smoothingFactors(stats.get(t.prefix)!.absMax, W, N, K, alpha);
    const norm = `transformer.h.${t.layer}.${t.role === 'qkv' ? 'ln_1' : 'ln_2'}`;
    foldIntoLayerNorm(params.get(`${norm}.weight`)!.data, params.get(`${norm}.bias`)!.data, s);
    scaleInputChannels(W, N, K, s);
    setTargetWeight(t, params, W);
  }
}
