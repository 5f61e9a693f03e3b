// Calibration: running a GPT-2 forward over sample text and handing the inputs of chosen linear layers
// to the quantizer, and the held-out perplexity that judges the result.
//
// Capture hooks a Linear the same way quantized weights do (Linear.quantized): the hook issues the
// layer's own float GEMM — so the step computes exactly what it would without it — and, when the step
// runs for real (not while it is traced for memory planning), downloads the layer's input [rows, K] to
// the host. Layers already quantized keep their quantized forwards, so a layer-by-layer quantizer
// (GPTQ, AWQ here) calibrates each layer on the outputs of the quantized layers before it.
//
// Steps run eagerly through nn/step-context.ts (trace → plan → run in one arena), without graphs:
// calibration downloads in the middle of a step, and evaluation runs each shape only a few times.

import type { Arena, Backend } from '../backend/backend.js';
import { ArgumentError } from '../errors.js';
import type { TokenArray } from '../io/token-file.js';
import type { Gpt2Model } from '../models/gpt2-model.js';
import type { QuantizedForward } from '../nn/linear.js';
import type { StepContext, StepFunction } from '../nn/step-context.js';
import { planStep, runStep } from '../nn/step-context.js';
import type { Tensor } from '../tensor.js';
import { evaluationBatches } from '../train/data.js';
import type { QuantTarget } from './model.js';

/** Runs step functions on one model's backend, reusing (and growing) one arena. */
export class StepExecutor {
  private arena: Arena | undefined;

  constructor(readonly backend: Backend) {}

  run<R>(step: StepFunction<R>): R {
    const plan = planStep(this.backend, step, false);
    if (!this.arena || this.arena.bytes < plan.arena.arenaBytes) {
      this.arena?.free();
      this.arena = this.backend.createArena(Math.max(plan.arena.arenaBytes, 256));
    }
    return runStep(this.backend, plan, this.arena, { seed: 0n, baseOffset: 0n, training: false }, step);
  }

  dispose(): void {
    this.arena?.free();
    this.arena = undefined;
  }
}

/** Calibration windows: `count` sequences of `seqLen` tokens spread evenly over `tokens` (deterministic). */
export function calibrationWindows(tokens: TokenArray, count: number, seqLen: number): Int32Array[] {
  if (!Number.isInteger(count) || count < 1 || !Number.isInteger(seqLen) || seqLen < 1) {
    throw new ArgumentError(`calibration: sample count and length must be positive integers, got ${count} × ${seqLen}`);
  }
  if (tokens.length < seqLen) throw new ArgumentError(`calibration: ${tokens.length} tokens do not fill one window of ${seqLen}`);
  if (count > tokens.length - seqLen + 1) throw new ArgumentError(`calibration: ${tokens.length} tokens hold ${tokens.length - seqLen + 1} distinct windows of ${seqLen}, not ${count}`);
  const stride = count > 1 ? Math.floor((tokens.length - seqLen) / (count - 1)) : 0;
  return Array.from({ length: count }, (_, i) => Int32Array.from(tokens.subarray(i * stride, i * stride + seqLen)));
}

/** A hook that runs a layer's float GEMM and reports its input (see the file comment). */
class CaptureForward implements QuantizedForward {
  constructor(private readonly target: QuantTarget, private readonly sink: (target: QuantTarget, x: Float32Array, rows: number) => void) {}

  forward(ctx: StepContext, x: Tensor, out: Tensor, epilogue: 'none' | 'bias' | 'gelu_bias', bias: Tensor | undefined): void {
    const layer = this.target.linear;
    ctx.ops.gemm({ a: x, b: layer.weight.value, out, transB: layer.layout === 'out_in', epilogue, ...(epilogue !== 'none' && bias ? { bias } : {}) });
    if (!ctx.tracing) this.sink(this.target, ctx.ops.download(x) as Float32Array, x.numel / layer.inFeatures);
  }
}

/**
 * Runs the model over `windows` (batches of `batchSize`) with `targets` hooked; `sink` gets each
 * target's input per batch as f32 [rows, K]. The hooks are removed afterwards (targets that were
 * quantized get their quantized forward back).
 */
export function captureLinearInputs(
  model: Gpt2Model, executor: StepExecutor, windows: readonly Int32Array[], batchSize: number,
  targets: readonly QuantTarget[], sink: (target: QuantTarget, x: Float32Array, rows: number) => void,
): void {
  const saved = targets.map((t) => t.linear.quantized);
  for (const t of targets) t.linear.quantized = new CaptureForward(t, sink);
  try {
    for (let i = 0; i < windows.length; i += batchSize) forwardTokens(model, executor, windows.slice(i, i + batchSize));
  } finally {
    targets.forEach((t, i) => {
      if (saved[i]) t.linear.quantized = saved[i];
      else delete t.linear.quantized;
    });
  }
}

/** One forward of the model (logits only) over equal-length windows. */
function forwardTokens(model: Gpt2Model, executor: StepExecutor, windows: readonly Int32Array[]): void {
  const backend = model.backend, B = windows.length, L = windows[0]!.length;
  const flat = new Int32Array(B * L);
  windows.forEach((w, b) => flat.set(w, b * L));
  const tokens = backend.fromArray(flat, [B, L], 'i32');
  const logits = backend.empty([B * L, model.logitsWidth], model.dtype);
  try {
    executor.run((ctx) => model.logitsStep(ctx, tokens, logits));
    backend.synchronize();
  } finally {
    backend.free(tokens);
    backend.free(logits);
  }
}

export interface PerplexityOptions {
  readonly batchSize: number;
  readonly seqLen: number;
  /** Evaluate on the first batches only. */
  readonly maxBatches?: number;
}

export interface PerplexityResult {
  /** Mean cross-entropy per predicted token (nats). */
  readonly loss: number;
  /** exp(loss). */
  readonly perplexity: number;
  readonly tokens: number;
}

/** Held-out perplexity: mean next-token cross-entropy over consecutive windows of `tokens` (the trainer's evaluation batches). */
export function evaluatePerplexity(model: Gpt2Model, executor: StepExecutor, tokens: TokenArray, options: PerplexityOptions): PerplexityResult {
  const backend = model.backend;
  let sum = 0, count = 0;
  for (const b of evaluationBatches(tokens, options)) {
    const rows = b.batchSize * b.seqLen;
    const made = {
      tokens: backend.fromArray(b.inputs, [b.batchSize, b.seqLen], 'i32'),
      targets: backend.fromArray(b.targets, [rows], 'i32'),
      loss: backend.empty([rows], 'f32'),
      lengths: backend.fromArray(new Int32Array(b.batchSize).fill(b.seqLen), [b.batchSize], 'i32'),
    };
    try {
      executor.run((ctx) => model.lossStep(ctx, { batch: b.batchSize, seqLen: b.seqLen, ...made, lossGradScale: 1 }, false));
      const losses = backend.download(made.loss) as Float32Array;
      for (let i = 0; i < rows; i++) sum += losses[i]!;
      count += rows;
    } finally {
      for (const t of Object.values(made)) backend.free(t);
    }
  }
  const loss = sum / count;
  return { loss, perplexity: Math.exp(loss), tokens: count };
}
