// One contiguous workspace for many tensors (LightSeq2: all parameters in one buffer and all
// gradients in another, so the optimizer is a single launch and gradients are zeroed by one fill).
// The layout is derived from a named table {name, shape}, never kept in sync by hand. Every tensor
// starts on an `alignBytes` boundary (256 by default: cuBLASLt's preferred operand alignment, which also
// keeps every 16-byte vector access aligned); the padding between tensors is part of the workspace
// and stays zero.

import type { Backend } from '../backend/backend.js';
import type { DType } from '../dtype.js';
import { byteSize } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { formatShape, shapeNumel } from '../tensor.js';

export interface TensorSpec {
  readonly name: string;
  readonly shape: readonly number[];
  /**
   * Placed right after the previous tensor, without alignment padding, so the two can be used as one
   * concatenated tensor (BERT's separate Q, K, V weights as one fused QKV projection).
   */
  readonly packWithPrevious?: boolean;
}

export interface WorkspaceEntry extends TensorSpec {
  /** Offset of the tensor's first element, in elements. */
  readonly offset: number;
  readonly numel: number;
}

export interface WorkspaceLayout {
  readonly dtype: DType;
  readonly entries: readonly WorkspaceEntry[];
  /** Elements in the whole workspace, padding included. */
  readonly numel: number;
}

export function layoutWorkspace(specs: readonly TensorSpec[], dtype: DType, alignBytes = 256): WorkspaceLayout {
  const elementBytes = byteSize(dtype);
  if (!Number.isInteger(alignBytes) || alignBytes % elementBytes !== 0) {
    throw new ArgumentError(`layoutWorkspace: alignBytes ${alignBytes} must be a multiple of the ${dtype} element size (${elementBytes})`);
  }
  const alignElements = alignBytes / elementBytes;
  const names = new Set<string>();
  const entries: WorkspaceEntry[] = [];
  let cursor = 0;
  for (const spec of specs) {
    if (names.has(spec.name)) throw new ArgumentError(`layoutWorkspace: '${spec.name}' appears twice`);
    names.add(spec.name);
    if (!spec.shape.every((d) => Number.isInteger(d) && d >= 0)) {
      throw new ArgumentError(`layoutWorkspace: '${spec.name}' has invalid shape ${formatShape(spec.shape)}`);
    }
    const offset = spec.packWithPrevious && entries.length > 0 ? cursor : Math.ceil(cursor / alignElements) * alignElements;
    const numel = shapeNumel(spec.shape);
    entries.push({ name: spec.name, shape: spec.shape, offset, numel });
    cursor = offset + numel;
  }
  return { dtype, entries, numel: Math.ceil(cursor / alignElements) * alignElements };
}

/** A workspace allocated on a backend: one flat tensor and a view per named entry. */
export class Workspace {
  private readonly views = new Map<string, Tensor>();

  private constructor(readonly layout: WorkspaceLayout, readonly flat: Tensor, backend: Backend) {
    for (const e of layout.entries) this.views.set(e.name, backend.view(flat, e.offset, e.shape));
  }

  /** Allocates the workspace zero-filled (padding must stay zero for whole-buffer ops like AdamW). */
  static allocate(backend: Backend, layout: WorkspaceLayout): Workspace {
    const flat = backend.empty([layout.numel], layout.dtype);
    backend.fill(flat, 0);
    return new Workspace(layout, flat, backend);
  }

  get(name: string): Tensor {
    const t = this.views.get(name);
    if (!t) throw new ArgumentError(`workspace has no tensor '${name}' (it holds ${this.layout.entries.length}: ${this.layout.entries.slice(0, 4).map((e) => e.name).join(', ')}${this.layout.entries.length > 4 ? ', …' : ''})`);
    return t;
  }

  get names(): string[] {
    return this.layout.entries.map((e) => e.name);
  }
}
