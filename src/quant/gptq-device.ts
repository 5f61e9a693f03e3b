// GPTQ (gptq.ts has the method) with its cubic parts as f32 GEMMs on the backend, for the layers of real
// models: at Llama 1.2B's down projection (K = 8192) the host's f64 loops take minutes per matrix for
// the factorization alone (K³/2) and as long again for the updates (N·K²), an hour or more a model.
// Here the host keeps only the b×b diagonal blocks and O(K²) index work:
//
//   1. H on the host: dead channels (H[k,k] = 0 → 1, their weights zeroed), damping, and the
//      order-reversed P·H·P, written in panel storage — column block c of the matrix as one contiguous
//      [K, b] slab, so a panel's rows below its diagonal block are a view.
//   2. P·H·P = L·Lᵀ by a right-looking blocked Cholesky: each diagonal block factored on the host (f64),
//      the panel below it L21 = A21·L_jj⁻ᵀ, then every later panel's lower part −= L21·L21ᵀ (GEMMs).
//   3. M = L⁻¹ by blocked forward substitution on I (row-major): block row j = L_jj⁻¹·R_j, then the rows
//      below −= L21·M_j (one GEMM over the full width; the zeros it multiplies cost ~2× the minimum).
//   4. U = V⁻¹ with V = P·L·P (gptq.ts), so U[a][b] = M[K−1−a][K−1−b]: read from M with reversed indices.
//   5. The column loop over blocks of B columns on Wᵀ [K, N] held on the device: each block rounded
//      column by column with its error fed forward inside the block, every output row on its own
//      (the backend's gptqRoundBlock: a thread a row on the GPU), then the rest of the matrix takes the
//      block's errors at once: Wᵀ[b1:] −= U[b0:b1, b1:]ᵀ·E (one GEMM).
// The host keeps O(K²) work (the panels, U's slices) and the b×b diagonal blocks. f32 throughout, as
// GPTQ's reference implementation runs on a GPU; the rounding is quant-math.ts's, so the packed result is
// what int4Linear computes (checked against gptq.ts in tests).

import type { Backend } from '../backend/backend.js';
import { packInt4 } from '../backend/cpu/quant-math.js';
import { ArgumentError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import type { GptqOptions } from './gptq.js';
import { actOrder, permuteInputs } from './gptq.js';
import type { Int4HostWeight } from './weights.js';

/** The panel width of the factorization: the largest of 128, 64, 32 dividing K. */
function panelWidth(K: number): number {
  const b = [128, 64, 32].find((w) => K % w === 0);
  if (!b) throw new ArgumentError(`GPTQ: K = ${K} is not a multiple of 32`);
  return b;
}

/** Lower Cholesky factor of an SPD b×b block (f64, row-major), or the failing pivot's index. */
function choleskyBlock(A: Float64Array, b: number): { L: Float64Array } | { failedAt: number; pivot: number } {
  const L = new Float64Array(b * b);
  for (let i = 0; i < b; i++) {
    for (let j = 0; j <= i; j++) {
      let sum = A[i * b + j]!;
      for (let p = 0; p < j; p++) sum -= L[i * b + p]! * L[j * b + p]!;
      if (i === j) {
        if (!(sum > 0)) return { failedAt: i, pivot: sum };
        L[i * b + i] = Math.sqrt(sum);
      } else {
        L[i * b + j] = sum / L[j * b + j]!;
      }
    }
  }
  return { L };
}

/** Inverse of a lower-triangular b×b block (f64, row-major), by forward substitution per column. */
function invertLowerBlock(L: Float64Array, b: number): Float64Array {
  const T = new Float64Array(b * b);
  for (let c = 0; c < b; c++) {
    T[c * b + c] = 1 / L[c * b + c]!;
    for (let r = c + 1; r < b; r++) {
      let sum = 0;
      for (let p = c; p < r; p++) sum += L[r * b + p]! * T[p * b + c]!;
      T[r * b + c] = -sum / L[r * b + r]!;
    }
  }
  return T;
}

/**
 * M = L⁻¹ for P·H·P = L·Lᵀ (steps 1–3 of the file comment), downloaded row-major [K, K] f32. `h` is H
 * (row-major, symmetric) with its diagonal already edited (dead channels, damping).
 */
function reversedInverseFactor(backend: Backend, h: Float32Array, K: number): Float32Array {
  const b = panelWidth(K), blocks = K / b;
  // Panel storage of P·H·P: element (r, c) of the reversed matrix at panel ⌊c/b⌋, row r, column c mod b.
  const panels = new Float32Array(K * K);
  for (let panel = 0; panel < blocks; panel++) {
    for (let r = 0; r < K; r++) {
      const source = (K - 1 - r) * K + (K - 1 - panel * b), out = panel * K * b + r * b;
      for (let cc = 0; cc < b; cc++) panels[out + cc] = h[source - cc]!;
    }
  }
  const made: Tensor[] = [];
  const keep = (t: Tensor) => { made.push(t); return t; };
  try {
    const A = keep(backend.fromArray(panels, [blocks, K, b], 'f32'));
    const panelRows = (panel: number, first: number, rows: number) => backend.view(A, panel * K * b + first * b, [rows, b]);
    const inverses: Tensor[] = [];
    const scratch = keep(backend.empty([K, b], 'f32'));
    for (let j = 0; j < blocks; j++) {
      const diagonal = Float64Array.from(backend.download(panelRows(j, j * b, b)) as Float32Array);
      const factored = choleskyBlock(diagonal, b);
      if ('failedAt' in factored) {
        const column = K - 1 - (j * b + factored.failedAt);
        throw new ArgumentError(`GPTQ: the Hessian is not positive definite at column ${column} (pivot ${factored.pivot}); use more calibration data or more damping`);
      }
      backend.upload(panelRows(j, j * b, b), Float32Array.from(factored.L));
      const T = keep(backend.fromArray(Float32Array.from(invertLowerBlock(factored.L, b)), [b, b], 'f32'));
      inverses.push(T);
      const below = K - (j + 1) * b;
      if (below === 0) break;
      // L21 = A21·L_jj⁻ᵀ, in place through the scratch panel.
      const A21 = panelRows(j, (j + 1) * b, below), out = backend.view(scratch, 0, [below, b]);
      backend.gemm({ a: A21, b: T, out, transB: true });
      backend.copy(out, A21);
      // Later panels' lower parts (rows from their diagonal block down) −= L21·L21ᵀ.
      for (let c = j + 1; c < blocks; c++) {
        const rows = K - c * b, from = (c - j - 1) * b;
        backend.gemm({ a: backend.view(A21, from * b, [rows, b]), b: backend.view(A21, from * b, [b, b]), out: panelRows(c, c * b, rows), transB: true, alpha: -1, beta: 1 });
      }
    }
    // Forward substitution on I: block row j = L_jj⁻¹·R_j, then the rows below −= L21·(block row j).
    const identity = new Float32Array(K * K);
    for (let k = 0; k < K; k++) identity[k * K + k] = 1;
    const R = keep(backend.fromArray(identity, [K, K], 'f32'));
    const rowBlock = keep(backend.empty([b, K], 'f32'));
    for (let j = 0; j < blocks; j++) {
      const Rj = backend.view(R, j * b * K, [b, K]);
      backend.gemm({ a: inverses[j]!, b: Rj, out: rowBlock });
      backend.copy(rowBlock, Rj);
      const below = K - (j + 1) * b;
      if (below > 0) backend.gemm({ a: panelRows(j, (j + 1) * b, below), b: Rj, out: backend.view(R, (j + 1) * b * K, [below, K]), alpha: -1, beta: 1 });
    }
    return backend.download(R) as Float32Array;
  } finally {
    for (const t of made) backend.free(t);
  }
}

/**
 * GPTQ of weight W [N, K] (n-major f32, not modified) with Hessian H [K, K] (f32 on the backend, not
 * modified), the factorization and the updates on the backend (see the file comment). Same options and
 * result as gptqQuantize; the block size is rounded up to a multiple of the group size.
 */
export function gptqQuantizeOnBackend(backend: Backend, W: Float32Array, N: number, K: number, H: Tensor, options: GptqOptions): Int4HostWeight {
  const G = options.groupSize;
  if (!(Number.isInteger(G) && G >= 32 && G % 32 === 0 && K % G === 0)) throw new ArgumentError(`GPTQ: group size ${G} must be a multiple of 32 dividing K = ${K}`);
  if (W.length !== N * K || H.numel !== K * K) throw new ArgumentError(`GPTQ: weight has ${W.length} values (expected ${N}×${K}) and Hessian ${H.numel} (expected ${K}×${K})`);
  const damp = options.dampPercent ?? 0.01, B = Math.ceil((options.blockSize ?? 128) / G) * G;

  let h: Float32Array = Float32Array.from(backend.download(H) as Float32Array);
  // Act-order: the channels in order of decreasing H[k, k] from here on (gptq.ts), kept as the input order.
  const order = options.actOrder ? actOrder((k) => h[k * K + k]!, K) : undefined;
  if (order) ({ W, H: h } = permuteInputs(W, h, N, K, order));
  const dead = new Uint8Array(K);
  let diagonal = 0;
  for (let k = 0; k < K; k++) {
    if (h[k * K + k] === 0) {
      h[k * K + k] = 1;
      dead[k] = 1;
    }
    diagonal += h[k * K + k]!;
  }
  const add = damp * (diagonal / K);
  for (let k = 0; k < K; k++) h[k * K + k]! += add;
  const M = reversedInverseFactor(backend, h, K);

  // Wᵀ [K, N] on the device (W [N, K] as [1, N, K, 1] with its middle dimensions swapped), the dead
  // channels' rows zero.
  const weights = backend.empty([K, N], 'f32');
  const groups = K / G;
  const q = new Uint8Array(N * K), scales = new Float32Array(N * groups), zeros = new Uint8Array(N * groups);
  try {
    const source = backend.fromArray(W, [1, N, K, 1], 'f32');
    try {
      backend.permute0213({ x: source, out: backend.view(weights, 0, [1, K, N, 1]) });
    } finally {
      backend.free(source);
    }
    for (let k = 0; k < K; k++) if (dead[k]) backend.fill(backend.view(weights, k * N, [N]), 0);
    for (let b0 = 0; b0 < K; b0 += B) {
      const b1 = Math.min(b0 + B, K), width = b1 - b0, blockGroups = width / G;
      // The block's rows of U (upper part): U[b0 + i, b0 + j] = M[K − 1 − b0 − i, K − 1 − b0 − j].
      const Ublock = new Float32Array(width * width);
      for (let i = 0; i < width; i++) {
        const mrow = (K - 1 - b0 - i) * K + (K - 1 - b0);
        for (let j = i; j < width; j++) Ublock[i * width + j] = M[mrow - j]!;
      }
      const made = {
        u: backend.fromArray(Ublock, [width, width], 'f32'),
        q: backend.empty([N, width], 'u8'),
        scales: backend.empty([N, blockGroups], 'f32'),
        zeros: backend.empty([N, blockGroups], 'u8'),
        errors: backend.empty([width, N], 'f32'),
      };
      try {
        backend.gptqRoundBlock({ weights: backend.view(weights, b0 * N, [width, N]), u: made.u, groupSize: G, q: made.q, scales: made.scales, zeros: made.zeros, errors: made.errors });
        const qb = backend.download(made.q) as Uint8Array, sb = backend.download(made.scales) as Float32Array, zb = backend.download(made.zeros) as Uint8Array;
        for (let n = 0; n < N; n++) {
          q.set(qb.subarray(n * width, (n + 1) * width), n * K + b0);
          scales.set(sb.subarray(n * blockGroups, (n + 1) * blockGroups), n * groups + b0 / G);
          zeros.set(zb.subarray(n * blockGroups, (n + 1) * blockGroups), n * groups + b0 / G);
        }
        if (b1 === K) break;
        // Wᵀ[b1:] −= U[b0:b1, b1:]ᵀ · E, E = the block's errors [width, N].
        // U[b0 + i, c] = M[K − 1 − b0 − i, K − 1 − c]: row i of the slice walks a row of M backwards.
        const Uslice = new Float32Array(width * (K - b1));
        for (let i = 0; i < width; i++) {
          const mrow = (K - 1 - b0 - i) * K + (K - 1), out = i * (K - b1) - b1;
          for (let c = b1; c < K; c++) Uslice[out + c] = M[mrow - c]!;
        }
        const slice = backend.fromArray(Uslice, [width, K - b1], 'f32');
        try {
          backend.gemm({ a: slice, b: made.errors, out: backend.view(weights, b1 * N, [K - b1, N]), transA: true, alpha: -1, beta: 1 });
        } finally {
          backend.free(slice);
        }
      } finally {
        for (const t of Object.values(made)) backend.free(t);
      }
    }
  } finally {
    backend.free(weights);
  }
  return { kind: 'int4', inFeatures: K, outFeatures: N, groupSize: G, qweight: packInt4(q, N, K), scales, zeros, ...(order ? { inputOrder: order } : {}) };
}
