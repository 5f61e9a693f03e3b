// Speculative decoding speed: measured acceptance rate α, tokens per target pass and speedup against plain
// decoding, next to the lecture's prediction E[tokens per target pass] = (1 − α^(K+1)) / (1 − α).
//
// Models: a target with random weights (GPT-2 124M, a Llama 3.2 1B-shaped model, or GPT-2 tiny for the CPU)
// and a draft made of the target's first --draft-layers layers with the target's embeddings, final norm and
// head (weights copied: a "layer-skip" draft, so α is that of a related model, not of two unrelated random
// ones); or --target DIR --draft DIR for real checkpoints (e.g. gpt2-large and gpt2). 32-token prompt, 128
// new tokens, batch 1; greedy (T = 0) and sampled (T = 1, top-k 50). For each fixed K (and adaptive K):
//   α             accepted / drafted draft tokens (adaptive off, so α and K belong together)
//   tokens/pass   emitted tokens / target passes; "formula" = (1 − α^(K+1)) / (1 − α) with the measured α
//   ms/token      whole generations on the host clock (prefill + decode + reading tokens), median of --reps;
//                 plain = the engine's graph-replayed decode steps; speedup = plain / speculative
//   predicted     formula · t_plain / (t_verify(K + 1 rows) + K · t_draft), pass times measured alone (median
//                 of 9 after warm-up; t_draft of a greedy draft = (K decode steps + one read) / K): the
//                 lecture's speedup with c_draft / c_target from this machine (host acceptance not counted)
//   HF            transformers generate() with assistant_model (assisted generation: HF's speculative decoding,
//                 same K, "constant" schedule, confidence threshold 0; adaptive = HF's "heuristic") and plain
//                 generate(), eager, bf16, by bench/torch_speculative.py (HF's own random init, so its α differs)
// Target passes and sampled draft steps are eager extend() calls ending with a download (acceptance runs on
// the host); greedy draft steps are graph replays with one read per round. The host clock is the honest
// measure for both sides; CUDA events would hide the host work.
//
// Usage: node dist/bench/speculative.js [--json bench/results/speculative.json] [--models gpt2,llama]
//          [--backend cuda] [--draft-layers 2] [--ks 1,2,4,8] [--reps 3] [--new-tokens 128] [--std 0.02]
//          [--target DIR --draft DIR] [--prompt random|corpus] [--no-torch]
// --prompt corpus (the default with a --target that has a tokenizer.json): 32 tokens of Moby-Dick's
// last 5%, the validation split `fuseformer train` holds out, so a pair trained there sees unseen text.
// CPU smoke test: node dist/bench/speculative.js --backend cpu --models tiny --reps 1 --new-tokens 24 --ks 1,3

import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { loadTokenizer } from '../src/io/tokenizer.js';
import { heldOutPrompt } from '../src/train/corpus.js';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/backend/index.js';
import type { BackendChoice } from '../src/backend/index.js';
import { ArgumentError } from '../src/errors.js';
import { DecodeEngine } from '../src/infer/engine.js';
import { loadDecoderModel, randomDecoderModel } from '../src/infer/model.js';
import type { DecoderModel } from '../src/infer/model.js';
import { resolveSampling } from '../src/infer/sampling.js';
import type { ResolvedSampling } from '../src/infer/sampling.js';
import { emptySpeculativeStats, SpeculativeSession } from '../src/infer/speculative.js';
import { expectedTokensPerPass } from '../src/infer/speculative-accept.js';
import { spawnSync } from 'node:child_process';
import { presetConfig, toHfJson } from '../src/models/registry.js';
import type { ModelConfig } from '../src/models/registry.js';

const { values: cli } = parseArgs({
  options: {
    json: { type: 'string', default: 'bench/results/speculative.json' },
    models: { type: 'string', default: 'gpt2,llama' },
    backend: { type: 'string', default: 'cuda' },
    'draft-layers': { type: 'string', default: '2' },
    ks: { type: 'string', default: '1,2,4,8' },
    reps: { type: 'string', default: '3' },
    'new-tokens': { type: 'string', default: '128' },
    std: { type: 'string', default: '0.02' },
    target: { type: 'string' },
    draft: { type: 'string' },
    prompt: { type: 'string' },
    'no-torch': { type: 'boolean', default: false },
  },
});
const positiveInt = (name: string, s: string) => {
  const x = Number(s);
  if (!Number.isSafeInteger(x) || x < 1) throw new ArgumentError(`--${name} must be a positive integer, got '${s}'`);
  return x;
};
const REPS = positiveInt('reps', cli.reps!), NEW = positiveInt('new-tokens', cli['new-tokens']!), PROMPT = 32;
const DRAFT_LAYERS = positiveInt('draft-layers', cli['draft-layers']!);
const KS = cli.ks!.split(',').map((k) => positiveInt('ks', k));
const STD = Number(cli.std);
if (!(STD > 0)) throw new ArgumentError(`--std must be a positive number, got '${cli.std}'`);
if ((cli.target === undefined) !== (cli.draft === undefined)) throw new ArgumentError('--target DIR and --draft DIR go together');
// The prompt: random token ids (random models), or held-out text (a trained pair's own tokenizer.json).
const PROMPT_KIND = cli.prompt ?? (cli.target !== undefined && existsSync(join(cli.target, 'tokenizer.json')) ? 'corpus' : 'random');
if (PROMPT_KIND !== 'random' && PROMPT_KIND !== 'corpus') throw new ArgumentError(`--prompt must be random or corpus, got '${PROMPT_KIND}'`);
if (PROMPT_KIND === 'corpus' && (cli.target === undefined || !existsSync(join(cli.target, 'tokenizer.json')))) {
  throw new ArgumentError(`--prompt corpus needs --target DIR with a tokenizer.json${cli.target !== undefined ? ` (none in ${cli.target})` : ''}`);
}

const { backend } = await selectBackend(cli.backend as BackendChoice);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const dtype = backend.name === 'cuda' ? 'bf16' as const : 'f32' as const;

interface Pair { name: string; target: DecoderModel; draft: DecoderModel; torchSpec: Record<string, unknown> }

/** The target's first `layers` layers with its embeddings, final norm and head, as a model of its own. */
function layerSkipDraft(target: DecoderModel, config: ModelConfig, layers: number): DecoderModel {
  const c = structuredClone(config) as ModelConfig & { config: { layers: number } };
  if (layers >= c.config.layers) throw new ArgumentError(`--draft-layers ${layers}: the target has only ${c.config.layers} layers`);
  c.config.layers = layers;
  const draft = randomDecoderModel(c, backend, { dtype, seed: 2n });
  for (const w of draft.weightShapes()) backend.copy(target.fileView(w.name), draft.fileView(w.name));
  return draft;
}

function pairs(): Pair[] {
  if (cli.target !== undefined) {
    const target = loadDecoderModel(cli.target, backend, { dtype }).model, draft = loadDecoderModel(cli.draft!, backend, { dtype }).model;
    return [{ name: `${cli.target} ← ${cli.draft}`, target, draft, torchSpec: { target_dir: cli.target, draft_dir: cli.draft } }];
  }
  const presets: Record<string, [string, string]> = { gpt2: ['GPT-2 124M', 'gpt2-124M'], llama: ['Llama 1.2B', 'llama-1.2B'], tiny: ['GPT-2 tiny', 'gpt2-tiny'] };
  return cli.models!.split(',').map((key) => {
    const preset = presets[key];
    if (!preset) throw new ArgumentError(`--models: unknown model '${key}'; expected gpt2, llama or tiny`);
    const config = presetConfig(preset[1]);
    const target = randomDecoderModel(config, backend, { dtype, seed: 1n, std: STD });
    const torchSpec = { model: config.family, config: { ...toHfJson(config), architectures: undefined }, draft_layers: DRAFT_LAYERS };
    return { name: `${preset[0]} ← first ${DRAFT_LAYERS} layers`, target, draft: layerSkipDraft(target, config, DRAFT_LAYERS), torchSpec };
  });
}

interface TorchTiming { ms_per_token?: number; tokens_per_pass?: number; error?: string }
type TorchResults = { plain: Record<string, TorchTiming>; assisted: Record<string, Record<string, TorchTiming>> };

function runTorch(p: Pair): TorchResults | { error: string } {
  const spec = { ...p.torchSpec, prompt: PROMPT, ...(PROMPT_KIND === 'corpus' ? { prompt_ids: prompt(p.target.vocabSize) } : {}), new_tokens: NEW, reps: REPS, ks: KS };
  const run = spawnSync('python3', ['bench/torch_speculative.py'], { input: JSON.stringify(spec), encoding: 'utf8', maxBuffer: 16 << 20, timeout: 1_500_000 });
  if (run.status !== 0) return { error: (run.stderr || String(run.error)).trim().split('\n').slice(-3).join(' | ') };
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as TorchResults;
}

function prompt(vocab: number): number[] {
  if (PROMPT_KIND === 'corpus') {
    const ids = heldOutPrompt((text) => loadTokenizer(join(cli.target!, 'tokenizer.json')).encode(text), PROMPT);
    const bad = ids.find((id) => id >= vocab);
    if (bad !== undefined) throw new ArgumentError(`--prompt corpus: ${cli.target}/tokenizer.json gives token ${bad}, outside the model's vocabulary of ${vocab}`);
    return ids;
  }
  let s = 12345;
  return Array.from({ length: PROMPT }, () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s % vocab; });
}

/** Plain decoding: ms per new token of whole generations (graphs on CUDA), median of REPS after a warm-up. */
function plainMsPerToken(target: DecoderModel, ids: number[], sampling: ResolvedSampling): number {
  const engine = new DecodeEngine(target, { maxBatch: 1, maxLen: PROMPT + NEW });
  const once = () => {
    const t0 = performance.now();
    engine.start([{ prompt: ids, maxNewTokens: NEW, sampling }], []);
    let produced = 0;
    for (;;) {
      produced += engine.collect()[0]!.tokens.length;
      if (engine.done) break;
      engine.decode(Math.min(16, NEW - produced));
    }
    return (performance.now() - t0) / produced;
  };
  once();
  const times = Array.from({ length: REPS }, once);
  engine.dispose();
  return median(times);
}

interface SpecResult { k: number | 'adaptive'; alpha: number; tokensPerPass: number; formula: number; msPerToken: number; speedup: number; predictedSpeedup?: number; verifyMs?: number; draftMs?: number }

function speculative(p: Pair, ids: number[], sampling: ResolvedSampling, k: number | 'adaptive', plainMs: number): SpecResult {
  const maxLen = PROMPT + NEW, options = { maxBatch: 1, maxLen, maxPrefillTokens: maxLen };
  const engines = { target: new DecodeEngine(p.target, options), draft: new DecodeEngine(p.draft, options) };
  const settings = k === 'adaptive' ? { draftTokens: 4 } : { draftTokens: k, adaptive: false };
  let stats = emptySpeculativeStats();
  const once = () => {
    stats = emptySpeculativeStats();
    const t0 = performance.now();
    const session = new SpeculativeSession(p.target, p.draft, ids, NEW, sampling, [], { ...settings, engines, stats });
    while (!session.done) session.round();
    return (performance.now() - t0) / stats.emitted;
  };
  once();
  const msPerToken = median(Array.from({ length: REPS }, once));
  const alpha = stats.drafted > 0 ? stats.accepted / stats.drafted : 0;
  const result: SpecResult = { k, alpha, tokensPerPass: stats.emitted / stats.targetPasses, formula: 0, msPerToken, speedup: plainMs / msPerToken };
  if (k !== 'adaptive') {
    result.formula = expectedTokensPerPass(alpha, k);
    // Pass times alone, mid-sequence (the cache past the prompt holds stale keys: the cost is the same).
    const at = PROMPT + Math.floor(NEW / 2) - k - 1, rows = ids.slice(0, k + 1);
    const time = (f: () => void) => { f(); f(); return median(Array.from({ length: 9 }, () => { const t0 = performance.now(); f(); return performance.now() - t0; })); };
    // Greedy verification reads only the picks (extendGreedy: a replayed graph on CUDA); sampled, the K + 1 rows
    // of logits — or, scored on the device (the default without a penalty; FUSEFORMER_SPEC_DEVICE_ACCEPT=0 turns it off), K probabilities.
    const scored = sampling.temperature > 0 && sampling.repetitionPenalty === 1 && process.env['FUSEFORMER_SPEC_DEVICE_ACCEPT'] !== '0';
    result.verifyMs = time(() => (sampling.temperature === 0 && sampling.repetitionPenalty === 1 ? engines.target.extendGreedy(0, at, rows)
      : scored ? engines.target.extendScored(0, at, rows, k + 1, rows.slice(0, k), sampling).probabilities() : engines.target.extend(0, at, rows)));
    if (scored) {
      // The draft's K steps on its decode path (device draws), its scoring pass over the K positions, one read: per step.
      const d = engines.draft;
      d.start([{ prompt: ids, maxNewTokens: NEW, sampling }], []);
      d.collect();
      result.draftMs = time(() => { d.rewind(0, ids); d.decode(k); d.collect(); d.extendScored(0, at, rows.slice(0, k), k, rows.slice(0, k), sampling).probabilities(); }) / k;
    } else if (sampling.temperature > 0) {
      result.draftMs = time(() => engines.draft.extend(0, at, rows.slice(0, 1)));
    } else {
      // Greedy drafts are K decode steps (graph replays) and one read: time that, per step.
      const d = engines.draft;
      d.start([{ prompt: ids, maxNewTokens: NEW, sampling }], []);
      d.collect();
      result.draftMs = time(() => { d.rewind(0, ids); d.decode(k); d.collect(); }) / k;
    }
    result.predictedSpeedup = result.formula * plainMs / (result.verifyMs + k * result.draftMs);
  }
  engines.target.dispose();
  engines.draft.dispose();
  return result;
}

console.log(`${backend.description}; prompt ${PROMPT} (${PROMPT_KIND === 'corpus' ? 'held-out text' : 'random'} tokens), ${NEW} new tokens, batch 1, ${dtype}`);
const results: Record<string, unknown> = { date: new Date().toISOString().slice(0, 10), device: backend.description, prompt: PROMPT, promptKind: PROMPT_KIND, newTokens: NEW, dtype, runs: [] as unknown[] };
const table = [
  '| target ← draft | T | K | α | tokens/pass | formula | ms/token | plain ms/token | speedup | predicted | HF tokens/pass | HF ms/token (plain) | HF speedup |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
];
for (const p of pairs()) {
  const ids = prompt(p.target.vocabSize);
  const torch = cli['no-torch'] || backend.name !== 'cuda' ? undefined : runTorch(p);
  if (torch && 'error' in torch) console.log(`${p.name} PyTorch: ${torch.error}`);
  const hf = (label: string, k: number | 'adaptive'): string => {
    if (!torch || 'error' in torch) return '— | — | —';
    const a = torch.assisted[label]?.[String(k)], plain = torch.plain[label];
    if (!a || a.ms_per_token === undefined || !plain || plain.ms_per_token === undefined) return 'error | — | —';
    return `${a.tokens_per_pass!.toFixed(2)} | ${a.ms_per_token.toFixed(3)} (${plain.ms_per_token.toFixed(3)}) | ${(plain.ms_per_token / a.ms_per_token).toFixed(2)}x`;
  };
  for (const [label, sampling] of [['0', resolveSampling({ temperature: 0 })], ['1', resolveSampling({ temperature: 1, seed: 7 })]] as const) {
    const plainMs = plainMsPerToken(p.target, ids, sampling);
    for (const k of [...KS, 'adaptive' as const]) {
      const r = speculative(p, ids, sampling, k, plainMs);
      (results.runs as unknown[]).push({ pair: p.name, temperature: Number(label), plainMsPerToken: plainMs, ...r, torch: torch && !('error' in torch) ? { plain: torch.plain[label], assisted: torch.assisted[label]?.[String(k)] } : torch });
      table.push(`| ${p.name} | ${label} | ${k} | ${r.alpha.toFixed(3)} | ${r.tokensPerPass.toFixed(2)} | ${k === 'adaptive' ? '—' : r.formula.toFixed(2)} | ${r.msPerToken.toFixed(3)} | ${plainMs.toFixed(3)} | ${r.speedup.toFixed(2)}x | ${r.predictedSpeedup !== undefined ? `${r.predictedSpeedup.toFixed(2)}x` : '—'} | ${hf(label, k)} |`);
    }
  }
  p.target.free();
  p.draft.free();
}
mkdirSync(dirname(cli.json!), { recursive: true });
writeFileSync(cli.json!, JSON.stringify(results, null, 1));
console.log(`\n${table.join('\n')}`);
