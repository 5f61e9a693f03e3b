// The serving engine's host work per step, with the GPU taken out: the engine runs on the CPU backend
// with every kernel op a no-op (allocation, views, uploads and downloads stay real), so a step's time is
// what the scheduler, the row layout, the block tables, the sampling inputs and the uploads cost in JS.
// On CUDA that time is serial with the replayed graph of the step (the GPU idles while the host prepares
// the next one): a 128-row decode step's profile on the H200 showed 1.9 of 4.8 ms between kernels.
// Workload: a closed loop of C clients, 4·C requests, prompts of 16–515 tokens and 16–215 new tokens
// (seeded; tokens are whatever the no-op sampler leaves, so none stops early), blocks of 16, 2048 tokens
// a step, graphs on (their replays are no-ops too; the step shapes captured are counted, each one a
// capture and an eager first run on the GPU).
//   node dist/bench/serve-host.js [--concurrency 16,64,256] [--json FILE]

import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { Backend } from '../src/backend/backend.js';
import { CpuBackend } from '../src/backend/cpu/index.js';
import { randomDecoderModel } from '../src/infer/model.js';
import { resolveSampling } from '../src/infer/sampling.js';
import { presetConfig } from '../src/models/registry.js';
import { NON_KERNEL_MEMBERS } from '../src/profile/cost.js';
import { ServingEngine } from '../src/serve/engine.js';

/** The CPU backend with its kernel ops turned into no-ops (see the header). */
export function hostOnlyBackend(): Backend {
  const cpu = new CpuBackend(), real = new Set<string | symbol>(NON_KERNEL_MEMBERS);
  return new Proxy(cpu, {
    get(target, property) {
      const value = (target as unknown as Record<string | symbol, unknown>)[property];
      if (typeof value !== 'function') return value;
      return real.has(property) ? value.bind(target) : () => undefined;
    },
  });
}

export interface HostRun { concurrency: number; steps: number; msPerStep: number; positionsPerStep: number; shapesCaptured: number }

/** The closed loop of the header at concurrency C on `backend`; the host ms per engine.step(). */
export function measureHost(backend: Backend, concurrency: number, seed = 7): HostRun {
  const base = presetConfig('llama-tiny');
  if (base.family !== 'llama') throw new Error('serve-host: llama-tiny is expected to be a Llama config');
  const model = randomDecoderModel({ family: 'llama', config: { ...base.config, maxPositions: 1024 } }, backend, { dtype: 'f32', seed: 1n });
  const engine = new ServingEngine(model, { maxRunning: concurrency, maxBatchTokens: 2048, maxLen: 1024, blockSize: 16, graphs: true });
  try {
    let state = seed;
    const next = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const greedy = resolveSampling({ temperature: 0 });
    const total = 4 * concurrency;
    let submitted = 0;
    const submit = (): void => {
      submitted++;
      const length = 16 + Math.floor(next() * 500), maxTokens = 16 + Math.floor(next() * 200);
      engine.submit({
        prompt: Array.from({ length }, () => Math.floor(next() * 1000)), maxTokens, sampling: greedy, stopTokenIds: [],
        onToken: () => {}, onFinish: () => { if (submitted < total) submit(); },
      });
    };
    for (let c = 0; c < concurrency; c++) submit();
    let steps = 0, ms = 0;
    const before = engine.stats().computedPositions;
    while (engine.hasWork) {
      const t0 = performance.now();
      engine.step();
      ms += performance.now() - t0;
      steps++;
    }
    const stats = engine.stats();
    return { concurrency, steps, msPerStep: ms / steps, positionsPerStep: (stats.computedPositions - before) / steps, shapesCaptured: stats.graphCaptures };
  } finally {
    engine.dispose();
    model.free();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { concurrency: { type: 'string', default: '16,64,256' }, json: { type: 'string' } } });
  const backend = hostOnlyBackend();
  const runs = values.concurrency!.split(',').map((c) => {
    const C = Number(c);
    if (!Number.isInteger(C) || C < 1) throw new Error(`--concurrency: positive integers, got '${c}'`);
    measureHost(backend, C); // warm the JIT
    return measureHost(backend, C);
  });
  console.log('| concurrency | steps | host ms / step | positions / step | step shapes captured |\n|---|---|---|---|---|');
  for (const r of runs) console.log(`| ${r.concurrency} | ${r.steps} | ${r.msPerStep.toFixed(3)} | ${r.positionsPerStep.toFixed(0)} | ${r.shapesCaptured} |`);
  if (values.json) writeFileSync(values.json, JSON.stringify({ date: new Date().toISOString(), runs }, null, 2) + '\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
