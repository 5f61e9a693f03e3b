// LightSeq's hierarchical auto-regressive search (HARS) for beam search's top-K, on the host: the CUDA
// kernel's algorithm (backend/cuda/kernels/beam-topk.ts) step for step — the same groups (thread t of
// row j owns vectors t, t + TR, ... of VEC logits), the same M-slot lists and spills, the same threshold,
// rescans and fallbacks — so the tests can check the search itself against the full sort of the CPU
// backend (backend/cpu/beam-topk.ts), path by path, with the scores computed the same way on both sides.
//
// For one item (its `beams` rows of logits):
//   1. per row, lse; per group, its M best logits (ties: lower token) and its spill (the best it dropped);
//   2. R = the K-th largest group maximum, as a score (every element of the top K scores ≥ R);
//   3. survivors = list entries scoring ≥ R, or — when some spill scores ≥ R — every element scoring ≥ R;
//   4. rank the survivors (score desc, flat index asc) and keep K; more than `capacity` survivors falls
//      back to K exact argmax passes.

import { candidateScore, logSumExp } from '../backend/cpu/beam-topk.js';
import { BEAM_TOPK_CAPACITY, BEAM_TOPK_LOCAL, beamTopKThreadsPerRow } from '../backend/cuda/kernels/beam-topk.js';

export interface HarsOptions {
  readonly beams: number;
  /** C: the first C columns of each row are the vocabulary. */
  readonly classes: number;
  /** Vp: the row stride (default C). */
  readonly rowStride?: number;
  /** K candidates per item. */
  readonly candidates: number;
  /** f32 [batch·beams], default 0. */
  readonly beamScores?: Float32Array;
  readonly bannedTokens?: readonly number[];
  readonly renormalize?: boolean;
  /** The kernel's group layout: elements per vector and threads per row (default: the kernel's plan for 16-byte f32 vectors). */
  readonly vec?: number;
  readonly threadsPerRow?: number;
  /** Slots of each group's list and survivors ranked at once (default: the kernel's). */
  readonly local?: number;
  readonly capacity?: number;
}

export interface HarsItemResult {
  readonly tokens: number[];
  readonly sourceBeams: number[];
  readonly scores: number[];
  /** Which way the survivors were found: from the lists, a rescan of memory, or the exact fallback. */
  readonly path: 'lists' | 'rescan' | 'exact';
  readonly survivors: number;
}

interface Candidate { readonly score: number; readonly flat: number }

/** (score desc, flat asc), −∞ included. */
function better(a: Candidate, b: Candidate): boolean {
  return a.score > b.score || (a.score === b.score && a.flat < b.flat);
}

/** Top-K of every item of logits [batch·beams, Vp] by HARS. */
export function harsTopK(logits: Float32Array, options: HarsOptions): HarsItemResult[] {
  const { beams, classes: C, candidates: K } = options;
  const Vp = options.rowStride ?? C;
  const vec = options.vec ?? 4;
  const TR = options.threadsPerRow ?? beamTopKThreadsPerRow(beams, C, vec);
  const M = options.local ?? BEAM_TOPK_LOCAL;
  const capacity = options.capacity ?? BEAM_TOPK_CAPACITY;
  const banned = new Set(options.bannedTokens ?? []);
  const renormalize = options.renormalize ?? false;
  if (logits.length % (beams * Vp) !== 0) throw new Error(`harsTopK: ${logits.length} logits are not whole items of ${beams} rows of ${Vp}`);
  if (K > beams * C) throw new Error(`harsTopK: K = ${K} exceeds beams·classes = ${beams * C}`);
  const batch = logits.length / (beams * Vp);
  const vectors = Math.ceil(C / vec);
  const results: HarsItemResult[] = [];

  for (let b = 0; b < batch; b++) {
    const rowLse: number[] = [], rowScore: number[] = [];
    const groups: { beam: number; list: Candidate[]; spill: number | undefined }[] = [];
    // The element's value as the kernel sees it: banned and NaN are −∞.
    const valueOf = (row: Float32Array, v: number) => (banned.has(v) || !(row[v]! === row[v]!) ? -Infinity : row[v]!);
    const rows = Array.from({ length: beams }, (_, j) => logits.subarray((b * beams + j) * Vp, (b * beams + j) * Vp + C));
    for (let j = 0; j < beams; j++) {
      const row = rows[j]!;
      rowLse.push(Math.fround(logSumExp(row, C, (v) => !(renormalize && banned.has(v)))));
      rowScore.push(options.beamScores ? options.beamScores[b * beams + j]! : 0);
      for (let t = 0; t < TR; t++) {
        // The group's M best logits (raw values: scores are monotone in them within a row) and its spill.
        const list: { x: number; v: number }[] = [];
        let spill: number | undefined;
        for (let vi = t; vi < vectors; vi += TR) {
          for (let e = 0; e < vec; e++) {
            const v = vi * vec + e;
            if (v >= C) continue;
            const x = valueOf(row, v);
            if (list.length < M) list.push({ x, v });
            else if (x > list[M - 1]!.x) { spill = Math.max(spill ?? -Infinity, list[M - 1]!.x); list[M - 1] = { x, v }; }
            else { spill = Math.max(spill ?? -Infinity, x); continue; }
            list.sort((p, q) => (q.x - p.x) || p.v - q.v);
          }
        }
        const score = (x: number) => candidateScore(x, rowLse[j]!, rowScore[j]!);
        groups.push({ beam: j, list: list.map(({ x, v }) => ({ score: score(x), flat: j * C + v })), spill: spill === undefined ? undefined : score(spill) });
      }
    }

    // The threshold: the K-th largest group maximum (groups without elements do not count).
    const maxima = groups.filter((g) => g.list.length > 0).map((g) => g.list[0]!).sort((p, q) => (better(p, q) ? -1 : 1));
    const threshold = maxima.length >= K ? maxima[K - 1]!.score : undefined;
    const reaches = (score: number) => threshold === undefined || score >= threshold;

    const rescan = groups.some((g) => g.spill !== undefined && reaches(g.spill));
    let survivors: Candidate[];
    if (!rescan) {
      survivors = groups.flatMap((g) => g.list.filter((c) => reaches(c.score)));
    } else {
      survivors = [];
      for (let j = 0; j < beams; j++) {
        for (let v = 0; v < C; v++) {
          const score = candidateScore(valueOf(rows[j]!, v), rowLse[j]!, rowScore[j]!);
          if (reaches(score)) survivors.push({ score, flat: j * C + v });
        }
      }
    }
    let chosen: Candidate[];
    let path: HarsItemResult['path'] = rescan ? 'rescan' : 'lists';
    if (survivors.length <= capacity) {
      chosen = [...survivors].sort((p, q) => (better(p, q) ? -1 : 1)).slice(0, K);
    } else {
      // The exact fallback: K argmax passes, each over every element strictly worse than the last pick.
      path = 'exact';
      chosen = [];
      let previous: Candidate | undefined;
      for (let round = 0; round < K; round++) {
        let best: Candidate | undefined;
        for (let j = 0; j < beams; j++) {
          for (let v = 0; v < C; v++) {
            const c = { score: candidateScore(valueOf(rows[j]!, v), rowLse[j]!, rowScore[j]!), flat: j * C + v };
            if ((previous === undefined || better(previous, c)) && (best === undefined || better(c, best))) best = c;
          }
        }
        chosen.push(best!);
        previous = best;
      }
    }
    results.push({
      tokens: chosen.map((c) => c.flat % C), sourceBeams: chosen.map((c) => Math.floor(c.flat / C)), scores: chosen.map((c) => c.score),
      path, survivors: survivors.length,
    });
  }
  return results;
}
