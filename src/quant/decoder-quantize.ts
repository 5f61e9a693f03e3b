// Quantizing a decoder model as the inference engine holds it (a DecoderModel: GPT-2 or Llama family):
// per layer its four projections — QKV (Llama: q, k, v stacked), O, the MLP's first product (Llama: gate
// and up stacked) and down — by quantize.ts's methods:
//   INT4 W4A16  rtn | awq | gptq        INT8 W8A8  smoothquant | rtn
// Calibration runs through the engine's prefill (DecodeEngine.forwardWindows), whose capture hook hands
// each projection's input to the host. AWQ and GPTQ go layer by layer: layer l is calibrated with layers
// 0 … l−1 already running their quantized weights (model.quantization), so later layers see — and GPTQ
// compensates for — the error of the earlier ones. SmoothQuant needs one float pass for input maxima.
//
// AWQ's input scales, per layer (AutoAWQ's scheme, for both families):
//   QKV input    folded into norm1 (γ; and β for a LayerNorm)
//   O input      folded into V's rows of the QKV weight (and bias) — without grouped-query attention
//                only: with fewer K/V heads a V row feeds several heads' O inputs, which would need one
//                scale, so with GQA the O projection keeps s = 1 (as AutoAWQ does)
//   MLP input    folded into norm2
//   down input   folded into a gated MLP's up rows (act(g)·(u/s) = (act(g)·u)/s); GPT-2's down input
//                follows a GELU, so it keeps s = 1
// then each projection's clip search, then round-to-nearest.
// A stacked matrix is quantized as one: round-to-nearest groups run along a row's inputs, and GPTQ
// treats rows independently given their shared Hessian; the result splits it into its HF modules.
// The model is left as it was: its weights restored, its quantization dropped.

import type { Backend } from '../backend/backend.js';
import { quantizeInt8Rows } from '../backend/cpu/quant-math.js';
import { ArgumentError } from '../errors.js';
import { DecodeEngine } from '../infer/engine.js';
import type { DecoderModel, NormWeights } from '../infer/model.js';
import type { ProjectionRole, QuantizedLayer } from '../infer/quantized.js';
import { PROJECTION_ROLES, projectionWeightNames } from '../infer/quantized.js';
import type { TokenArray } from '../io/token-file.js';
import type { Tensor } from '../tensor.js';
import { evaluationBatches } from '../train/data.js';
import { clipWeights, searchAwqScales } from './awq.js';
import type { PerplexityOptions, PerplexityResult } from './calibration.js';
import { freeQuantized, uploadQuantized } from './device.js';
import { gptqQuantizeOnBackend } from './gptq-device.js';
import type { HostParams, QuantizationInfo, QuantizedModel } from './model.js';
import type { CalibrationData, QuantizeOptions } from './quantize.js';
import { checkQuantizeOptions, InputStats, quantizeInt4OnBackend } from './quantize.js';
import { foldIntoLayerNorm, scaleInputChannels, smoothingFactors } from './smoothquant.js';
import type { Int4HostWeight, QuantizedHostWeight } from './weights.js';
import { transpose } from './weights.js';

/** Layer l's projections as host copies [N, K] (n-major f32), modified in place by the folds. */
type LayerMatrices = Record<ProjectionRole, Float32Array>;

/** Quantizes `model`'s projections (see the file comment); the model is unchanged afterwards. */
export function quantizeDecoder(model: DecoderModel, options: QuantizeOptions): QuantizedModel {
  checkQuantizeOptions(options);
  if (model.tensorParallel) throw new ArgumentError('quantize: a tensor-parallel model cannot be quantized (load it on one device)');
  if (model.quantization) throw new ArgumentError(`quantize: ${model.source} is already quantized`);
  const b = model.backend, arch = model.arch, G = options.groupSize ?? 128;
  if (options.bits === 4) {
    for (const role of PROJECTION_ROLES) {
      const K = model.layers[0]![role].shape[1]!;
      if (K % G !== 0) throw new ArgumentError(`quantize: group size ${G} does not divide the ${K} inputs of the ${role} projections`);
    }
  }
  const info: QuantizationInfo = {
    method: options.method, bits: options.bits,
    ...(options.bits === 4 ? { groupSize: G } : { smoothAlpha: options.method === 'smoothquant' ? options.smoothAlpha ?? 0.5 : 0 }),
    ...(options.gptq?.actOrder ? { actOrder: true } : {}),
  };
  // The folds change only the norms and the QKV / MLP-in biases on the device (the matrices are changed
  // in host copies): those are restored at the end.
  const touched = model.layers.flatMap((layer) => [layer.norm1.gamma, layer.norm1.beta, layer.norm2.gamma, layer.norm2.beta, layer.qkvBias, layer.upBias])
    .filter((t): t is Tensor => t !== undefined);
  const original = touched.map((t) => Float32Array.from(b.download(t) as Float32Array));
  const installed: QuantizedLayer[] = arch.layerNames.map(() => ({}));
  const results: Partial<Record<ProjectionRole, QuantizedHostWeight>>[] = arch.layerNames.map(() => ({}));
  const total = PROJECTION_ROLES.length * arch.layers;
  let done = 0;
  const finish = (l: number, role: ProjectionRole, w: QuantizedHostWeight, install: boolean) => {
    results[l]![role] = w;
    if (install) installed[l]![role] = uploadQuantized(b, w);
    options.onProgress?.(++done, total, `${l} ${role}`);
  };
  const calibrated = options.method !== 'rtn';
  let engine = calibrated ? calibrationEngine(model, options.calibration!) : undefined;
  try {
    if (options.bits === 8) {
      const alpha = options.method === 'smoothquant' ? options.smoothAlpha ?? 0.5 : 0;
      const smoothing = alpha > 0 ? smoothingStats(model, engine!, options.calibration!) : undefined;
      model.layers.forEach((layer, l) => {
        const W = layerMatrices(model, l);
        if (smoothing) {
          for (const [role, norm] of [['qkv', layer.norm1], ['up', layer.norm2]] as const) {
            const [N, K] = dims(model, role);
            const s = smoothingFactors(smoothing.get(`${l}.${role}`)!.absMax, W[role], N, K, alpha);
            foldIntoNorm(b, norm, s);
            scaleInputChannels(W[role], N, K, s);
          }
        }
        for (const role of PROJECTION_ROLES) {
          const [N, K] = dims(model, role);
          const { q, scales } = quantizeInt8Rows(W[role], N, K);
          finish(l, role, { kind: 'int8', inFeatures: K, outFeatures: N, qweight: q, scales }, false);
        }
      });
    } else if (options.method === 'rtn') {
      model.layers.forEach((_, l) => {
        const W = layerMatrices(model, l);
        for (const role of PROJECTION_ROLES) finish(l, role, quantizeInt4OnBackend(b, W[role], ...dims(model, role), G), false);
      });
    } else {
      // Layers before l run quantized while layer l is calibrated.
      model.quantization = { info, layers: installed };
      for (let l = 0; l < arch.layers; l++) {
        // An engine sizes its buffer for gathered inputs by the act-order weights it finds when made.
        if (options.gptq?.actOrder && l > 0) {
          engine!.dispose();
          engine = calibrationEngine(model, options.calibration!);
        }
        // Each projection is installed (and counted for the progress bar) as soon as it is quantized.
        const done = (role: ProjectionRole, w: Int4HostWeight) => finish(l, role, w, true);
        if (options.method === 'awq') awqLayer(model, engine!, l, options, G, done);
        else gptqLayer(model, engine!, l, options, G, done);
      }
    }
    return { info, modules: splitModules(model, results), floats: floatParams(model) };
  } finally {
    engine?.dispose();
    for (const layer of installed) for (const w of Object.values(layer)) freeQuantized(b, w);
    model.quantization = undefined;
    touched.forEach((t, i) => b.upload(t, original[i]!));
  }
}

/** [N outputs, K inputs] of a role's (stacked) projection. */
function dims(model: DecoderModel, role: ProjectionRole): [number, number] {
  const [N, K] = model.layers[0]![role].shape as [number, number];
  return [N, K];
}

function layerMatrices(model: DecoderModel, l: number): LayerMatrices {
  const layer = model.layers[l]!, b = model.backend;
  const copy = (t: Tensor) => Float32Array.from(b.download(t) as Float32Array);
  return { qkv: copy(layer.qkv), out: copy(layer.out), up: copy(layer.up), down: copy(layer.down) };
}

/** Divides a norm's γ (and β) by s on the device. */
function foldIntoNorm(b: Backend, norm: NormWeights, s: ArrayLike<number>): void {
  const gamma = Float32Array.from(b.download(norm.gamma) as Float32Array);
  const beta = norm.beta ? Float32Array.from(b.download(norm.beta) as Float32Array) : undefined;
  foldIntoLayerNorm(gamma, beta, s);
  b.upload(norm.gamma, gamma);
  if (norm.beta) b.upload(norm.beta, beta!);
}

/** Divides rows [first, first + s.length) of a weight [N, K] (host) and of its bias (device) by s. */
function divideRows(W: Float32Array, K: number, first: number, s: ArrayLike<number>, b: Backend, bias: Tensor | undefined): void {
  for (let j = 0; j < s.length; j++) for (let k = 0; k < K; k++) W[(first + j) * K + k] = W[(first + j) * K + k]! / s[j]!;
  if (!bias) return;
  const values = Float32Array.from(b.download(bias) as Float32Array);
  for (let j = 0; j < s.length; j++) values[first + j] = values[first + j]! / s[j]!;
  b.upload(bias, values);
}

// --- calibration through the engine ---------------------------------------------------------------

function calibrationEngine(model: DecoderModel, calibration: CalibrationData): DecodeEngine {
  const L = calibration.windows[0]!.length, B = Math.min(calibration.batchSize, calibration.windows.length);
  if (L < 2 || L > model.arch.maxPositions) throw new ArgumentError(`quantize: calibration windows of ${L} tokens; the model takes 2 to ${model.arch.maxPositions}`);
  return new DecodeEngine(model, { maxBatch: B, maxLen: L, maxPrefillTokens: B * L, graphs: false });
}

/**
 * Runs every calibration window; `sink` gets the inputs [rows, K] of the projections `wanted` picks, on the
 * device (the engine's buffer: valid during the call, and for work queued behind it).
 */
function captureDeviceInputs(
  engine: DecodeEngine, calibration: CalibrationData, wanted: (layer: number, role: ProjectionRole) => boolean,
  sink: (layer: number, role: ProjectionRole, x: Tensor) => void,
): void {
  const B = engine.maxBatch;
  for (let i = 0; i < calibration.windows.length; i += B) {
    const windows = calibration.windows.slice(i, i + B).map((w) => Array.from(w));
    engine.forwardWindows(windows, { capture: (layer, role, x) => { if (wanted(layer, role)) sink(layer, role, x); } });
  }
}

/** As captureDeviceInputs, the inputs downloaded to the host (f32). */
function captureInputs(
  model: DecoderModel, engine: DecodeEngine, calibration: CalibrationData, wanted: (layer: number, role: ProjectionRole) => boolean,
  sink: (layer: number, role: ProjectionRole, x: Float32Array, rows: number) => void,
): void {
  captureDeviceInputs(engine, calibration, wanted, (layer, role, x) => sink(layer, role, model.backend.download(x) as Float32Array, x.shape[0]!));
}

function batchesOf(calibration: CalibrationData, engine: DecodeEngine): number {
  return Math.ceil(calibration.windows.length / engine.maxBatch);
}

/** Per-channel maxima of every layer's QKV and MLP inputs (keys `${layer}.${role}`), one float pass. */
function smoothingStats(model: DecoderModel, engine: DecodeEngine, calibration: CalibrationData): Map<string, InputStats> {
  const stats = new Map<string, InputStats>();
  captureInputs(model, engine, calibration, (_, role) => role === 'qkv' || role === 'up', (l, role, x, rows) => {
    const key = `${l}.${role}`;
    if (!stats.has(key)) stats.set(key, new InputStats(dims(model, role)[1], 0, 0));
    stats.get(key)!.add(x, rows);
  });
  return stats;
}

/** A projection of the layer being quantized, handed over as soon as it is done. */
type ProjectionDone = (role: ProjectionRole, w: Int4HostWeight) => void;

/** AWQ on layer l (see the file comment); hands each of its four quantized projections to `done`. */
function awqLayer(model: DecoderModel, engine: DecodeEngine, l: number, options: QuantizeOptions, G: number, done: ProjectionDone): void {
  const b = model.backend, arch = model.arch, layer = model.layers[l]!, calibration = options.calibration!;
  const searchRows = options.awq?.searchRows ?? 512, batches = batchesOf(calibration, engine);
  const stats = new Map(PROJECTION_ROLES.map((role) => [role, new InputStats(dims(model, role)[1], searchRows, Math.ceil(searchRows / batches))]));
  captureInputs(model, engine, calibration, (layerIndex) => layerIndex === l, (_, role, x, rows) => stats.get(role)!.add(x, rows));
  const W = layerMatrices(model, l);
  const inputScales = new Map<ProjectionRole, Float64Array>();
  const search = (role: ProjectionRole): Float64Array => {
    const st = stats.get(role)!, [N, K] = dims(model, role);
    const { scales } = searchAwqScales(b, model.dtype, st.sampleMatrix(), st.sampleRows, W[role], N, K, st.mean(st.absSum), { groupSize: G, ...(options.awq?.grid ? { grid: options.awq.grid } : {}) });
    scaleInputChannels(W[role], N, K, scales);
    inputScales.set(role, scales);
    return scales;
  };
  foldIntoNorm(b, layer.norm1, search('qkv'));
  if (arch.heads === arch.kvHeads) {
    // O's input channel j is V's output row j (P·V): V's rows start after the query and key rows.
    const vFirst = (arch.heads + arch.kvHeads) * arch.headDim;
    divideRows(W.qkv, arch.hidden, vFirst, search('out'), b, layer.qkvBias);
  }
  foldIntoNorm(b, layer.norm2, search('up'));
  if (arch.gatedMlp) divideRows(W.up, arch.hidden, arch.ffn, search('down'), b, layer.upBias);
  for (const role of PROJECTION_ROLES) {
    const [N, K] = dims(model, role);
    if (options.awq?.clip !== false) {
      const st = stats.get(role)!, s = inputScales.get(role);
      clipWeights(b, W[role], N, K, G, st.mean(st.squareSum).map((v, k) => (s ? v / (s[k]! * s[k]!) : v)));
    }
    done(role, quantizeInt4OnBackend(b, W[role], N, K, G));
  }
}

/**
 * GPTQ on layer l: H = Σ XᵀX per projection (f32 GEMMs on the backend), then gptq-device.ts — its
 * factorization and updates as backend GEMMs too, which at a 1B model's sizes is the difference between
 * minutes and an hour or more a model on the host.
 */
function gptqLayer(model: DecoderModel, engine: DecodeEngine, l: number, options: QuantizeOptions, G: number, done: ProjectionDone): void {
  const b = model.backend;
  const sums = new Map(PROJECTION_ROLES.map((role) => {
    const K = dims(model, role)[1];
    return [role, { H: b.empty([K, K], 'f32'), started: false }];
  }));
  try {
    // XᵀX from an f32 copy made on the device (the captured rows are in the run's dtype).
    captureDeviceInputs(engine, options.calibration!, (layerIndex) => layerIndex === l, (_, role, x) => {
      const s = sums.get(role)!, X = b.empty([x.shape[0]!, dims(model, role)[1]], 'f32');
      b.copy(x, X);
      b.gemm({ a: X, b: X, out: s.H, transA: true, beta: s.started ? 1 : 0 });
      s.started = true;
      b.free(X);
    });
    const W = layerMatrices(model, l);
    for (const role of PROJECTION_ROLES) {
      const [N, K] = dims(model, role);
      done(role, gptqQuantizeOnBackend(b, W[role], N, K, sums.get(role)!.H, { groupSize: G, ...options.gptq }));
    }
  } finally {
    for (const s of sums.values()) b.free(s.H);
  }
}

// --- the result in HF names -----------------------------------------------------------------------

/** Rows [first, first + rows) of a host weight. */
export function hostWeightRows(w: QuantizedHostWeight, first: number, rows: number): QuantizedHostWeight {
  const K = w.inFeatures;
  if (first < 0 || rows < 1 || first + rows > w.outFeatures) throw new ArgumentError(`rows ${first}..${first + rows - 1} of a weight with ${w.outFeatures} rows`);
  if (w.kind === 'int8') {
    return { kind: 'int8', inFeatures: K, outFeatures: rows, qweight: w.qweight.slice(first * K, (first + rows) * K), scales: w.scales.slice(first, first + rows) };
  }
  const words = K / 8, groups = K / w.groupSize;
  return {
    kind: 'int4', inFeatures: K, outFeatures: rows, groupSize: w.groupSize,
    qweight: w.qweight.slice(first * words, (first + rows) * words),
    scales: w.scales.slice(first * groups, (first + rows) * groups), zeros: w.zeros.slice(first * groups, (first + rows) * groups),
    ...(w.inputOrder ? { inputOrder: w.inputOrder } : {}),
  };
}

/** Each layer's stacked projections split into their HF modules (q/k/v, gate/up), by module prefix. */
function splitModules(model: DecoderModel, results: readonly Partial<Record<ProjectionRole, QuantizedHostWeight>>[]): Map<string, QuantizedHostWeight> {
  const specs = new Map(model.arch.weights.map((w) => [w.name, w]));
  const modules = new Map<string, QuantizedHostWeight>();
  model.arch.layerNames.forEach((names, l) => {
    const parts = projectionWeightNames(names);
    for (const role of PROJECTION_ROLES) {
      const w = results[l]![role]!;
      let first = 0;
      for (const name of parts[role]) {
        const rows = specs.get(name)!.shape[0]!;
        modules.set(name.replace(/\.weight$/, ''), parts[role].length === 1 ? w : hostWeightRows(w, first, rows));
        first += rows;
      }
    }
  });
  return modules;
}

/** Every float parameter except the projections' weights, as the model holds it now, in checkpoint layout. */
function floatParams(model: DecoderModel): HostParams {
  const projections = new Set(model.arch.layerNames.flatMap((n) => Object.values(projectionWeightNames(n)).flat()));
  const params: HostParams = new Map();
  for (const spec of model.arch.weights) {
    if (projections.has(spec.name)) continue;
    const data = Float32Array.from(model.backend.download(model.fileView(spec.name)) as Float32Array);
    const [rows, cols] = spec.shape;
    params.set(spec.name, { shape: spec.fileShape ?? spec.shape, data: spec.transposed ? transpose(data, rows!, cols!) : data });
  }
  return params;
}

// --- held-out perplexity --------------------------------------------------------------------------

/**
 * Held-out perplexity of the model as it runs now (quantized or not): mean next-token cross-entropy over
 * consecutive windows of `tokens` (the trainer's evaluation batches), through the engine's prefill.
 */
export function evaluateDecoderPerplexity(model: DecoderModel, tokens: TokenArray, options: PerplexityOptions): PerplexityResult {
  const b = model.backend, { batchSize: B, seqLen: L } = options;
  const engine = new DecodeEngine(model, { maxBatch: B, maxLen: Math.max(2, L), maxPrefillTokens: B * L, graphs: false });
  let sum = 0, count = 0;
  try {
    for (const batch of evaluationBatches(tokens, options)) {
      const rows = B * L;
      const windows = Array.from({ length: B }, (_, r) => Array.from(batch.inputs.subarray(r * L, (r + 1) * L)));
      const targets = b.fromArray(batch.targets, [rows], 'i32'), loss = b.empty([rows], 'f32'), lse = b.empty([rows], 'f32');
      try {
        engine.forwardWindows(windows, { logits: (logits) => b.crossEntropyForward({ logits, targets, loss, lse, classes: model.vocabSize }) });
        const losses = b.download(loss) as Float32Array;
        for (let i = 0; i < rows; i++) sum += losses[i]!;
        count += rows;
      } finally {
        for (const t of [targets, loss, lse]) b.free(t);
      }
    }
  } finally {
    engine.dispose();
  }
  const loss = sum / count;
  return { loss, perplexity: Math.exp(loss), tokens: count };
}
