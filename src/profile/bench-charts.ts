// Bar charts of the benchmark results in bench/results/*.json (SVG + PNG into bench/results/charts/):
// fuseformer beside its baselines, one chart per suite (and dtype):
//   train      tokens/s per model: each fuseformer variant, PyTorch eager and torch.compile (train.json)
//   kernels    % of copy bandwidth per fused op: fuseformer and PyTorch eager, the copy as the 100% line
//              (kernels.json; one chart per dtype)
//   attention  TFLOP/s of the fused attention op and PyTorch SDPA (flash, cuDNN), forward and forward +
//              backward (attention.json; two charts)
//   decode     ms per token (a step of the engine), one chart per batch size: the engine, end to end, HF
//              generate() eager, static cache and static + compile, and the bandwidth floor (decode.json)
//   quant      µs per linear layer: bf16, W4A16, W8A8 and PyTorch's bf16 F.linear (quant.json)
//   serve      output tokens/s per concurrency: continuous, static batching and HF generate (serve-speed.json)
// and the rooflines of the profiles kept in bench/results/profile/*.profile.json (writeRooflineCharts).
// A results file can carry its own charts — the way for a new benchmark to get one without code here:
//   "charts": [{ "name": "decode", "title": "…", "unit": "ms/token", "better": "lower",
//                "series": ["fuseformer", "PyTorch (HF generate)"],
//                "groups": [{ "label": "GPT-2 124M, batch 1", "values": { "fuseformer": 2.1, "PyTorch (HF generate)": 9.8 } }],
//                "note": "…", "reference": { "value": 100, "label": "…" } }]
// Those are drawn as declared (after the built-in ones), each into <name>.svg/png.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FuseformerError } from '../errors.js';
import type { BarChartSpec, BarGroup } from './bar-chart.js';
import { barChartSvg } from './bar-chart.js';
import type { KernelRow } from './profiler.js';
import { rooflineSvg } from './roofline-plot.js';
import type { Roofs } from './roofs.js';
import { writeSvgAndPng } from './svg.js';

export class BenchResultsError extends FuseformerError {}

export const BENCH_SUITES = ['kernels', 'train', 'attention', 'decode', 'serve', 'quant'] as const;
export type BenchSuite = (typeof BENCH_SUITES)[number];

/** A chart and the file stem it is written to. */
export interface NamedChart {
  readonly name: string;
  readonly spec: BarChartSpec;
}

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

function field<T>(file: string, object: Json, path: string, check: (v: unknown) => v is T, expected: string): T {
  const value = object[path.split('.').at(-1)!];
  if (!check(value)) throw new BenchResultsError(`${file}: field '${path}' should be ${expected}, got ${JSON.stringify(value)?.slice(0, 80) ?? 'nothing'}`);
  return value;
}
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const isString = (v: unknown): v is string => typeof v === 'string';

/** train.json (bench/train.ts): tokens/s per model, fuseformer's variants and PyTorch's two modes. */
export function trainCharts(json: Json, file = 'train.json'): NamedChart[] {
  const models = field(file, json, 'models', isObject, 'an object of models');
  const groups: BarGroup[] = [];
  const series: string[] = [];
  const addSeries = (name: string) => { if (!series.includes(name)) series.push(name); };
  for (const [model, entryValue] of Object.entries(models)) {
    if (!isObject(entryValue)) throw new BenchResultsError(`${file}: models.${model} should be an object`);
    const ours = field(file, entryValue, `models.${model}.fuseformer`, isObject, 'an object of variants');
    const values: Record<string, number | undefined> = {};
    for (const [variant, m] of Object.entries(ours)) {
      if (!isObject(m)) throw new BenchResultsError(`${file}: models.${model}.fuseformer.${variant} should be an object`);
      const name = `fuseformer ${variant}`;
      addSeries(name);
      values[name] = field(file, m, `models.${model}.fuseformer.${variant}.tokensPerS`, isNumber, 'a number');
    }
    const torch = entryValue['torch'];
    if (isObject(torch)) {
      for (const [mode, label] of [['eager', 'PyTorch eager'], ['compile', 'torch.compile']] as const) {
        const t = torch[mode];
        addSeries(label);
        values[label] = isObject(t) && isNumber(t['tokens_per_s']) ? t['tokens_per_s'] : undefined;
      }
    }
    const batch = entryValue['batch'], seqLen = entryValue['seqLen'];
    groups.push({ label: isNumber(batch) && isNumber(seqLen) ? `${model}, ${batch}×${seqLen}` : model, values });
  }
  const colors = series.map((name, i) => (name.startsWith('fuseformer') ? ['#1f77b4', '#6baed6', '#08519c', '#3182bd', '#9ecae1'][i % 5]! : name === 'PyTorch eager' ? '#bdbdbd' : '#ff7f0e'));
  return [{
    name: 'train',
    spec: {
      title: 'Training throughput', unit: 'tokens/s', series: series.map((name, i) => ({ name, color: colors[i]! })), groups,
      note: [json['device'], json['date']].filter(isString).join(', '),
    },
  }];
}

/** kernels.json (bench/kernels.ts): % of copy bandwidth per op, fuseformer and PyTorch eager, a chart per dtype. */
export function kernelCharts(json: Json, file = 'kernels.json'): NamedChart[] {
  const copyGBps = field(file, json, 'copyGBps', isNumber, 'a number (GB/s)');
  const kernels = field(file, json, 'kernels', Array.isArray, 'a list');
  const byDtype = new Map<string, BarGroup[]>();
  kernels.forEach((k: unknown, i) => {
    if (!isObject(k)) throw new BenchResultsError(`${file}: kernels[${i}] should be an object`);
    const dtype = field(file, k, `kernels[${i}].dtype`, isString, 'a string');
    const ours = field(file, k, `kernels[${i}].percentOfCopy`, isNumber, 'a number');
    const bytes = field(file, k, `kernels[${i}].bytes`, isNumber, 'a number');
    const torchUs = k['torchUs'];
    const torch = isNumber(torchUs) && torchUs > 0 ? (100 * (bytes / (torchUs * 1e-6) / 1e9)) / copyGBps : undefined;
    const label = `${isString(k['model']) ? `${k['model']} ` : ''}${isString(k['op']) ? k['op'] : k['id']}`;
    const list = byDtype.get(dtype) ?? [];
    list.push({ label, values: { fuseformer: ours, 'PyTorch eager': torch } });
    byDtype.set(dtype, list);
  });
  const device = isString(json['device']) ? json['device'] : '';
  const date = isString(json['date']) ? json['date'].slice(0, 10) : '';
  return [...byDtype].map(([dtype, groups]) => ({
    name: `kernels-${dtype}`,
    spec: {
      title: `Memory-bound kernels, ${dtype}: share of copy bandwidth`, unit: '% of copy bandwidth',
      series: [{ name: 'fuseformer', color: '#1f77b4' }, { name: 'PyTorch eager', color: '#bdbdbd' }], groups,
      note: `${[device, date].filter(Boolean).join(', ')}; copy ${Math.round(copyGBps)} GB/s = 100%; the fewest bytes each op must move over its time`,
      reference: { value: 100, label: 'copy bandwidth' }, valueSuffix: '%',
    },
  }));
}

/**
 * attention.json (bench/attention.ts): TFLOP/s of the fused attention op against PyTorch SDPA's
 * FlashAttention-2 and cuDNN backends, forward and forward + backward (FLOPs: forward 4·B·H·L²·d, ÷2
 * causal; forward + backward 3.5× that, the bench's convention).
 */
export function attentionCharts(json: Json, file = 'attention.json'): NamedChart[] {
  const results = field(file, json, 'results', Array.isArray, 'a list');
  const series = [
    { name: 'fuseformer', color: '#1f77b4' }, { name: 'PyTorch SDPA (FlashAttention-2)', color: '#ff7f0e' }, { name: 'PyTorch SDPA (cuDNN)', color: '#bdbdbd' },
  ];
  const passes = [
    { name: 'attention-forward', title: 'Fused attention, forward', factor: 1, keys: ['oursFwdMs', 'torchFlashFwdMs', 'torchCudnnFwdMs'] },
    { name: 'attention-training', title: 'Fused attention, forward + backward', factor: 3.5, keys: ['oursFwdBwdMs', 'torchFlashFwdBwdMs', 'torchCudnnFwdBwdMs'] },
  ];
  const note = [json['device'], isString(json['date']) ? json['date'].slice(0, 10) : undefined].filter(isString).join(', ');
  return passes.map((pass) => ({
    name: pass.name,
    spec: {
      title: pass.title, unit: 'TFLOP/s', series, note: `${note}; FLOPs 4·B·H·L²·d forward (÷2 causal)${pass.factor !== 1 ? ', ×3.5 with the backward' : ''}`,
      groups: results.map((r: unknown, i) => {
        if (!isObject(r)) throw new BenchResultsError(`${file}: results[${i}] should be an object`);
        const flops = pass.factor * field(file, r, `results[${i}].fwdFlops`, isNumber, 'a number');
        const values: Record<string, number | undefined> = {};
        pass.keys.forEach((key, j) => {
          const ms = r[key];
          values[series[j]!.name] = isNumber(ms) && ms > 0 ? flops / (ms * 1e-3) / 1e12 : undefined;
        });
        const shape = isNumber(r['B']) && isNumber(r['H']) ? ` (${r['B']}×${r['H']})` : '';
        return { label: `${field(file, r, `results[${i}].id`, isString, 'a string')}${shape}`, values };
      }),
    },
  }));
}

/**
 * decode.json (bench/decode.ts): ms per decode step (one token for every sequence), one chart per
 * batch size: the engine's replayed step, the same end to end (host included), HF generate() eager, with
 * a static cache (which transformers compiles itself) and with it + our torch.compile, and the floor (the bytes a step must read ÷ copy bandwidth).
 */
export function decodeCharts(json: Json, file = 'decode.json'): NamedChart[] {
  const models = field(file, json, 'models', isObject, 'an object of models');
  const series = [
    { name: 'fuseformer', color: '#1f77b4' }, { name: 'fuseformer end to end', color: '#6baed6' },
    { name: 'HF eager', color: '#bdbdbd' }, { name: 'HF static cache', color: '#ff7f0e' }, { name: 'HF static cache + torch.compile', color: '#d62728' },
    { name: 'floor (bytes ÷ copy bandwidth)', color: '#2ca02c' },
  ];
  const byBatch = new Map<string, BarGroup[]>();
  for (const [model, entry] of Object.entries(models)) {
    if (!isObject(entry)) throw new BenchResultsError(`${file}: models.${model} should be an object`);
    const ours = field(file, entry, `models.${model}.ours`, isObject, 'an object by batch size');
    const torch = isObject(entry['torch']) && !isString(entry['torch']['error']) ? entry['torch'] : {};
    for (const [batch, o] of Object.entries(ours)) {
      if (!isObject(o)) throw new BenchResultsError(`${file}: models.${model}.ours.${batch} should be an object`);
      const hf = (mode: string): number | undefined => {
        const byBatchSize = torch[mode];
        const r = isObject(byBatchSize) ? byBatchSize[batch] : undefined;
        return isObject(r) && isNumber(r['ms_per_token']) ? r['ms_per_token'] : undefined;
      };
      const values: Record<string, number | undefined> = {
        fuseformer: field(file, o, `models.${model}.ours.${batch}.msPerToken`, isNumber, 'a number (ms)'),
        'fuseformer end to end': isNumber(o['e2eMsPerToken']) ? o['e2eMsPerToken'] : undefined,
        'HF eager': hf('eager'), 'HF static cache': hf('static'), 'HF static cache + torch.compile': hf('static-compile'),
        'floor (bytes ÷ copy bandwidth)': isNumber(o['floorMs']) ? o['floorMs'] : undefined,
      };
      const list = byBatch.get(batch) ?? [];
      list.push({ label: model, values });
      byBatch.set(batch, list);
    }
  }
  const note = [json['device'], json['date']].filter(isString).join(', ');
  return [...byBatch].map(([batch, groups]) => ({
    name: `decode-batch${batch}`,
    spec: { title: `Decode, batch ${batch}: time per step (a token for each sequence)`, unit: 'ms per token', better: 'lower' as const, series, groups, note },
  }));
}

/**
 * quant.json (bench/quant.ts): µs per linear layer at Llama-1B shapes, each variant (bf16 cuBLASLt,
 * W4A16, W8A8) beside PyTorch's bf16 F.linear, one group per layer and row count M.
 */
export function quantCharts(json: Json, file = 'quant.json'): NamedChart[] {
  const rows = field(file, json, 'rows', Array.isArray, 'a list');
  const torchName = 'PyTorch F.linear bf16';
  const series: string[] = [];
  const groups = new Map<string, Record<string, number | undefined>>();
  rows.forEach((r: unknown, i) => {
    if (!isObject(r)) throw new BenchResultsError(`${file}: rows[${i}] should be an object`);
    const id = field(file, r, `rows[${i}].id`, isString, 'a string');
    const variant = field(file, r, `rows[${i}].variant`, isString, 'a string');
    const values = groups.get(id) ?? {};
    if (!series.includes(variant)) series.push(variant);
    values[variant] = field(file, r, `rows[${i}].us`, isNumber, 'a number (µs)');
    if (isNumber(r['torchUs'])) values[torchName] = r['torchUs'];
    groups.set(id, values);
  });
  const all = [...series, torchName];
  const note = [json['device'], isString(json['date']) ? json['date'].slice(0, 10) : undefined].filter(isString).join(', ');
  return [{
    name: 'quant',
    spec: {
      title: 'Quantized linear layers (Llama-1B shapes)', unit: 'µs per layer', better: 'lower', note,
      series: all.map((name) => ({ name, ...(name === torchName ? { color: '#bdbdbd' } : {}) })),
      groups: [...groups].map(([label, values]) => ({ label, values })),
    },
  }];
}

/** The charts a results file declares itself (see the header). */
export function declaredCharts(json: Json, file: string): NamedChart[] {
  const charts = json['charts'];
  if (charts === undefined) return [];
  if (!Array.isArray(charts)) throw new BenchResultsError(`${file}: field 'charts' should be a list of charts`);
  return charts.map((c: unknown, i) => {
    const at = `charts[${i}]`;
    if (!isObject(c)) throw new BenchResultsError(`${file}: ${at} should be an object`);
    const name = field(file, c, `${at}.name`, isString, 'a file name stem');
    if (!/^[A-Za-z0-9._-]+$/.test(name)) throw new BenchResultsError(`${file}: ${at}.name '${name}' should be letters, digits, '.', '_' or '-'`);
    const series = field(file, c, `${at}.series`, Array.isArray, 'a list of series names').map((s: unknown, j) => {
      if (isString(s)) return { name: s };
      if (isObject(s) && isString(s['name'])) return { name: s['name'], ...(isString(s['color']) ? { color: s['color'] } : {}) };
      throw new BenchResultsError(`${file}: ${at}.series[${j}] should be a name or { name, color }`);
    });
    const groups = field(file, c, `${at}.groups`, Array.isArray, 'a list of groups').map((g: unknown, j) => {
      if (!isObject(g) || !isString(g['label']) || !isObject(g['values'])) throw new BenchResultsError(`${file}: ${at}.groups[${j}] should be { label, values: { series: number } }`);
      const values: Record<string, number | undefined> = {};
      for (const [k, v] of Object.entries(g['values'])) {
        if (v !== null && !isNumber(v)) throw new BenchResultsError(`${file}: ${at}.groups[${j}].values.${k} should be a number or null`);
        values[k] = v ?? undefined;
      }
      return { label: g['label'], values };
    });
    const better = c['better'];
    if (better !== undefined && better !== 'higher' && better !== 'lower') throw new BenchResultsError(`${file}: ${at}.better should be 'higher' or 'lower'`);
    const reference = c['reference'];
    if (reference !== undefined && !(isObject(reference) && isNumber(reference['value']) && isString(reference['label']))) {
      throw new BenchResultsError(`${file}: ${at}.reference should be { value: number, label: string }`);
    }
    return {
      name,
      spec: {
        title: field(file, c, `${at}.title`, isString, 'a string'), unit: field(file, c, `${at}.unit`, isString, 'a string'), series, groups,
        ...(better ? { better } : {}), ...(isString(c['note']) ? { note: c['note'] } : {}),
        ...(reference ? { reference: { value: reference['value'] as number, label: reference['label'] as string } } : {}),
      },
    };
  });
}

/**
 * The npm script and results file of each suite: bench:<suite> and <suite>.json, but for serving the
 * speed benchmark (continuous against static batching and HF generate: bench:serve-speed), not the
 * robustness load test (bench:serve).
 */
export const SUITE_BENCHMARK: Readonly<Record<BenchSuite, string>> = { kernels: 'kernels', train: 'train', attention: 'attention', decode: 'decode', serve: 'serve-speed', quant: 'quant' };

/** The results file of a suite. */
export function suiteResultsFile(resultsDir: string, suite: BenchSuite): string {
  return join(resultsDir, `${SUITE_BENCHMARK[suite]}.json`);
}

/** Output tokens/s per concurrency: continuous batching, static batching of the same engine, HF generate batched (serve-speed.json). */
export function serveCharts(json: Json, file = 'serve-speed.json'): NamedChart[] {
  const runs = json['runs'];
  if (!Array.isArray(runs) || runs.length === 0) throw new BenchResultsError(`${file}: expected a non-empty 'runs' array`);
  const groups: BarGroup[] = runs.map((r, i) => {
    if (!isObject(r)) throw new BenchResultsError(`${file}: runs[${i}] should be an object, got ${JSON.stringify(r)?.slice(0, 40)}`);
    const where = `runs[${i}]`;
    const concurrency = field(file, r, `${where}.concurrency`, (v): v is number => Number.isInteger(v) && (v as number) > 0, 'a positive integer');
    // A measurement may be absent (a run without HF, say); present, it must be a finite rate.
    const rate = (m: unknown, key: string, name: string): number | null => {
      if (m === undefined || m === null) return null;
      if (!isObject(m)) throw new BenchResultsError(`${file}: field '${where}.${name}' should be an object, got ${JSON.stringify(m)?.slice(0, 40)}`);
      return field(file, m, `${where}.${name}.${key}`, isNumber, 'a finite number');
    };
    return { label: `${concurrency} clients`, values: { 'continuous batching': rate(r['continuous'], 'tokensPerSecond', 'continuous'), 'static batching (same engine)': rate(r['static'], 'tokensPerSecond', 'static'), 'HF generate (batched)': rate(r['hf'], 'tokens_per_s', 'hf') } };
  });
  if (groups.length === 0) return [];
  return [{
    name: 'serve',
    spec: {
      title: 'Serving: output tokens/s under a closed loop of clients', unit: 'output tokens/s', better: 'higher',
      series: [{ name: 'continuous batching', color: '#1f77b4' }, { name: 'static batching (same engine)', color: '#6baed6' }, { name: 'HF generate (batched)', color: '#bdbdbd' }], groups,
      note: `${String(json['device'] ?? '')}, ${String(json['preset'] ?? '')} ${String(json['dtype'] ?? '')}, ${String(json['date'] ?? '').slice(0, 10)}`,
    },
  }];
}

/** Every chart of `suite` from its results file; `missing` when there is no file yet. */
/** A results file's JSON object, or an error naming the file. */
function readResults(file: string): Json {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new BenchResultsError(`${file}: not valid JSON (${(error as Error).message})`);
  }
  if (!isObject(json)) throw new BenchResultsError(`${file}: expected a JSON object`);
  return json;
}

export function suiteCharts(resultsDir: string, suite: BenchSuite): { charts: NamedChart[]; missing?: string } {
  const file = suiteResultsFile(resultsDir, suite);
  if (!existsSync(file)) return { charts: [], missing: file };
  const json = readResults(file);
  const builtIn = suite === 'train' ? trainCharts(json, file) : suite === 'kernels' ? kernelCharts(json, file)
    : suite === 'attention' ? attentionCharts(json, file) : suite === 'decode' ? decodeCharts(json, file)
    : suite === 'quant' ? quantCharts(json, file) : suite === 'serve' ? serveCharts(json, file) : [];
  return { charts: [...builtIn, ...declaredCharts(json, file)] };
}

export interface ChartsReport {
  readonly written: string[];
  /** One line per suite without charts, saying why. */
  readonly skipped: string[];
}

/** Writes every chart of `suites` into `chartsDir` as SVG and PNG. */
export function writeBenchCharts(resultsDir: string, suites: readonly BenchSuite[], chartsDir: string): ChartsReport {
  const written: string[] = [], skipped: string[] = [];
  for (const suite of suites) {
    const { charts, missing } = suiteCharts(resultsDir, suite);
    if (missing) { skipped.push(`${suite}: no results yet (${missing}; run npm run bench:${SUITE_BENCHMARK[suite]})`); continue; }
    if (charts.length === 0) { skipped.push(`${suite}: ${suiteResultsFile(resultsDir, suite)} declares no charts (a 'charts' field, see src/profile/bench-charts.ts)`); continue; }
    for (const chart of charts) {
      const files = writeSvgAndPng(join(chartsDir, chart.name), barChartSvg(chart.spec));
      written.push(files.svg);
      if (files.png) written.push(files.png);
      else skipped.push(`${chart.name}: SVG only (${files.pngError})`);
    }
  }
  return { written, skipped };
}

/**
 * The rooflines of the profiles kept under `<resultsDir>/profile/` (`fuseformer profile`'s profile.json,
 * saved as `<name>.profile.json`: a step profiled on the H200), each drawn into `roofline-<name>.svg/png`
 * — so the plots of measured steps can be redrawn and linked without the GPU. Files without measured
 * roofs (CPU profiles) are skipped with a line saying so.
 */
export function writeRooflineCharts(resultsDir: string, chartsDir: string): ChartsReport {
  const written: string[] = [], skipped: string[] = [], dir = join(resultsDir, 'profile');
  if (!existsSync(dir)) return { written, skipped: [`rooflines: no ${dir}`] };
  for (const name of readdirSync(dir).filter((f) => f.endsWith('.profile.json')).sort()) {
    const file = join(dir, name), stem = name.slice(0, -'.profile.json'.length), json = readResults(file);
    if (!Array.isArray(json['kernels'])) throw new BenchResultsError(`${file}: not a profile (no 'kernels' array)`);
    const roofs = json['roofs'];
    if (!isObject(roofs) || typeof roofs['copyGBps'] !== 'number' || typeof roofs['gemmTflops'] !== 'number') { skipped.push(`${stem}: no measured roofs in ${file}`); continue; }
    // "NVIDIA H200: llama-1.2B decode, batch 1, context 512, bf16" (the device without its details, the run's main fields).
    const run = isObject(json['run']) ? json['run'] : {};
    const fields = ['batch', 'context', 'chunk'].filter((k) => run[k] !== undefined).map((k) => `${k} ${String(run[k])}`);
    const title = `${String(json['device'] ?? 'unknown device').split(' (')[0]}: ${String(run['model'] ?? stem)} ${String(run['mode'] ?? '')}, ${[...fields, String(run['dtype'] ?? '')].filter(Boolean).join(', ')}`;
    let svg: string;
    try {
      svg = rooflineSvg(json['kernels'] as KernelRow[], roofs as unknown as Roofs, { title });
    } catch (error) {
      throw new BenchResultsError(`${file}: ${(error as Error).message}`);
    }
    const files = writeSvgAndPng(join(chartsDir, `roofline-${stem}`), svg);
    written.push(files.svg);
    if (files.png) written.push(files.png);
    else skipped.push(`roofline-${stem}: SVG only (${files.pngError})`);
  }
  return { written, skipped };
}
