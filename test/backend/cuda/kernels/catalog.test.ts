// Compiles every catalogued kernel with nvcc for sm_90 (CI has nvcc but no GPU). Skips with a
// reason where nvcc is not installed.

import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { kernelCatalog } from '../../../../src/backend/cuda/kernels/catalog.js';

const run = promisify(execFile);

function findNvcc(): string | null {
  for (const candidate of [process.env.NVCC, 'nvcc', '/usr/local/cuda/bin/nvcc']) {
    if (!candidate) continue;
    try { execFileSync(candidate, ['--version'], { stdio: 'ignore' }); return candidate; } catch { /* try the next */ }
  }
  return null;
}

const nvcc = findNvcc();

test('the catalog lists every family with unique kernel sources', () => {
  const entries = kernelCatalog();
  const families = new Set(entries.map((e) => e.family));
  assert.deepEqual([...families].sort(), ['adam', 'cross-entropy', 'elementwise', 'embedding', 'layernorm', 'softmax']);
  const sources = new Set(entries.map((e) => e.source));
  assert.equal(sources.size, entries.length, 'two catalog entries generate identical source');
  for (const e of entries) assert.match(e.source, new RegExp(`extern "C" __global__ void\\b[^;{]*\\b${e.name}\\(`), `${e.family}: kernel '${e.name}' not defined in its source`);
});

test('every catalogued kernel compiles with nvcc -arch=sm_90', { skip: nvcc ? false : 'nvcc not found (set NVCC or install the CUDA toolkit)', timeout: 30 * 60_000 }, async () => {
  const entries = kernelCatalog();
  const dir = mkdtempSync(join(tmpdir(), 'fuseformer-catalog-'));
  const failures: string[] = [];
  try {
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < entries.length) {
        const index = next++;
        const entry = entries[index]!;
        const file = join(dir, `${index}-${entry.family}-${entry.name}.cu`);
        writeFileSync(file, entry.source);
        try {
          await run(nvcc!, ['-cubin', '-arch=sm_90', '-std=c++17', '-o', `${file}.cubin`, file], { maxBuffer: 16 << 20 });
        } catch (error) {
          const stderr = (error as { stderr?: string }).stderr ?? String(error);
          failures.push(`${entry.family}/${entry.name}:\n${stderr.split('\n').slice(0, 20).join('\n')}`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(4, cpus().length)) }, worker));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(failures, [], `${failures.length} of ${entries.length} kernels failed to compile:\n${failures.join('\n\n')}`);
});
