import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runProfile } from '../../src/cli/profile.js';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-profile-cli-'));
after(() => rmSync(dir, { recursive: true, force: true }));

async function run(args: string[]): Promise<{ code: number; log: string }> {
  const lines: string[] = [];
  const code = await runProfile(['--backend', 'cpu', '--repeats', '1', ...args], (l) => lines.push(l));
  return { code, log: lines.join('\n') };
}

test('fuseformer profile on the CPU: train, prefill and decode write profile.json and print the table', async () => {
  for (const mode of ['train', 'prefill', 'decode'] as const) {
    const out = join(dir, mode);
    const { code, log } = await run(['--model', 'gpt2-tiny', '--mode', mode, '--batch', '1', '--seq', '8', ...(mode === 'decode' ? [] : ['--steps', '2']), '--top', '4', '--out', out]);
    assert.equal(code, 0);
    assert.match(log, /\| kernel +\| calls \| total ms \| median µs \| step % \|/);
    assert.match(log, /\(\d+ more\)/, 'the table stops at --top rows');
    assert.match(log, /no roofline: CPU \(reference\) has no measured roofs/);
    const json = JSON.parse(readFileSync(join(out, 'profile.json'), 'utf8')) as { run: Record<string, unknown>; ops: { op: string }[]; kernels: unknown[]; backend: string };
    assert.equal(json.run['mode'], mode);
    assert.equal(json.backend, 'cpu');
    const ops = new Set(json.ops.map((o) => o.op));
    assert.equal(ops.has('adamW'), mode === 'train');
    assert.equal(ops.has('appendDecodeAttention'), mode === 'decode');
    assert.equal(ops.has('crossEntropyForward'), mode !== 'decode');
    assert.ok(!existsSync(join(out, 'roofline.svg')));
  }
});

test('fuseformer profile on the CPU: serving steps, decode rows alone and with a prompt beside them', async () => {
  for (const mode of ['serve-decode', 'serve-mixed'] as const) {
    const out = join(dir, mode);
    const { code, log } = await run(['--model', 'llama-tiny', '--mode', mode, '--batch', '3', '--seq', '12', ...(mode === 'serve-mixed' ? ['--chunk', '9'] : []), '--out', out]);
    assert.equal(code, 0);
    assert.match(log, mode === 'serve-mixed' ? /3 requests × 12 cached positions \+ a 9-token prompt/ : /3 requests × 12 cached positions,/);
    const json = JSON.parse(readFileSync(join(out, 'profile.json'), 'utf8')) as { run: Record<string, unknown>; ops: { op: string; describe?: string }[] };
    assert.deepEqual([json.run['mode'], json.run['batch'], json.run['context']], [mode, 3, 12]);
    const ops = json.ops.map((o) => o.op);
    // Every layer appends the decode rows' keys and reads the paged cache for them; only the mixed step runs the prompt's flash attention.
    assert.ok(ops.filter((o) => o === 'appendDecodeAttention').length >= 2);
    assert.equal(ops.includes('flashAttentionForward'), mode === 'serve-mixed');
  }
  // A sampled step: every request drawn with the flags given (HF's top-k 50 when sampling, unless set).
  const sampled = join(dir, 'serve-sampled');
  const s = await run(['--model', 'llama-tiny', '--mode', 'serve-decode', '--batch', '2', '--seq', '8', '--temperature', '0.7', '--top-p', '0.9', '--out', sampled]);
  assert.equal(s.code, 0);
  assert.match(s.log, /serving step, 2 requests × 8 cached positions, T 0\.7, top-k 50, top-p 0\.9,/);
  assert.equal((JSON.parse(readFileSync(join(sampled, 'profile.json'), 'utf8')) as { run: Record<string, unknown> }).run['sampling'], 'T 0.7, top-k 50, top-p 0.9');
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'serve-decode', '--top-p', '1.5']), /--top-p must be a number in \(0, 1\], got '1\.5'/);
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'decode', '--temperature', '1']), /--temperature is not an option of --mode decode/);
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'serve-decode', '--chunk', '4']), /--chunk is not an option of --mode serve-decode/);
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'decode', '--chunk', '4']), /--chunk is not an option of --mode decode/);
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'decode', '--steps', '0']), /--steps is not an option of --mode decode/);
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'serve-mixed', '--op-timing', 'bogus']), /--op-timing is not an option of --mode serve-mixed/);
  // Quantized projections: the INT4 path's ops in the profile.
  const q = join(dir, 'decode-int4');
  assert.equal((await run(['--model', 'llama-tiny', '--mode', 'decode', '--batch', '1', '--seq', '8', '--quantize', 'rtn4', '--out', q])).code, 0);
  const qOps = (JSON.parse(readFileSync(join(q, 'profile.json'), 'utf8')) as { ops: { op: string }[] }).ops.map((o) => o.op);
  // The norms go with the INT4 products that read them (normLinear: QKV, gate/up); O and down run int4Linear;
  // only the final norm is a residualNorm of its own.
  const layers = qOps.filter((o) => o === 'appendDecodeAttention').length;
  assert.ok(layers >= 2 && qOps.includes('int4Linear'), 'the quantized layers run int4Linear');
  assert.equal(qOps.filter((o) => o === 'normLinear').length, 2 * layers, 'two normLinear a layer');
  assert.equal(qOps.filter((o) => o === 'residualNorm').length, 1, 'the final norm');
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'decode', '--quantize', 'int4']), /--quantize must be rtn4 or rtn8, got 'int4'/);
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'decode', '--quantize-lm-head']), /--quantize-lm-head needs --quantize rtn4\|rtn8/);
  await assert.rejects(run(['--mode', 'train', '--quantize', 'rtn4']), /--quantize is for --mode decode, serve-decode and serve-mixed, not train/);
  await assert.rejects(run(['--model', 'bert-tiny', '--mode', 'serve-mixed']), /--mode serve-mixed runs the serving engine's GPT-2 and Llama models; this one is bert/);
});

test('fuseformer profile: bad options are named', async () => {
  await assert.rejects(run(['--mode', 'serve']), /--mode must be one of train, prefill, decode, serve-decode, serve-mixed, got 'serve'/);
  await assert.rejects(run(['--dtype', 'f64']), /--dtype must be f32, bf16 or f16, got 'f64'/);
  await assert.rejects(run(['--steps', '1']), /--steps must be at least 2/);
  await assert.rejects(run(['--seq', '300']), /--seq 300 exceeds the model's 256 positions/);
  await assert.rejects(run(['--model', 'llama-tiny', '--mode', 'train']), /runs GPT-2 and BERT models; this one is llama \(--mode decode runs GPT-2 and Llama\)/);
  await assert.rejects(run(['--model', 'bert-tiny', '--mode', 'decode']), /--mode decode runs the inference engine's GPT-2 and Llama models; this one is bert/);
  await assert.rejects(run(['--model', 'no-such-model']), /neither a preset .* nor a directory with config\.json/);
  await assert.rejects(run(['--batch', '0']), /--batch must be a positive integer, got '0'/);
});
