// A model's parameters: one named table {name, shape, init} laid out into one contiguous workspace for
// the values and an identical one for the gradients (LightSeq2's layout: the optimizer is one launch
// over the whole buffer and zeroing gradients is one fill). Names are the Hugging Face tensor names, so
// loading and saving checkpoints is a lookup, not a mapping kept in sync by hand.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { formatShape } from '../tensor.js';
import { dropoutOffsetAdvance } from '../backend/rng.js';
import type { WorkspaceLayout } from './workspace.js';
import { Workspace, layoutWorkspace } from './workspace.js';

export type ParameterInit =
  | { kind: 'normal'; std: number }
  | { kind: 'zeros' }
  | { kind: 'ones' };

export interface ParameterSpec {
  /** The Hugging Face tensor name, e.g. "transformer.h.0.attn.c_attn.weight". */
  readonly name: string;
  readonly shape: readonly number[];
  readonly init: ParameterInit;
  /** AdamW's weight decay applies to it (matrices and embeddings; not biases or norm gains). */
  readonly decay: boolean;
  /** Stored right after the previous parameter with the same `decay` (see ParameterStore.concatenated). */
  readonly packWithPrevious?: boolean;
  /**
   * The checkpoint shape when the stored one is padded (a vocabulary rounded up so GEMM rows stay
   * 16-byte aligned): the parameter is the first rows of the stored tensor; the padding rows are
   * zero and stay zero (their gradients are zero).
   */
  readonly fileShape?: readonly number[];
}

/** Rounds a vocabulary up to a multiple of 64 (llm.c's padded_vocab_size): aligned LM-head GEMMs. */
export function paddedVocabSize(vocab: number): number {
  return Math.ceil(vocab / 64) * 64;
}

export const normal = (std: number): ParameterInit => ({ kind: 'normal', std });
export const zeros: ParameterInit = { kind: 'zeros' };
export const ones: ParameterInit = { kind: 'ones' };

/** A parameter's value and its gradient, both views into their workspaces. */
export interface Param {
  readonly name: string;
  readonly value: Tensor;
  readonly grad: Tensor;
}

export class ParameterStore {
  readonly layout: WorkspaceLayout;
  readonly values: Workspace;
  readonly grads: Workspace;
  private readonly specs: ReadonlyMap<string, ParameterSpec>;
  /**
   * Parameters with weight decay come first, so the decayed part of the workspace is one prefix:
   * AdamW is still a single launch per part (two in all) rather than one per tensor.
   */
  readonly decayedElements: number;

  constructor(readonly backend: Backend, specs: readonly ParameterSpec[], readonly dtype: FloatDType) {
    const ordered = [...specs.filter((s) => s.decay), ...specs.filter((s) => !s.decay)];
    this.specs = new Map(ordered.map((s) => [s.name, s]));
    if (this.specs.size !== specs.length) throw new ArgumentError('ParameterStore: duplicate parameter names');
    this.layout = layoutWorkspace(ordered, dtype);
    this.values = Workspace.allocate(backend, this.layout);
    this.grads = Workspace.allocate(backend, this.layout);
    const firstUndecayed = this.layout.entries.find((e) => !this.specs.get(e.name)!.decay);
    this.decayedElements = firstUndecayed ? firstUndecayed.offset : this.layout.numel;
  }

  get names(): string[] { return this.layout.entries.map((e) => e.name); }
  get count(): number { return this.layout.entries.reduce((n, e) => n + e.numel, 0); }

  spec(name: string): ParameterSpec {
    const s = this.specs.get(name);
    if (!s) throw new ArgumentError(`no parameter named '${name}'`);
    return s;
  }

  param(name: string): Param {
    this.spec(name);
    return { name, value: this.values.get(name), grad: this.grads.get(name) };
  }

  /**
   * Parameters stored back to back (declared with packWithPrevious) as one tensor concatenated along
   * the first dimension: BERT's query, key and value weights [H, H] each become one [3H, H] projection.
   */
  concatenated(names: readonly string[]): Param {
    const entries = names.map((n) => {
      const e = this.layout.entries.find((x) => x.name === n);
      if (!e) throw new ArgumentError(`no parameter named '${n}'`);
      return e;
    });
    const first = entries[0]!;
    let end = first.offset;
    for (const e of entries) {
      if (e.offset !== end || formatShape(e.shape.slice(1)) !== formatShape(first.shape.slice(1))) {
        throw new ArgumentError(`parameters ${names.join(', ')} are not stored back to back with matching trailing dimensions`);
      }
      end += e.numel;
    }
    const shape = [entries.reduce((n, e) => n + e.shape[0]!, 0), ...first.shape.slice(1)];
    return {
      name: names.join('+'),
      value: this.backend.view(this.values.flat, first.offset, shape),
      grad: this.backend.view(this.grads.flat, first.offset, shape),
    };
  }

  /** Each parameter's name and checkpoint shape (its stored shape unless padded). */
  fileShapes(): { name: string; shape: readonly number[] }[] {
    return this.layout.entries.map((e) => ({ name: e.name, shape: this.specs.get(e.name)!.fileShape ?? e.shape }));
  }

  /** The parameter without its padding rows (what checkpoints hold). */
  private unpadded(workspace: Workspace, name: string): Tensor {
    const shape = this.specs.get(name)!.fileShape;
    const t = workspace.get(name);
    return shape ? this.backend.view(t, 0, shape) : t;
  }

  /** Fills every parameter from its init rule with the Philox stream (seed, counter 0, 1, ...); padding stays zero. */
  initialize(seed: bigint): void {
    let offset = 0n;
    for (const e of this.layout.entries) {
      const init = this.specs.get(e.name)!.init;
      const t = this.unpadded(this.values, e.name);
      if (init.kind === 'normal') {
        this.backend.randomFill({ out: t, seed, offset, distribution: 'normal', mean: 0, std: init.std });
        offset += dropoutOffsetAdvance(t.numel);
      } else {
        this.backend.fill(t, init.kind === 'ones' ? 1 : 0);
      }
    }
  }

  /** Host copies of every parameter, by name, in their checkpoint shapes. */
  download(): Map<string, { shape: readonly number[]; data: Float32Array }> {
    const out = new Map<string, { shape: readonly number[]; data: Float32Array }>();
    for (const e of this.layout.entries) {
      const t = this.unpadded(this.values, e.name);
      out.set(e.name, { shape: t.shape, data: this.backend.download(t) as Float32Array });
    }
    return out;
  }

  /** Sets parameters from host values; every parameter must be given, in its checkpoint shape. */
  upload(tensors: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>, source: string): void {
    for (const e of this.layout.entries) {
      const target = this.unpadded(this.values, e.name);
      const t = tensors.get(e.name);
      if (!t) throw new ArgumentError(`${source}: parameter '${e.name}' ${formatShape(target.shape)} is missing`);
      if (formatShape(t.shape) !== formatShape(target.shape)) throw new ArgumentError(`${source}: parameter '${e.name}' has shape ${formatShape(t.shape)}, expected ${formatShape(target.shape)}`);
      this.backend.upload(target, t.data);
    }
  }

  free(): void {
    this.backend.free(this.values.flat);
    this.backend.free(this.grads.flat);
  }
}
