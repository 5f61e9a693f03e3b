import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseSuites, runBench } from '../../src/cli/bench.js';
import { barChartSvg } from '../../src/profile/bar-chart.js';
import { attentionCharts, declaredCharts, decodeCharts, kernelCharts, quantCharts, trainCharts, writeBenchCharts, writeRooflineCharts } from '../../src/profile/bench-charts.js';
import type { KernelRow } from '../../src/profile/profiler.js';
import { writeProfileOutputs } from '../../src/profile/output.js';
import { summarize } from '../../src/profile/profiler.js';
import { rooflineSvg } from '../../src/profile/roofline-plot.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const committed = join(root, 'bench', 'results');
const dir = mkdtempSync(join(tmpdir(), 'fuseformer-charts-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const readJson = (name: string) => JSON.parse(readFileSync(join(committed, name), 'utf8')) as Record<string, unknown>;

function pngSize(path: string): [number, number] {
  const png = readFileSync(path);
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], `${path} is a PNG`);
  return [png.readUInt32BE(16), png.readUInt32BE(20)];
}

test('bar chart: a bar per series and group with its value, escaped labels, missing values, a reference line', () => {
  const svg = barChartSvg({
    title: 'Decode <speed>', unit: 'ms/token', better: 'lower', series: [{ name: 'fuseformer' }, { name: 'PyTorch & HF' }],
    groups: [{ label: 'GPT-2, batch 1', values: { fuseformer: 2.5, 'PyTorch & HF': 9.75 } }, { label: 'GPT-2, batch 64', values: { fuseformer: 4.125 } }],
    reference: { value: 5, label: 'target' },
  });
  assert.match(svg, />Decode &lt;speed&gt;</);
  assert.match(svg, />ms\/token — lower is better</);
  assert.match(svg, />PyTorch &amp; HF</);
  assert.equal((svg.match(/<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="15" fill/g) ?? []).length, 3, 'three bars: the missing value has none');
  assert.match(svg, />2\.50</);
  assert.match(svg, />9\.75</);
  assert.match(svg, />4\.13</);
  assert.match(svg, />—</);
  assert.match(svg, /stroke-dasharray="5 4"/);
  assert.match(svg, />target</);
  assert.throws(() => barChartSvg({ title: 'x', unit: 'u', series: [{ name: 'a' }], groups: [{ label: 'g', values: { a: -1 } }] }), /negative/);
  assert.throws(() => barChartSvg({ title: 'x', unit: 'u', series: [], groups: [] }), /no series/);
});

test('train.json → tokens/s per model: every fuseformer variant beside PyTorch eager and torch.compile', () => {
  const json = readJson('train.json');
  const [chart] = trainCharts(json);
  assert.equal(chart!.name, 'train');
  assert.equal(chart!.spec.unit, 'tokens/s');
  const models = json['models'] as Record<string, { batch: number; seqLen: number; fuseformer: Record<string, { tokensPerS: number }>; torch: Record<string, { tokens_per_s: number }> }>;
  assert.deepEqual(chart!.spec.groups.map((g) => g.label), Object.entries(models).map(([m, e]) => `${m}, ${e.batch}×${e.seqLen}`));
  const gpt2 = models['GPT-2 124M']!;
  const group = chart!.spec.groups[0]!;
  assert.equal(group.values['fuseformer bf16'], gpt2.fuseformer['bf16']!.tokensPerS);
  assert.equal(group.values['torch.compile'], gpt2.torch['compile']!.tokens_per_s);
  assert.equal(group.values['PyTorch eager'], gpt2.torch['eager']!.tokens_per_s);
  assert.throws(() => trainCharts({ models: { x: { fuseformer: { bf16: { tokensPerS: 'fast' } } } } }, 'bad.json'), /bad\.json: field 'models\.x\.fuseformer\.bf16\.tokensPerS' should be a number/);
});

test('kernels.json → % of copy bandwidth per op and dtype, PyTorch from its time and the same bytes', () => {
  const json = readJson('kernels.json');
  const charts = kernelCharts(json);
  const kernels = json['kernels'] as { dtype: string; percentOfCopy: number; bytes: number; torchUs: number | null; op: string; model: string }[];
  assert.deepEqual(charts.map((c) => c.name).sort(), [...new Set(kernels.map((k) => `kernels-${k.dtype}`))].sort());
  const bf16 = charts.find((c) => c.name === 'kernels-bf16')!;
  const first = kernels.find((k) => k.dtype === 'bf16')!;
  assert.equal(bf16.spec.groups.length, kernels.filter((k) => k.dtype === 'bf16').length);
  assert.equal(bf16.spec.groups[0]!.label, `${first.model} ${first.op}`);
  assert.equal(bf16.spec.groups[0]!.values['fuseformer'], first.percentOfCopy);
  const torch = (100 * (first.bytes / (first.torchUs! * 1e-6) / 1e9)) / (json['copyGBps'] as number);
  assert.ok(Math.abs(bf16.spec.groups[0]!.values['PyTorch eager']! - torch) < 1e-9);
  assert.deepEqual(bf16.spec.reference, { value: 100, label: 'copy bandwidth' });
});

const attentionRow = {
  id: 'd64 L4096 causal', B: 4, H: 32, L: 4096, d: 64, causal: true, fwdFlops: 2 * 4 * 32 * 4096 * 4096 * 64,
  oursFwdMs: 2, oursFwdBwdMs: 8, torchFlashFwdMs: 1.6, torchFlashFwdBwdMs: null, torchCudnnFwdMs: 1.5, torchCudnnFwdBwdMs: 6,
};

test('attention.json → TFLOP/s forward and forward + backward (3.5× the forward FLOPs), ours beside SDPA', () => {
  const [forward, training] = attentionCharts({ results: [attentionRow] });
  assert.equal(forward!.name, 'attention-forward');
  assert.equal(forward!.spec.groups[0]!.label, 'd64 L4096 causal (4×32)');
  const tflops = (flops: number, ms: number) => flops / (ms * 1e-3) / 1e12;
  assert.deepEqual(forward!.spec.groups[0]!.values, {
    fuseformer: tflops(attentionRow.fwdFlops, 2), 'PyTorch SDPA (FlashAttention-2)': tflops(attentionRow.fwdFlops, 1.6), 'PyTorch SDPA (cuDNN)': tflops(attentionRow.fwdFlops, 1.5),
  });
  assert.equal(training!.spec.groups[0]!.values['fuseformer'], tflops(3.5 * attentionRow.fwdFlops, 8));
  assert.equal(training!.spec.groups[0]!.values['PyTorch SDPA (FlashAttention-2)'], undefined);
  assert.throws(() => attentionCharts({ results: [{ id: 'x' }] }, 'a.json'), /a\.json: field 'results\[0\]\.fwdFlops' should be a number/);
});

const decodeResults = {
  device: 'H200', date: '2026-11-30',
  models: {
    'GPT-2 124M': {
      ours: { 1: { msPerToken: 0.15, tokensPerS: 6667, e2eMsPerToken: 0.2, floorMs: 0.08 }, 32: { msPerToken: 0.4, e2eMsPerToken: 0.45, floorMs: 0.1 } },
      torch: { eager: { 1: { ms_per_token: 9.5 }, 32: { ms_per_token: 11 } }, static: { 1: { ms_per_token: 2.5 } }, 'static-compile': { 1: { error: 'oom' } } },
    },
    'Llama 1.2B': { ours: { 1: { msPerToken: 0.8 } }, torch: { error: 'no torch' } },
  },
};

test('decode.json → ms per token, a chart per batch size: the engine, end to end, HF, the floor', () => {
  const charts = decodeCharts(decodeResults);
  assert.deepEqual(charts.map((c) => c.name), ['decode-batch1', 'decode-batch32']);
  const [b1, b32] = charts;
  assert.equal(b1!.spec.better, 'lower');
  assert.deepEqual(b1!.spec.groups.map((g) => g.label), ['GPT-2 124M', 'Llama 1.2B']);
  assert.deepEqual(b1!.spec.groups[0]!.values, {
    fuseformer: 0.15, 'fuseformer end to end': 0.2, 'HF eager': 9.5, 'HF static cache': 2.5, 'HF static cache + torch.compile': undefined, 'floor (bytes ÷ copy bandwidth)': 0.08,
  });
  assert.equal(b1!.spec.groups[1]!.values['HF eager'], undefined);
  assert.deepEqual(b32!.spec.groups.map((g) => [g.label, g.values['fuseformer'], g.values['HF eager']]), [['GPT-2 124M', 0.4, 11]]);
  assert.throws(() => decodeCharts({ models: { m: { ours: { 1: { msPerToken: 'slow' } } } } }, 'd.json'), /d\.json: field 'models\.m\.ours\.1\.msPerToken' should be a number/);
});

const quantResults = {
  device: 'H200', rows: [
    { id: 'qkv M=1', variant: 'bf16 cuBLASLt', us: 10, torchUs: 12 },
    { id: 'qkv M=1', variant: 'W4A16 g128', us: 4, torchUs: null },
    { id: 'qkv M=32', variant: 'bf16 cuBLASLt', us: 11, torchUs: null },
    { id: 'qkv M=32', variant: 'W4A16 g128 (GEMV)', us: 9 },
  ],
};

test('quant.json → µs per layer: each variant beside PyTorch bf16, a group per layer and M', () => {
  const [chart] = quantCharts(quantResults);
  assert.equal(chart!.name, 'quant');
  assert.deepEqual(chart!.spec.series.map((s) => s.name), ['bf16 cuBLASLt', 'W4A16 g128', 'W4A16 g128 (GEMV)', 'PyTorch F.linear bf16']);
  assert.deepEqual(chart!.spec.groups, [
    { label: 'qkv M=1', values: { 'bf16 cuBLASLt': 10, 'PyTorch F.linear bf16': 12, 'W4A16 g128': 4 } },
    { label: 'qkv M=32', values: { 'bf16 cuBLASLt': 11, 'W4A16 g128 (GEMV)': 9 } },
  ]);
  assert.throws(() => quantCharts({ rows: [{ id: 'x', variant: 'v' }] }, 'q.json'), /q\.json: field 'rows\[0\]\.us' should be a number/);
});

test('charts a results file declares are checked and drawn as declared', () => {
  const declared = {
    charts: [{ name: 'decode', title: 'Decode', unit: 'ms/token', better: 'lower', series: ['fuseformer', { name: 'HF', color: '#888888' }], groups: [{ label: 'b1', values: { fuseformer: 2, HF: null } }] }],
  };
  const [chart] = declaredCharts(declared, 'decode.json');
  assert.equal(chart!.name, 'decode');
  assert.deepEqual(chart!.spec.series, [{ name: 'fuseformer' }, { name: 'HF', color: '#888888' }]);
  assert.deepEqual(chart!.spec.groups[0]!.values, { fuseformer: 2, HF: undefined });
  assert.equal(chart!.spec.better, 'lower');
  assert.throws(() => declaredCharts({ charts: [{ ...declared.charts[0], name: '../x' }] }, 'd.json'), /d\.json: charts\[0\]\.name '\.\.\/x'/);
  assert.throws(() => declaredCharts({ charts: [{ ...declared.charts[0], better: 'faster' }] }, 'd.json'), /better should be 'higher' or 'lower'/);
  assert.throws(() => declaredCharts({ charts: [{ ...declared.charts[0], groups: [{ label: 'g', values: { a: 'x' } }] }] }, 'd.json'), /values\.a should be a number or null/);
  assert.deepEqual(declaredCharts({}, 'none.json'), []);
});

test('fuseformer bench --charts-only: SVG + PNG for the committed train and kernel results; absent suites said', () => {
  const results = join(dir, 'results');
  const report0 = writeBenchCharts(join(dir, 'nowhere'), ['train', 'serve'], join(dir, 'nowhere-charts'));
  assert.equal(report0.written.length, 0);
  assert.match(report0.skipped.join('\n'), /serve: no results yet .*serve-speed\.json; run npm run bench:serve-speed/);
  // The committed results, copied, and a decode file that declares a chart.
  mkdirSync(results, { recursive: true });
  copyFileSync(join(committed, 'train.json'), join(results, 'train.json'));
  copyFileSync(join(committed, 'kernels.json'), join(results, 'kernels.json'));
  writeFileSync(join(results, 'quant.json'), JSON.stringify({ ...quantResults, charts: [{ name: 'int4-extra', title: 'INT4', unit: 'ms/token', better: 'lower', series: ['fuseformer'], groups: [{ label: 'GPT-2', values: { fuseformer: 1.5 } }] }] }));
  writeFileSync(join(results, 'decode.json'), JSON.stringify(decodeResults));
  copyFileSync(join(committed, 'serve-speed.json'), join(results, 'serve-speed.json'));
  writeFileSync(join(results, 'attention.json'), JSON.stringify({ device: 'H200', results: [attentionRow] }));
  const lines: string[] = [];
  assert.equal(runBench(['--charts-only', '--results', results, '--suite', 'train,kernels,decode,attention,serve,quant'], (l) => lines.push(l)), 0);
  const charts = join(results, 'charts');
  for (const name of ['train', 'kernels-bf16', 'kernels-f16', 'quant', 'int4-extra', 'decode-batch1', 'decode-batch32', 'attention-forward', 'attention-training', 'serve']) {
    assert.ok(existsSync(join(charts, `${name}.svg`)), name);
    const [w, h] = pngSize(join(charts, `${name}.png`));
    assert.equal(w, 1000);
    assert.ok(h > 120, `${name}: ${h} px high`);
  }
  const log = lines.join('\n');
  assert.match(readFileSync(join(charts, 'serve.svg'), 'utf8'), />256 clients</);
  assert.match(log, /charts written: .*train\.png/);
  assert.throws(() => parseSuites('train,speed'), /unknown suite 'speed'; expected some of kernels, train, attention, decode, serve, quant/);
  assert.deepEqual(parseSuites('train, kernels,train'), ['train', 'kernels']);
  writeFileSync(join(results, 'train.json'), '{ not json');
  assert.throws(() => runBench(['--charts-only', '--results', results, '--suite', 'train'], () => {}), /train\.json: not valid JSON/);
});

test('fuseformer bench --charts-only draws the rooflines of the profiles kept in bench/results/profile (H200 steps); profiles without roofs are said, broken ones refused', () => {
  const results = join(dir, 'roofline-results'), profiles = join(results, 'profile');
  mkdirSync(profiles, { recursive: true });
  assert.match(writeRooflineCharts(join(dir, 'no-results'), join(dir, 'no-charts')).skipped.join('\n'), /rooflines: no .*profile/);
  copyFileSync(join(committed, 'profile', 'llama-1.2B-decode-b1.profile.json'), join(profiles, 'llama-1.2B-decode-b1.profile.json'));
  writeFileSync(join(profiles, 'cpu-run.profile.json'), JSON.stringify({ device: 'CPU (reference)', run: { model: 'gpt2-tiny', mode: 'decode' }, kernels: [] }));
  writeFileSync(join(profiles, 'notes.json'), '{ "ignored": "not a .profile.json" }');
  const lines: string[] = [];
  assert.equal(runBench(['--charts-only', '--results', results, '--suite', 'train'], (l) => lines.push(l)), 0);
  const svg = readFileSync(join(results, 'charts', 'roofline-llama-1.2B-decode-b1.svg'), 'utf8');
  assert.match(svg, />NVIDIA H200: llama-1\.2B decode, batch 1, context 512, bf16</);
  assert.match(svg, />decodeAttention B1 H32\/8 d64 cache 576 split 5</);
  const [w, h] = pngSize(join(results, 'charts', 'roofline-llama-1.2B-decode-b1.png'));
  assert.deepEqual([w, h], [1100, 700]);
  assert.match(lines.join('\n'), /cpu-run: no measured roofs/);
  assert.ok(!existsSync(join(results, 'charts', 'roofline-notes.svg')));
  writeFileSync(join(profiles, 'broken.profile.json'), '{ "kernels": 3 }');
  assert.throws(() => writeRooflineCharts(results, join(results, 'charts')), /broken\.profile\.json: not a profile/);
});

test('roofline: roofs, a circle per costed kernel sized by share, labels, the no-FLOP strip; SVG and PNG on disk', () => {
  const roofs = { copyGBps: 4000, gemmTflops: 800, gemmDtype: 'bf16' as const, gemmShape: [8192, 8192, 8192] as const, ridge: 200 };
  const ops = [
    { op: 'gemm', name: 'gemm 16384×2304×768 bias', ms: 0.08, gemm: true, flops: 5.8e10, bytes: 1.04e8 },
    { op: 'layerNormForward', name: 'layerNormForward [16384, 768] <x>', ms: 0.016, gemm: false, flops: 8.8e7, bytes: 5.0e7 },
    { op: 'permute0213', name: 'permute0213 [16, 12, 1024, 64]', ms: 0.016, gemm: false, flops: 0, bytes: 5.0e7 },
    { op: 'brandNew', name: 'brandNew', ms: 0.01, gemm: false },
  ];
  const p = summarize({ name: 'cuda', description: 'H200' }, ops, { stepMs: 0.2, stepSamplesMs: [0.2], hostBoundOps: 0, roofs });
  const svg = rooflineSvg(p.kernels, roofs, { title: 'GPT-2 & co' });
  assert.match(svg, />GPT-2 &amp; co</);
  assert.equal((svg.match(/<circle cx/g) ?? []).length, 3 + 2, 'three costed kernels plus two legend markers');
  assert.match(svg, />layerNormForward \[16384, 768\] &lt;x&gt;</);
  assert.match(svg, />permute0213 \[16, 12, 1024, 64\]</);
  assert.doesNotMatch(svg, />brandNew</, 'no cost, no point');
  assert.match(svg, />no FLOPs</);
  assert.match(svg, />copy 4,000 GB\/s</);
  assert.match(svg, />bf16 GEMM 800 TFLOP\/s</);
  assert.match(svg, />ridge 200 FLOP\/B</);
  // Circle radius grows with the share of the step: the GEMM (40%) is larger than the LayerNorm (8%).
  const radius = (name: string) => Number(/ r="([\d.]+)"/.exec(svg.split('\n').find((line) => line.includes(`<title>${name}:`))!)![1]);
  assert.ok(radius('gemm 16384×2304×768 bias') > radius('layerNormForward [16384, 768] &lt;x&gt;'));
  const files = writeProfileOutputs(join(dir, 'profile'), p, { model: 'test' }, 'test');
  assert.deepEqual(pngSize(files.png!), [1100, 700]);
  const json = JSON.parse(readFileSync(files.json, 'utf8')) as Record<string, unknown>;
  assert.equal(json['stepMs'], 0.2);
  assert.deepEqual(json['run'], { model: 'test' });
  assert.equal((json['kernels'] as KernelRow[]).length, 4);
  assert.equal((json['ops'] as unknown[]).length, 4);
  const cpu = summarize({ name: 'cpu', description: 'CPU (reference)' }, ops, { stepMs: 1, stepSamplesMs: [1], hostBoundOps: 0 });
  const cpuFiles = writeProfileOutputs(join(dir, 'cpu-profile'), cpu, {}, 'cpu');
  assert.equal(cpuFiles.svg, undefined);
  assert.match(cpuFiles.note!, /no roofline/);
});
