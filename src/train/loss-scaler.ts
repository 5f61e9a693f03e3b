// Loss scaling for mixed precision. fp16 has 5 exponent bits: gradients below ~6e-8 flush to zero. So
// the loss is multiplied by `scale` before backward (gradients grow by the same factor) and the
// optimizer multiplies gradients by 1/scale. Too large a scale overflows to inf/NaN; then the update
// is skipped (the weights and the Adam moments stay untouched) and the scale is halved. After
// `growthInterval` consecutive finite steps the scale doubles again, probing for the largest safe
// value (Micikevicius et al., "Mixed Precision Training", 2018; PyTorch's GradScaler does the same).
//
// bf16 and f32 have f32's exponent range and need no scaling: the 'none' scaler has scale 1. It still
// reports a step with non-finite gradients as skipped, so one bad batch never writes NaN into the
// weights; `consecutiveSkips` lets the trainer stop a run that has truly diverged.

import { ArgumentError } from '../errors.js';

export interface DynamicLossScalerOptions {
  /** Default 2^16. */
  initialScale?: number;
  /** Multiplier on overflow; default 0.5. */
  backoffFactor?: number;
  /** Multiplier after growthInterval good steps; default 2. */
  growthFactor?: number;
  /** Consecutive finite steps before growing; default 2000. */
  growthInterval?: number;
  /** The scale never goes below this (default 1) ... */
  minScale?: number;
  /** ... nor above this (default 2^24: larger scales overflow the fp16 activations' gradients anyway). */
  maxScale?: number;
}

export type DynamicLossScalerConfig = { kind: 'dynamic' } & Required<DynamicLossScalerOptions>;
export type LossScalerConfig = { kind: 'none' } | DynamicLossScalerConfig;

/** Everything needed to resume exactly; plain JSON. */
export interface LossScalerState {
  readonly config: LossScalerConfig;
  readonly scale: number;
  /** Finite steps since the last overflow or growth. */
  readonly goodSteps: number;
  /** Skipped steps in a row (0 after any applied step). */
  readonly consecutiveSkips: number;
  /** Skipped steps since the start of training. */
  readonly totalSkips: number;
}

export interface LossScaler {
  /** Multiply the loss (or the loss gradient) by this before backward. */
  readonly scale: number;
  /** 1 / scale: the factor that unscales gradients in the optimizer. */
  readonly inverseScale: number;
  readonly consecutiveSkips: number;
  readonly totalSkips: number;
  /**
   * Call once per step after backward with whether any gradient was inf or NaN. Returns whether the
   * optimizer update must be skipped; adjusts the scale for the next step.
   */
  update(foundNonFinite: boolean): { skipped: boolean };
  state(): LossScalerState;
}

const DEFAULTS: Required<DynamicLossScalerOptions> = {
  initialScale: 2 ** 16, backoffFactor: 0.5, growthFactor: 2, growthInterval: 2000, minScale: 1, maxScale: 2 ** 24,
};

/** The scaler a dtype needs: dynamic for f16, none for bf16 and f32. */
export function lossScalerFor(dtype: 'f32' | 'f16' | 'bf16', options: DynamicLossScalerOptions = {}): LossScaler {
  return dtype === 'f16' ? createDynamicLossScaler(options) : createNoLossScaler();
}

export function createNoLossScaler(): LossScaler {
  return new Scaler({ kind: 'none' }, 1, 0, 0, 0);
}

export function createDynamicLossScaler(options: DynamicLossScalerOptions = {}): LossScaler {
  const config = validateDynamicConfig({ kind: 'dynamic', ...DEFAULTS, ...options }, 'loss scaler');
  if (config.initialScale < config.minScale || config.initialScale > config.maxScale) {
    throw new ArgumentError(`loss scaler: initialScale ${config.initialScale} is outside [minScale, maxScale] = [${config.minScale}, ${config.maxScale}]`);
  }
  return new Scaler(config, config.initialScale, 0, 0, 0);
}

/** Rebuilds a scaler from `state()` output (e.g. from a checkpoint), validating every field. */
export function restoreLossScaler(state: LossScalerState, source = 'loss scaler state'): LossScaler {
  const fail = (message: string): never => { throw new ArgumentError(`${source}: ${message}`); };
  if (typeof state !== 'object' || state === null) fail('must be an object');
  const config = validateConfig(state.config, source);
  const count = (name: 'goodSteps' | 'consecutiveSkips' | 'totalSkips'): number => {
    const v = state[name];
    if (!Number.isSafeInteger(v) || v < 0) fail(`${name} must be an integer >= 0, got ${JSON.stringify(v)}`);
    return v;
  };
  const scale = state.scale;
  if (config.kind === 'none' ? scale !== 1 : !(Number.isFinite(scale) && scale >= config.minScale && scale <= config.maxScale)) {
    fail(`scale ${JSON.stringify(scale)} is not valid for a '${config.kind}' scaler`);
  }
  return new Scaler(config, scale, count('goodSteps'), count('consecutiveSkips'), count('totalSkips'));
}

function validateConfig(config: LossScalerConfig, source: string): LossScalerConfig {
  if (typeof config !== 'object' || config === null) throw new ArgumentError(`${source}: config must be an object`);
  if (config.kind === 'none') return { kind: 'none' };
  if (config.kind !== 'dynamic') throw new ArgumentError(`${source}: kind must be 'none' or 'dynamic', got ${JSON.stringify((config as { kind: unknown }).kind)}`);
  return validateDynamicConfig(config, source);
}

function validateDynamicConfig(config: DynamicLossScalerConfig, source: string): DynamicLossScalerConfig {
  const fail = (message: string): never => { throw new ArgumentError(`${source}: ${message}`); };
  const positive = (name: keyof DynamicLossScalerOptions): number => {
    const v = config[name];
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) fail(`${name} must be a finite number > 0, got ${JSON.stringify(v)}`);
    return v;
  };
  const c = {
    kind: 'dynamic' as const,
    initialScale: positive('initialScale'), backoffFactor: positive('backoffFactor'), growthFactor: positive('growthFactor'),
    growthInterval: positive('growthInterval'), minScale: positive('minScale'), maxScale: positive('maxScale'),
  };
  if (c.backoffFactor >= 1) fail(`backoffFactor must be < 1, got ${c.backoffFactor}`);
  if (c.growthFactor <= 1) fail(`growthFactor must be > 1, got ${c.growthFactor}`);
  if (!Number.isSafeInteger(c.growthInterval)) fail(`growthInterval must be an integer >= 1, got ${c.growthInterval}`);
  if (c.minScale > c.maxScale) fail(`minScale ${c.minScale} exceeds maxScale ${c.maxScale}`);
  return c;
}

class Scaler implements LossScaler {
  constructor(
    private readonly config: LossScalerConfig,
    private currentScale: number,
    private goodSteps: number,
    private skipsInARow: number,
    private skips: number,
  ) {}

  get scale(): number { return this.currentScale; }
  get inverseScale(): number { return 1 / this.currentScale; }
  get consecutiveSkips(): number { return this.skipsInARow; }
  get totalSkips(): number { return this.skips; }

  update(foundNonFinite: boolean): { skipped: boolean } {
    if (typeof foundNonFinite !== 'boolean') throw new ArgumentError(`loss scaler: update() takes a boolean, got ${String(foundNonFinite)}`);
    const c = this.config;
    if (foundNonFinite) {
      this.skipsInARow++;
      this.skips++;
      this.goodSteps = 0;
      // At minScale the scale stays put and steps keep being skipped: the gradients overflow at any
      // scale, which is divergence, not underflow; consecutiveSkips tells the trainer.
      if (c.kind === 'dynamic') this.currentScale = Math.max(c.minScale, this.currentScale * c.backoffFactor);
      return { skipped: true };
    }
    this.skipsInARow = 0;
    if (c.kind === 'dynamic') {
      this.goodSteps++;
      if (this.goodSteps >= c.growthInterval) {
        this.currentScale = Math.min(c.maxScale, this.currentScale * c.growthFactor);
        this.goodSteps = 0;
      }
    }
    return { skipped: false };
  }

  state(): LossScalerState {
    return {
      config: { ...this.config }, scale: this.currentScale, goodSteps: this.goodSteps,
      consecutiveSkips: this.skipsInARow, totalSkips: this.skips,
    };
  }
}
