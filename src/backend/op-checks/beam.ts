// Argument checks of the beam-search and encoder-decoder decoding ops, shared by the backends.
//   beamTopK:           logits (batch·beams, Vp) float; beamScores f32 (batch·beams); tokens, sourceBeams i32
//                       (batch, K); scores f32 (batch, K); classes C in [1, Vp]; K in [1, beams·C]
//   beamAdvance:        candidates as beamTopK's outputs; nextTokens, positions i32 (batch·beams); beamScores
//                       f32 (batch·beams); cacheRows i32 (2, batch·beams, L); K ≥ beams
//   beamSelfAttention:  qkv (R, 3H); bias (3H); kCache, vCache (R, heads, L, d); cacheRows i32 (2, R, L);
//                       positions i32 (R); out (R, H)
//   beamCrossAttention: q, out (batch·beams, H); kv (batch, Lk, 2·layers·H); keyLengths i32 (batch)
// Whether positions and lengths lie in range depends on the data: those checks are the backend's own.

import type { Tensor } from '../../tensor.js';
import type { BeamAdvanceArgs, BeamCrossAttentionArgs, BeamSelfAttentionArgs, BeamTopKArgs } from '../backend.js';
import type { OpCheck } from '../validate.js';

/** beams ≥ 1 divides the row count; returns the item count. */
function checkBeams<T extends Tensor>(check: OpCheck<T>, beams: number, rows: number, rowsOf: string): number {
  check.integer('beams', beams, 1);
  if (rows % beams !== 0) check.fail(`'${rowsOf}' has ${rows} rows, which is not a multiple of beams (${beams})`);
  return rows / beams;
}

function checkTokenList<T extends Tensor>(check: OpCheck<T>, name: string, ids: readonly number[], limit: number): void {
  if (!Array.isArray(ids)) check.fail(`'${name}' must be an array of token ids`);
  for (const id of ids) {
    if (!Number.isInteger(id) || id < 0 || id >= limit) check.fail(`'${name}' holds ${id}; expected token ids in [0, ${limit})`);
  }
}

/** The candidate triple (tokens, sourceBeams, scores), (batch, K). */
function checkCandidates<T extends Tensor>(check: OpCheck<T>, tokens: T, sourceBeams: T, scores: T): void {
  check.dtype('tokens', tokens, ['i32']);
  check.dtype('sourceBeams', sourceBeams, ['i32']);
  check.dtype('scores', scores, ['f32']);
  check.shape('tokens', tokens, ['batch', 'K']);
  check.shape('sourceBeams', sourceBeams, ['batch', 'K']);
  check.shape('scores', scores, ['batch', 'K']);
}

export function checkBeamTopK<T extends Tensor>(check: OpCheck<T>, args: BeamTopKArgs) {
  const logits = check.tensor('logits', args.logits);
  const beamScores = check.optional('beamScores', args.beamScores);
  const tokens = check.tensor('tokens', args.tokens);
  const sourceBeams = check.tensor('sourceBeams', args.sourceBeams);
  const scores = check.tensor('scores', args.scores);
  check.float('logits', logits);
  check.shape('logits', logits, ['rows', 'Vp']);
  const rows = check.size('rows'), Vp = check.size('Vp');
  const batch = checkBeams(check, args.beams, rows, 'logits');
  const classes = args.classes ?? Vp;
  check.integer('classes', classes, 1);
  if (classes > Vp) check.fail(`'classes' must be at most the logits' last dimension (${Vp}), got ${classes}`);
  if (beamScores) {
    check.dtype('beamScores', beamScores, ['f32']);
    check.shape('beamScores', beamScores, ['rows']);
  }
  checkCandidates(check, tokens, sourceBeams, scores);
  if (check.size('batch') !== batch) check.fail(`'tokens' has ${check.size('batch')} items but 'logits' holds ${batch} (rows / beams)`);
  const K = check.size('K');
  if (K < 1 || K > args.beams * classes) check.fail(`the candidate count K (${K}) must be in [1, beams·classes = ${args.beams * classes}]`);
  const bannedTokens = args.bannedTokens ?? [];
  checkTokenList(check, 'bannedTokens', bannedTokens, classes);
  return { logits, beamScores, tokens, sourceBeams, scores, beams: args.beams, batch, classes, Vp, K, bannedTokens, renormalize: args.renormalize ?? false };
}

export function checkBeamAdvance<T extends Tensor>(check: OpCheck<T>, args: BeamAdvanceArgs) {
  const tokens = check.tensor('tokens', args.tokens);
  const sourceBeams = check.tensor('sourceBeams', args.sourceBeams);
  const scores = check.tensor('scores', args.scores);
  const nextTokens = check.tensor('nextTokens', args.nextTokens);
  const beamScores = check.tensor('beamScores', args.beamScores);
  const cacheRows = check.tensor('cacheRows', args.cacheRows);
  const positions = check.tensor('positions', args.positions);
  checkCandidates(check, tokens, sourceBeams, scores);
  check.dtype('nextTokens', nextTokens, ['i32']);
  check.dtype('beamScores', beamScores, ['f32']);
  check.dtype('cacheRows', cacheRows, ['i32']);
  check.dtype('positions', positions, ['i32']);
  check.shape('nextTokens', nextTokens, ['rows']);
  check.shape('beamScores', beamScores, ['rows']);
  check.shape('positions', positions, ['rows']);
  check.shape('cacheRows', cacheRows, [2, 'rows', 'L']);
  const rows = check.size('rows'), batch = check.size('batch'), K = check.size('K');
  const items = checkBeams(check, args.beams, rows, 'nextTokens');
  if (items !== batch) check.fail(`'tokens' has ${batch} items but 'nextTokens' holds ${items} (rows / beams)`);
  if (K < args.beams) check.fail(`there are ${K} candidates per item, fewer than beams (${args.beams})`);
  checkTokenList(check, 'eosTokens', args.eosTokens, 2 ** 31);
  return { tokens, sourceBeams, scores, nextTokens, beamScores, cacheRows, positions, beams: args.beams, eosTokens: args.eosTokens, batch, K, rows, L: check.size('L') };
}

export function checkBeamSelfAttention<T extends Tensor>(check: OpCheck<T>, args: BeamSelfAttentionArgs) {
  const qkv = check.tensor('qkv', args.qkv);
  const bias = check.tensor('bias', args.bias);
  const kCache = check.tensor('kCache', args.kCache);
  const vCache = check.tensor('vCache', args.vCache);
  const cacheRows = check.tensor('cacheRows', args.cacheRows);
  const positions = check.tensor('positions', args.positions);
  const out = check.tensor('out', args.out);
  check.float('qkv', qkv);
  check.sameDType(['qkv', 'bias', 'kCache', 'vCache', 'out'], [qkv, bias, kCache, vCache, out]);
  check.shape('out', out, ['R', 'H']);
  const H = check.size('H');
  check.integer('heads', args.heads, 1);
  if (H % args.heads !== 0) check.fail(`hidden size ${H} is not divisible by ${args.heads} heads`);
  const d = H / args.heads;
  check.shape('qkv', qkv, ['R', 3 * H]);
  check.shape('bias', bias, [3 * H]);
  check.shape('kCache', kCache, ['R', args.heads, 'L', d]);
  check.shape('vCache', vCache, ['R', args.heads, 'L', d]);
  check.dtype('cacheRows', cacheRows, ['i32']);
  check.shape('cacheRows', cacheRows, [2, 'R', 'L']);
  check.dtype('positions', positions, ['i32']);
  check.shape('positions', positions, ['R']);
  return { qkv, bias, kCache, vCache, cacheRows, positions, out, heads: args.heads, rows: check.size('R'), H, d, L: check.size('L') };
}

export function checkBeamCrossAttention<T extends Tensor>(check: OpCheck<T>, args: BeamCrossAttentionArgs) {
  const q = check.tensor('q', args.q);
  const kv = check.tensor('kv', args.kv);
  const keyLengths = check.tensor('keyLengths', args.keyLengths);
  const out = check.tensor('out', args.out);
  check.float('q', q);
  check.sameDType(['q', 'kv', 'out'], [q, kv, out]);
  check.shape('q', q, ['R', 'H']);
  check.shape('out', out, ['R', 'H']);
  check.shape('kv', kv, ['batch', 'Lk', 'W']);
  check.dtype('keyLengths', keyLengths, ['i32']);
  check.shape('keyLengths', keyLengths, ['batch']);
  const H = check.size('H'), W = check.size('W'), rows = check.size('R'), batch = check.size('batch');
  check.integer('heads', args.heads, 1);
  if (H % args.heads !== 0) check.fail(`hidden size ${H} is not divisible by ${args.heads} heads`);
  if (W % (2 * H) !== 0) check.fail(`'kv' rows hold ${W} values, not a multiple of 2·H = ${2 * H} (a K and a V block per layer)`);
  const layers = W / (2 * H);
  check.integer('layer', args.layer);
  if (args.layer >= layers) check.fail(`'layer' is ${args.layer} but 'kv' holds ${layers} layers`);
  const items = checkBeams(check, args.beams, rows, 'q');
  if (items !== batch) check.fail(`'q' holds ${items} items (rows / beams) but 'kv' has ${batch}`);
  return { q, kv, keyLengths, out, layer: args.layer, layers, heads: args.heads, beams: args.beams, batch, rows, H, d: H / args.heads, Lk: check.size('Lk') };
}
