import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CpuBackend } from '../../src/backend/cpu/index.js';
import { ArgumentError } from '../../src/errors.js';
import { layoutWorkspace, Workspace } from '../../src/nn/workspace.js';

const specs = [
  { name: 'wte', shape: [50, 8] },
  { name: 'ln.gamma', shape: [8] },
  { name: 'ln.beta', shape: [8] },
  { name: 'fc.w', shape: [3, 5] },
];

test('entries start on aligned offsets, in table order, without overlap', () => {
  const layout = layoutWorkspace(specs, 'bf16', 256);
  const align = 256 / 2;
  let end = 0;
  for (const e of layout.entries) {
    assert.equal(e.offset % align, 0, `${e.name} is not 256-byte aligned`);
    assert.ok(e.offset >= end, `${e.name} overlaps the previous entry`);
    end = e.offset + e.numel;
  }
  assert.deepEqual(layout.entries.map((e) => [e.name, e.offset, e.numel]), [['wte', 0, 400], ['ln.gamma', 512, 8], ['ln.beta', 640, 8], ['fc.w', 768, 15]]);
  assert.equal(layout.numel, 896);
});

test('a workspace gives views that share the flat buffer, zero-filled padding included', () => {
  const backend = new CpuBackend();
  const layout = layoutWorkspace(specs, 'f32', 64);
  const ws = Workspace.allocate(backend, layout);
  backend.fill(ws.get('ln.gamma'), 1.5);
  const flat = backend.download(ws.flat);
  const gamma = layout.entries.find((e) => e.name === 'ln.gamma')!;
  for (let i = 0; i < flat.length; i++) {
    const inside = i >= gamma.offset && i < gamma.offset + gamma.numel;
    assert.equal(flat[i], inside ? 1.5 : 0, `element ${i}`);
  }
  assert.deepEqual(ws.get('fc.w').shape, [3, 5]);
  assert.deepEqual(ws.names, ['wte', 'ln.gamma', 'ln.beta', 'fc.w']);
  assert.throws(() => ws.get('nope'), /workspace has no tensor 'nope'/);
});

test('bad tables are refused naming the entry', () => {
  assert.throws(() => layoutWorkspace([{ name: 'a', shape: [1] }, { name: 'a', shape: [2] }], 'f32'), (e: Error) => e instanceof ArgumentError && /'a' appears twice/.test(e.message));
  assert.throws(() => layoutWorkspace([{ name: 'a', shape: [-1] }], 'f32'), /'a' has invalid shape \[-1\]/);
  assert.throws(() => layoutWorkspace([], 'f32', 6), /alignBytes 6 must be a multiple/);
});
