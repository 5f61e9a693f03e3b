// The KV cache: one allocation for every layer's keys and values,
//   [layers][2 (k, v)][maxBatch][Hkv][maxLen][d]
// so layer l's keys for sequences b0 .. b0 + n − 1 are one contiguous [n, Hkv, maxLen, d] view (what
// qkvRopeAppend writes and decodeAttention reads), for any batch bucket or prefill group.
// Position p of sequence b holds the key/value of the token at position p; positions past a sequence's
// length hold stale values that the next step overwrites before any query can see them.

import type { Backend } from '../backend/backend.js';
import type { FloatDType } from '../dtype.js';
import { byteSize } from '../dtype.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';

export class KvCache {
  readonly storage: Tensor;
  private readonly perSequence: number;
  private readonly views = new Map<string, Tensor>();

  constructor(
    private readonly backend: Backend,
    readonly layers: number,
    readonly maxBatch: number,
    readonly kvHeads: number,
    readonly maxLen: number,
    readonly headDim: number,
    readonly dtype: FloatDType,
  ) {
    this.perSequence = kvHeads * maxLen * headDim;
    this.storage = backend.empty([layers, 2, maxBatch, kvHeads, maxLen, headDim], dtype);
    // Zero, so that attention over a position no step has written yet reads finite values.
    backend.fill(this.storage, 0);
  }

  get bytes(): number { return this.storage.numel * byteSize(this.dtype); }

  /** Keys (which = 0) or values (1) of `layer` for sequences [first, first + count): [count, Hkv, maxLen, d]. */
  slice(layer: number, which: 0 | 1, first: number, count: number): Tensor {
    if (!(layer >= 0 && layer < this.layers && first >= 0 && count >= 1 && first + count <= this.maxBatch)) {
      throw new ArgumentError(`KV cache: layer ${layer}, sequences ${first}..${first + count - 1} outside ${this.layers} layers × ${this.maxBatch} sequences`);
    }
    const key = `${layer}.${which}.${first}.${count}`;
    let view = this.views.get(key);
    if (!view) {
      const offset = ((layer * 2 + which) * this.maxBatch + first) * this.perSequence;
      view = this.backend.view(this.storage, offset, [count, this.kvHeads, this.maxLen, this.headDim]);
      this.views.set(key, view);
    }
    return view;
  }

  keys(layer: number, first: number, count: number): Tensor { return this.slice(layer, 0, first, count); }
  values(layer: number, first: number, count: number): Tensor { return this.slice(layer, 1, first, count); }

  free(): void {
    this.backend.free(this.storage);
    this.views.clear();
  }
}
