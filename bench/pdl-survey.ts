// `node dist/bench/pdl-survey.js [--match REGEX] [--jobs N]`: where ptxas put the grid-dependency wait in
// every catalogued kernel that waits on the kernel before it (runtime/kernel.ts gridDependencyWait),
// compiled as the runtime compiles it (compiledSource), without a GPU: nvcc here for the PTX and the cubin,
// bench/sass-local.sh for the SASS. A row a kernel: the global loads ahead of griddepcontrol.wait in the PTX
// (what the source asks for) and in the SASS (what ptxas scheduled; cp.async and TMA copies not counted),
// the weight loads among them (LDG.E.NA: weight-stream.ts), and the instruction count. "moved" marks a
// kernel whose SASS has more loads ahead of the wait than its PTX: ptxas moved loads above it — legitimate
// only for data no earlier kernel writes (weights, γ, bias, zeros). Session 30's survey found x loads
// there in the 4-row INT4 GEMV; docs/perf.md, "Session 30".

import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { promisify } from 'node:util';
import { kernelCatalog } from '../src/backend/cuda/kernels/catalog.js';
import { compiledSource } from '../src/backend/cuda/runtime/kernel.js';

const run = promisify(execFile);
const { values } = parseArgs({ options: { match: { type: 'string' }, jobs: { type: 'string', default: '2' } } });
const kernels = kernelCatalog().filter((e) => e.gridDependencyWait === true && (!values.match || new RegExp(values.match).test(`${e.family}/${e.name}`)));
if (kernels.length === 0) throw new Error(`--match '${values.match}': no catalogued kernel that waits on its grid dependency matches`);

/** Lines of `text` before the first line matching `wait` that match `load` (all of them when there is no wait). */
function loadsAhead(text: string, wait: RegExp, load: RegExp): number {
  const lines = text.split('\n');
  const at = lines.findIndex((line) => wait.test(line));
  return lines.slice(0, at < 0 ? lines.length : at).filter((line) => load.test(line)).length;
}

interface Row { kernel: string; ptx: number; sass: number; weights: number; instructions: number }
const dir = mkdtempSync(join(tmpdir(), 'fuseformer-pdl-'));
const rows: Row[] = [];
try {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < kernels.length) {
      const e = kernels[next++]!;
      const base = join(dir, `${rows.length}-${e.name}`);
      const arch = e.archSpecific ? 'sm_90a' : 'sm_90';
      writeFileSync(`${base}.cu`, compiledSource(e));
      await run('nvcc', ['-ptx', `-arch=${arch}`, '-std=c++17', '-w', '-o', `${base}.ptx`, `${base}.cu`], { maxBuffer: 64 << 20 });
      await run('nvcc', ['-cubin', `-arch=${arch}`, '-std=c++17', '-w', '-o', `${base}.cubin`, `${base}.cu`], { maxBuffer: 64 << 20 });
      await run('bash', ['bench/sass-local.sh', `${base}.cubin`], { maxBuffer: 64 << 20 });
      const ptx = readFileSync(`${base}.ptx`, 'utf8'), sass = readFileSync(`${base}.sass`, 'utf8');
      rows.push({
        kernel: `${e.family}/${e.name}`,
        ptx: loadsAhead(ptx, /griddepcontrol\.wait/, /\bld\.(?!param|shared|local|const)[\w:.]+\s/),
        sass: loadsAhead(sass, /ACQBULK/, /\bLDG(?!STS)|\sLD\.E/),
        weights: loadsAhead(sass, /ACQBULK/, /LDG\.E\.NA/),
        instructions: sass.split('\n').filter((line) => /^\s+\/\*[0-9a-f]{4}\*\//.test(line)).length,
      });
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Number(values.jobs)) }, worker));
} finally {
  rmSync(dir, { recursive: true, force: true });
}

rows.sort((a, b) => a.kernel.localeCompare(b.kernel));
console.log('| kernel | loads ahead of the wait: PTX | SASS | of them weights | instructions | |');
console.log('|---|---:|---:|---:|---:|---|');
for (const r of rows) console.log(`| ${r.kernel} | ${r.ptx} | ${r.sass} | ${r.weights} | ${r.instructions} | ${r.sass > r.ptx ? 'moved' : ''} |`);
console.log(`\n${rows.length} kernels; ${rows.filter((r) => r.sass > r.ptx).length} with loads moved above the wait (check each: weights and constants only).`);
