// fuseformer's encoder-decoder generation against Hugging Face's MarianMTModel.generate (run on the GPU
// machine, where python3 has torch + transformers): randomly initialised models (a small one and the
// Transformer-base size of opus-mt) saved by save_pretrained, opus-mt's generation settings, random sources.
//   f32:  beam search (4 beams) and greedy search must return exactly HF's best hypotheses (and beam scores
//         within 1e-4);
//   bf16: reported as the fraction of sources whose hypothesis equals HF's (f32 and bf16 runs): near-ties
//         between candidates may resolve differently under bf16 rounding, so this is a rate, not a check.
// Usage: node dist/bench/beam-parity.js [--json bench/results/beam-parity.json] [--max-new-tokens 64] [--sizes small,base]

import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { FloatDType } from '../src/dtype.js';
import { loadSeq2Seq, translate } from '../src/infer/seq2seq.js';
import type { Translation } from '../src/infer/seq2seq.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/beam-parity.json' },
    'max-new-tokens': { type: 'string', default: '64' },
    sizes: { type: 'string', default: 'small,base' },
  },
});
const maxNewTokens = Number(cli['max-new-tokens']);
const BEAMS = [4, 1];

/** Each Python stage (build the models, or one generate() sweep) must end within this long. */
const PYTHON_STAGE_MS = 300_000;

/** Runs one stage of hf_marian.py, saying what it is and how long it took (a stalled stage is named, and killed). */
function python(args: string[]): void {
  const t0 = performance.now();
  console.log(`beam parity: hf_marian.py ${args.filter((a) => !a.startsWith('/')).join(' ')} …`);
  const run = spawnSync('python3', ['bench/hf_marian.py', ...args], {
    encoding: 'utf8', timeout: PYTHON_STAGE_MS, killSignal: 'SIGKILL', maxBuffer: 64 << 20, env: { ...process.env, PYTHONUNBUFFERED: '1' },
  });
  if (run.error || run.status !== 0) {
    const why = run.signal ? `killed (${run.signal}) after ${((performance.now() - t0) / 1000).toFixed(0)} s` : `status ${run.status}`;
    throw new Error(`hf_marian.py ${args[0]} failed (${why}): ${(run.stderr || String(run.error ?? '')).trim().split('\n').slice(-5).join(' | ')}`);
  }
  console.log(`beam parity:   done in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}

interface HfOutput { outputs: number[][]; scores?: number[] }

const { backend } = await selectBackend();
console.log(`beam parity on ${backend.description}: sizes ${cli.sizes}, ${maxNewTokens} new tokens`);
const report: Record<string, unknown> = { device: backend.description, maxNewTokens };
const table: string[] = ['| model | dtype | search | equal to HF f32 | equal to HF bf16 | worst score gap | mean length |', '|---|---|---|---|---|---|---|'];
let failures = 0;

for (const size of (cli.sizes ?? '').split(',').filter(Boolean)) {
  const dir = mkdtempSync(join(tmpdir(), `fuseformer-beam-parity-${size}-`));
  try {
    python(['build', dir, '--size', size, '--sources', size === 'base' ? '8' : '16']);
    const sources = (JSON.parse(readFileSync(join(dir, 'sources.json'), 'utf8')) as { sources: number[][] }).sources;
    const hf = new Map<string, HfOutput>();
    for (const dtype of ['f32', 'bf16']) {
      for (const beams of BEAMS) {
        python(['generate', dir, '--dtype', dtype, '--beams', String(beams), '--max-new-tokens', String(maxNewTokens)]);
        hf.set(`${dtype}/${beams}`, JSON.parse(readFileSync(join(dir, `hf-${dtype}-beams${beams}.json`), 'utf8')) as HfOutput);
      }
    }
    for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
      console.log(`beam parity: ${size} ${dtype}: fuseformer translates ${sources.length} sources …`);
      const translator = loadSeq2Seq(dir, backend, { dtype });
      if (translator.unusedTensors.length > 0) console.log(`${size}: checkpoint tensors not used: ${translator.unusedTensors.join(', ')}`);
      for (const beams of BEAMS) {
        const ours: Translation[] = translate(translator, sources, { numBeams: beams, maxNewTokens });
        const same = (theirs: HfOutput) => ours.filter((r, i) => JSON.stringify(r.tokens) === JSON.stringify(theirs.outputs[i])).length / ours.length;
        const f32Ref = hf.get(`f32/${beams}`)!, bf16Ref = hf.get(`bf16/${beams}`)!;
        const scoreRef = dtype === 'f32' ? f32Ref : bf16Ref;
        const scoreGap = scoreRef.scores ? Math.max(...ours.map((r, i) => Math.abs(r.score - scoreRef.scores![i]!))) : null;
        const entry = {
          equalToHfF32: same(f32Ref), equalToHfBf16: same(bf16Ref), worstScoreGap: scoreGap,
          meanLength: ours.reduce((n, r) => n + r.tokens.length, 0) / ours.length,
          mismatches: ours.flatMap((r, i) => (JSON.stringify(r.tokens) === JSON.stringify(f32Ref.outputs[i]) ? [] : [{ source: i, ours: r.tokens, hf: f32Ref.outputs[i] }])).slice(0, 3),
        };
        const search = beams > 1 ? `beam ${beams}` : 'greedy';
        if (dtype === 'f32' && (entry.equalToHfF32 !== 1 || (scoreGap !== null && scoreGap > 1e-4))) {
          failures++;
          console.log(`${size} f32 ${search}: MISMATCH ${JSON.stringify(entry.mismatches[0] ?? { scoreGap })}`);
        }
        report[`${size} ${dtype} ${search}`] = entry;
        const percent = (x: number) => `${(100 * x).toFixed(0)}%`;
        table.push(`| ${size} | ${dtype} | ${search} | ${percent(entry.equalToHfF32)} | ${percent(entry.equalToHfBf16)} | ${scoreGap === null ? '–' : scoreGap.toExponential(1)} | ${entry.meanLength.toFixed(1)} |`);
      }
      translator.model.dispose();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

report.failures = failures;
if (cli.json) {
  mkdirSync(dirname(cli.json), { recursive: true });
  writeFileSync(cli.json, JSON.stringify(report, null, 1));
}
console.log(table.join('\n'));
console.log(failures === 0 ? 'beam parity: f32 beam and greedy search match Hugging Face exactly' : `beam parity: ${failures} check(s) failed`);
process.exitCode = failures === 0 ? 0 : 1;
