// The tokens every sequence of a decoder encoder's pass starts with — a reranker's instruction and query
// before each document, an embedding prompt before each text — computed once instead of once a sequence.
// Causal attention makes it exact: a prefix token's keys and values do not depend on what follows it.
//
// A pass with a shared prefix of P tokens (P a multiple of PREFIX_BLOCK) keeps its keys and values in block
// pools (k, v [blocks, Hkv, PREFIX_BLOCK, d]) read through per-layer block tables:
//   blocks [l·nP, (l+1)·nP)        layer l's prefix (nP = P / PREFIX_BLOCK): computed by one pass over the
//                                  prefix alone, or copied from the cache (the last prefix, kept between calls)
//   blocks [layers·nP, …)          the suffixes, sequence b's ⌈s_b / PREFIX_BLOCK⌉ blocks one after another;
//                                  every layer reuses them (layer l + 1 writes them after layer l has read them)
//   table[l][b] = [l·nP … (l+1)·nP − 1, sequence b's suffix blocks]
// The suffixes' rows are packed (no padding): sequence b's s_b = length_b − P tokens at positions P … length_b − 1,
// qkvRopeAppend writing their keys through table row b, flash attention's packed queries over paged keys
// (seqKeys P + s_b, causal: the queries are the last of the keys) writing the O product's input directly.

import type { Backend } from '../backend/backend.js';
import type { Tensor } from '../tensor.js';

/** Tokens a pool block holds; the shared prefix is cut to whole blocks. */
export const PREFIX_BLOCK = 16;
/** The shortest prefix worth a paged pass (the dense pass is faster below it). */
export const MIN_SHARED_PREFIX = 2 * PREFIX_BLOCK;
/** The longest prefix shared by default (its keys and values, every layer's, stay cached between calls). */
export const DEFAULT_MAX_SHARED_PREFIX = 2048;

/**
 * The shared prefix of B right-aligned-at-zero sequences (`ids` [B, L], sequence s's tokens at s·L … s·L +
 * lengths[s] − 1): the longest common token prefix, short of every sequence's last token (each keeps one
 * row to pool), at most `max`, cut to whole blocks.
 */
export function sharedPrefixLength(ids: Int32Array, lengths: Int32Array, L: number, max: number): number {
  const B = lengths.length;
  let n = Math.min(max, ...Array.from(lengths, (len) => len - 1));
  for (let s = 1; s < B && n > 0; s++) {
    let i = 0;
    while (i < n && ids[s * L + i] === ids[i]) i++;
    n = i;
  }
  return Math.max(0, n - (n % PREFIX_BLOCK));
}

/** Shared-prefix passes so far (DecoderEncoder.prefixStats). */
export interface PrefixStats {
  /** Passes that shared a prefix. */
  passes: number;
  /** Prefixes computed (one pass over the prefix alone each) and taken from the cache. */
  computed: number;
  cached: number;
  /** Token rows not computed: (B − 1)·P a pass that computed its prefix, B·P one that took it from the cache. */
  savedTokens: number;
}

/** One pass's rows over paged keys: tokens and positions per row, the sequences' row offsets and key counts, the tables. */
export interface PagedRows {
  /** [R] each. */
  readonly tokens: Int32Array;
  readonly positions: Int32Array;
  /** [R]: the sequence (table row) of each row. */
  readonly sequenceOf: Int32Array;
  /** [B + 1]: sequence b's rows are cu[b] … cu[b + 1] − 1. */
  readonly cu: Int32Array;
  /** [B]: keys sequence b attends over (its prefix and its own rows). */
  readonly seqKeys: Int32Array;
  /** [layers, B, maxBlocks]: each layer's block table. */
  readonly tables: Int32Array;
  readonly maxBlocks: number;
  /** The longest sequence's rows (the attention grid's). */
  readonly maxRows: number;
}

/** The prefix pass's rows: the first P tokens of `ids` as one sequence, layer l's table its blocks l·nP … . */
export function prefixRows(ids: Int32Array, P: number, layers: number): PagedRows {
  const nP = P / PREFIX_BLOCK;
  const tables = new Int32Array(layers * nP);
  for (let l = 0; l < layers; l++) for (let k = 0; k < nP; k++) tables[l * nP + k] = l * nP + k;
  return {
    tokens: ids.slice(0, P), positions: Int32Array.from({ length: P }, (_, i) => i), sequenceOf: new Int32Array(P),
    cu: Int32Array.of(0, P), seqKeys: Int32Array.of(P), tables, maxBlocks: nP, maxRows: P,
  };
}

/** The suffix pass's rows: sequence s's tokens P … lengths[s] − 1 of `ids` [B, L], packed, over the layers' prefix blocks and their own. */
export function suffixRows(ids: Int32Array, lengths: Int32Array, L: number, P: number, layers: number): PagedRows & { readonly blocks: number } {
  const B = lengths.length, nP = P / PREFIX_BLOCK;
  const cu = new Int32Array(B + 1), own = new Int32Array(B);
  for (let s = 0; s < B; s++) {
    cu[s + 1] = cu[s]! + lengths[s]! - P;
    own[s] = Math.ceil((lengths[s]! - P) / PREFIX_BLOCK);
  }
  const R = cu[B]!, maxOwn = Math.max(...own), M = nP + maxOwn;
  const tokens = new Int32Array(R), positions = new Int32Array(R), sequenceOf = new Int32Array(R), seqKeys = new Int32Array(B);
  const tables = new Int32Array(layers * B * M);
  let next = layers * nP;
  for (let s = 0; s < B; s++) {
    const n = lengths[s]! - P;
    tokens.set(ids.subarray(s * L + P, s * L + P + n), cu[s]!);
    for (let i = 0; i < n; i++) positions[cu[s]! + i] = P + i;
    sequenceOf.fill(s, cu[s]!, cu[s + 1]!);
    seqKeys[s] = P + n;
    for (let l = 0; l < layers; l++) {
      const row = (l * B + s) * M;
      for (let k = 0; k < nP; k++) tables[row + k] = l * nP + k;
      for (let k = 0; k < own[s]!; k++) tables[row + nP + k] = next + k;
    }
    next += own[s]!;
  }
  return { tokens, positions, sequenceOf, cu, seqKeys, tables, maxBlocks: M, maxRows: Math.max(...lengths) - P, blocks: next };
}

/** The last shared prefix's keys and values, every layer's (blocks [l·nP, (l+1)·nP) of a pass's pools), kept for the next pass. */
export class PrefixCache {
  private entry?: { ids: Int32Array; keys: Tensor; values: Tensor };

  constructor(private readonly backend: Backend) {}

  /** The cached prefix's length if `ids` starts with it and it is at most `max` tokens, else 0. */
  match(ids: Int32Array, max: number): number {
    const e = this.entry;
    if (!e || e.ids.length > max) return 0;
    for (let i = 0; i < e.ids.length; i++) if (ids[i] !== e.ids[i]) return 0;
    return e.ids.length;
  }

  /** Copies the cached prefix blocks into the front of the pools. */
  restore(keys: Tensor, values: Tensor): void {
    const b = this.backend, e = this.entry!;
    b.copy(e.keys, b.view(keys, 0, e.keys.shape));
    b.copy(e.values, b.view(values, 0, e.values.shape));
  }

  /** Keeps the first `blocks` blocks of the pools as the prefix `ids` (the previous entry is freed). */
  store(ids: Int32Array, keys: Tensor, values: Tensor, blocks: number): void {
    const b = this.backend, shape = [blocks, ...keys.shape.slice(1)];
    this.clear();
    const kept = { ids: ids.slice(), keys: b.empty(shape, keys.dtype), values: b.empty(shape, values.dtype) };
    b.copy(b.view(keys, 0, shape), kept.keys);
    b.copy(b.view(values, 0, shape), kept.values);
    this.entry = kept;
  }

  clear(): void {
    if (!this.entry) return;
    this.backend.free(this.entry.keys);
    this.backend.free(this.entry.values);
    delete this.entry;
  }
}
