// Argument checks of decodeLayers (every layer of one sequence's decode step as one op), shared by the backends.
//   x, h [1, H]; positions i32 [1]; per layer: gammas/betas/biases [H] (qkvBias [W], upBias [F or 2F]),
//   qkv [W = (Hq + 2·Hkv)·d, H], out [H, Hq·d], up [F or 2F, H], down [H, F], kCache/vCache [1, Hkv, maxLen, d];
//   rope.invFreq f32 [d/2]; workspace f32 [≥ decodeLayersWorkspaceFloats]. One float dtype for the rest.

import type { Tensor } from '../../tensor.js';
import type { DecodeLayersArgs } from '../backend.js';
import { decodeLayersWorkspaceFloats } from '../backend.js';
import type { OpCheck } from '../validate.js';
import { ACTIVATIONS } from './elementwise.js';

export function checkDecodeLayers<T extends Tensor>(check: OpCheck<T>, args: DecodeLayersArgs) {
  const x = check.tensor('x', args.x);
  check.float('x', x);
  const dtype = x.dtype;
  const same = (name: string, t: Tensor | undefined, pattern: readonly (number | string)[]) => check.typed(name, t, [dtype], pattern);
  check.shape('x', x, [1, 'H']);
  const h = same('h', args.h, [1, 'H']);
  const positions = check.typed('positions', args.positions, ['i32'], [1]);
  if (args.norm !== 'layer' && args.norm !== 'rms') check.fail(`'norm' must be 'layer' or 'rms', got '${String(args.norm)}'`);
  if (!ACTIVATIONS.includes(args.activation)) check.fail(`'activation' must be one of ${ACTIVATIONS.join(', ')}, got '${String(args.activation)}'`);
  check.nonNegative('eps', args.eps);
  check.integer('heads', args.heads, 1);
  check.integer('kvHeads', args.kvHeads, 1);
  const Hq = args.heads, Hkv = args.kvHeads;
  if (Hq % Hkv !== 0) check.fail(`'heads' (${Hq}) must be a multiple of 'kvHeads' (${Hkv})`);
  if (!Array.isArray(args.layers) || args.layers.length === 0) check.fail("'layers' must list at least one layer");
  const norm = (name: string, n: { gamma: Tensor; beta?: Tensor } | undefined) => {
    if (!n) check.fail(`'${name}' is required`);
    same(`${name}.gamma`, n.gamma, ['H']);
    if (args.norm === 'layer') same(`${name}.beta`, n.beta ?? check.fail(`'${name}.beta' is required with norm 'layer'`), ['H']);
    else check.absent(`${name}.beta`, n.beta, "with norm 'rms'");
  };
  const first = args.layers[0]!;
  const kFirst = check.tensor('layers[0].kCache', first.kCache);
  if (kFirst.rank !== 4) check.fail(`'layers[0].kCache' has shape [${kFirst.shape.join(', ')}]: expected [1, Hkv, maxLen, d]`);
  const d = kFirst.shape[3]!;
  const gated = check.tensor('layers[0].up', first.up).shape[0] === 2 * check.tensor('layers[0].down', first.down).shape[1]!;
  const layers = args.layers.map((l, i) => {
    const at = (name: string) => `layers[${i}].${name}`;
    norm(at('norm1'), l.norm1);
    norm(at('norm2'), l.norm2);
    const qkv = same(at('qkv'), l.qkv, [(Hq + 2 * Hkv) * d, 'H']);
    const out = same(at('out'), l.out, ['H', Hq * d]);
    const down = same(at('down'), l.down, ['H', 'F']);
    const up = same(at('up'), l.up, [gated ? 2 * check.size('F') : 'F', 'H']);
    const kCache = same(at('kCache'), l.kCache, [1, Hkv, 'maxLen', d]);
    const vCache = same(at('vCache'), l.vCache, [1, Hkv, 'maxLen', d]);
    const bias = (name: string, t: Tensor | undefined, width: number | string) => (t ? same(at(name), t, [width]) : undefined);
    const presence = [l.qkvBias, l.outBias, l.upBias, l.downBias].map((b) => b !== undefined).join();
    const firstPresence = [first.qkvBias, first.outBias, first.upBias, first.downBias].map((b) => b !== undefined).join();
    if (presence !== firstPresence) check.fail(`${at('*Bias')}: every layer must have the same biases as layer 0`);
    return {
      qkv, out, up, down, kCache, vCache,
      qkvBias: bias('qkvBias', l.qkvBias, (Hq + 2 * Hkv) * d), outBias: bias('outBias', l.outBias, 'H'),
      upBias: bias('upBias', l.upBias, gated ? 2 * check.size('F') : 'F'), downBias: bias('downBias', l.downBias, 'H'),
    };
  });
  norm('finalNorm', args.finalNorm);
  const H = check.size('H'), F = check.size('F'), maxLen = check.size('maxLen');
  if (d % 2 !== 0) check.fail(`the caches' head dimension d = ${d} must be even`);
  const invFreq = args.rope ? check.typed('rope.invFreq', args.rope.invFreq, ['f32'], [d / 2]) : undefined;
  if (args.rope) check.finite('rope.scale', args.rope.scale);
  const scale = args.scale ?? 1 / Math.sqrt(d);
  check.finite('scale', scale);
  const workspace = check.typed('workspace', args.workspace, ['f32'], ['workspaceFloats']);
  const needed = decodeLayersWorkspaceFloats({ hidden: H, heads: Hq, kvHeads: Hkv, headDim: d, ffn: F, maxLen });
  if (workspace.numel < needed) check.fail(`'workspace' holds ${workspace.numel} f32 but this model needs ${needed} (decodeLayersWorkspaceFloats)`);
  return { x, h, positions, layers, invFreq, workspace, H, F, d, Hq, Hkv, maxLen, gated, scale, dtype };
}
