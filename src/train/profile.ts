// Where a step's time goes: every op of one eager step timed between two markers (CUDA events),
// grouped into GEMMs (cuBLASLt) and our own kernels; compared with the replayed graph's time, the
// rest is gaps (launch latency between kernels, which a graph shrinks to ~0.5 µs each).

import type { Backend, TimeMarker } from '../backend/backend.js';

export interface OpTiming {
  readonly op: string;
  /** Shape of the op's first tensor argument, for telling calls apart. */
  readonly shape: string;
  readonly ms: number;
}

export interface StepProfile {
  readonly ops: readonly OpTiming[];
  /** Σ of op times by op name, largest first. */
  readonly byOp: readonly { op: string; calls: number; ms: number }[];
  readonly gemmMs: number;
  readonly otherKernelsMs: number;
}

const GEMM_OPS = new Set(['gemm', 'batchedGemm']);
const NOT_OPS = new Set(['name', 'description', 'view', 'mark', 'memoryStats', 'empty', 'fromArray', 'upload', 'download', 'free', 'synchronize', 'captureGraph', 'createArena']);

function firstShape(args: unknown[]): string {
  for (const a of args) {
    if (a && typeof a === 'object') {
      for (const v of Object.values(a)) {
        const shape = (v as { shape?: unknown })?.shape;
        if (Array.isArray(shape)) return `[${shape.join(', ')}]`;
      }
    }
  }
  return '';
}

/** A backend that brackets every op with markers; `finish()` waits and returns the timings. */
export function profilingBackend(backend: Backend): { backend: Backend; finish: () => StepProfile } {
  const pending: { op: string; shape: string; start: TimeMarker; end: TimeMarker }[] = [];
  const wrapped = new Proxy(backend, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof property !== 'string' || typeof value !== 'function' || NOT_OPS.has(property)) {
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      }
      return (...args: unknown[]) => {
        const start = target.mark();
        const result = (value as (...a: unknown[]) => unknown).apply(target, args);
        pending.push({ op: property, shape: firstShape(args), start, end: target.mark() });
        return result;
      };
    },
  });
  const finish = (): StepProfile => {
    const ops = pending.map((p) => ({ op: p.op, shape: p.shape, ms: p.end.elapsedSince(p.start) }));
    for (const p of pending) { p.start.dispose(); p.end.dispose(); }
    const totals = new Map<string, { op: string; calls: number; ms: number }>();
    for (const o of ops) {
      const t = totals.get(o.op) ?? { op: o.op, calls: 0, ms: 0 };
      t.calls++;
      t.ms += o.ms;
      totals.set(o.op, t);
    }
    const byOp = [...totals.values()].sort((a, b) => b.ms - a.ms);
    const gemmMs = byOp.filter((t) => GEMM_OPS.has(t.op)).reduce((s, t) => s + t.ms, 0);
    const otherKernelsMs = byOp.filter((t) => !GEMM_OPS.has(t.op)).reduce((s, t) => s + t.ms, 0);
    return { ops, byOp, gemmMs, otherKernelsMs };
  };
  return { backend: wrapped, finish };
}
