// Learning-rate schedules. `step` counts optimizer updates already applied (0 for the first update),
// so the LR returned for step s is the one used by update s.
//
//   warmup    step < warmupSteps: lr · (step + 1) / warmupSteps — linear from lr/warmupSteps up to lr.
//             (+1 as in llm.c and nanoGPT: the first update is not wasted with LR 0.)
//   constant  lr after warmup.
//   cosine    minLr + (lr − minLr) · ½(1 + cos(π·p)),  p = (step − warmupSteps) / (totalSteps − warmupSteps)
//   linear    minLr + (lr − minLr) · (1 − p)
//             p is clamped to [0, 1]: past totalSteps the LR stays at minLr (training may run on).

import { ArgumentError } from '../errors.js';

export type LrScheduleKind = 'constant' | 'cosine' | 'linear';
export const LR_SCHEDULE_KINDS: readonly LrScheduleKind[] = ['constant', 'cosine', 'linear'];

export interface LrScheduleConfig {
  readonly kind: LrScheduleKind;
  /** Peak learning rate (reached at the end of warmup). */
  readonly lr: number;
  /** Updates of linear warmup; 0 for none. Default 0. */
  readonly warmupSteps?: number;
  /** Updates at which decay reaches minLr. Required for cosine and linear; ignored for constant. */
  readonly totalSteps?: number;
  /** LR at the end of decay; default 0. Often lr/10. */
  readonly minLr?: number;
}

export interface LrSchedule {
  readonly config: Readonly<Required<LrScheduleConfig>>;
  lrAt(step: number): number;
}

/** Validates `config` and returns the schedule; every bad field is an ArgumentError naming it. */
export function createLrSchedule(config: LrScheduleConfig): LrSchedule {
  const valid = validateLrScheduleConfig(config);
  return { config: valid, lrAt: (step) => lrAt(valid, step) };
}

export function validateLrScheduleConfig(config: LrScheduleConfig): Required<LrScheduleConfig> {
  const fail = (message: string): never => { throw new ArgumentError(`LR schedule: ${message}`); };
  if (typeof config !== 'object' || config === null) fail(`config must be an object, got ${String(config)}`);
  const { kind, lr } = config;
  if (!LR_SCHEDULE_KINDS.includes(kind)) fail(`kind ${JSON.stringify(kind)} is not one of ${LR_SCHEDULE_KINDS.join(', ')}`);
  if (typeof lr !== 'number' || !Number.isFinite(lr) || lr <= 0) fail(`lr must be a finite number > 0, got ${String(lr)}`);
  const warmupSteps = config.warmupSteps ?? 0;
  if (!Number.isSafeInteger(warmupSteps) || warmupSteps < 0) fail(`warmupSteps must be an integer >= 0, got ${String(warmupSteps)}`);
  const minLr = config.minLr ?? 0;
  if (typeof minLr !== 'number' || !Number.isFinite(minLr) || minLr < 0 || minLr > lr) {
    fail(`minLr must be a number in [0, lr = ${lr}], got ${String(minLr)}`);
  }
  const totalSteps = config.totalSteps ?? 0;
  if (kind === 'constant') {
    if (config.totalSteps !== undefined && (!Number.isSafeInteger(totalSteps) || totalSteps < 0)) {
      fail(`totalSteps must be an integer >= 0, got ${String(totalSteps)}`);
    }
  } else {
    if (config.totalSteps === undefined) fail(`'${kind}' decay needs totalSteps (the update at which the LR reaches minLr)`);
    if (!Number.isSafeInteger(totalSteps) || totalSteps < 1) fail(`totalSteps must be an integer >= 1, got ${String(totalSteps)}`);
    if (warmupSteps > totalSteps) fail(`warmupSteps (${warmupSteps}) must not exceed totalSteps (${totalSteps})`);
  }
  return { kind, lr, warmupSteps, totalSteps, minLr };
}

/** The LR for update `step` (an integer >= 0) under a validated config. */
export function lrAt(config: Required<LrScheduleConfig>, step: number): number {
  if (!Number.isSafeInteger(step) || step < 0) throw new ArgumentError(`LR schedule: step must be an integer >= 0, got ${String(step)}`);
  const { kind, lr, warmupSteps, totalSteps, minLr } = config;
  if (step < warmupSteps) return (lr * (step + 1)) / warmupSteps;
  if (kind === 'constant') return lr;
  const decaySteps = totalSteps - warmupSteps;
  const p = decaySteps === 0 ? 1 : Math.min(1, (step - warmupSteps) / decaySteps);
  const factor = kind === 'cosine' ? 0.5 * (1 + Math.cos(Math.PI * p)) : 1 - p;
  return minLr + (lr - minLr) * factor;
}
