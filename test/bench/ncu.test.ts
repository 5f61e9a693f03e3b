// bench/ncu.sh against a stand-in ncu on PATH (the real one is on the device only): the options it passes,
// one run and one report file a target, the summary line, and bad command lines refused with a reason.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-ncu-'));
after(() => rmSync(dir, { recursive: true, force: true }));

// The stand-in records its arguments (one line a run) and prints a report shaped like ncu's.
const fake = join(dir, 'ncu');
writeFileSync(fake, `#!/usr/bin/env bash
echo "$*" >> "${join(dir, 'calls.txt')}"
echo "==PROF== Connected to process 1"
echo "  gemv_bf16_m1_k2048_r1_kw1_gated (264, 1, 1)x(256, 1, 1), Context 1, Stream 13, Device 0, CC 9.0"
echo "    Section: GPU Speed Of Light Throughput"
echo "    DRAM Throughput                 %        81.25"
echo "    Duration                       us        19.71"
`);
chmodSync(fake, 0o755);

const ncu = (...args: string[]) => spawnSync('bash', ['bench/ncu.sh', ...args], { encoding: 'utf8', env: { ...process.env, PATH: `${dir}:${process.env['PATH']}` } });

test('bench/ncu.sh: one ncu run a target, its regex and skip, clocks unlocked, the sections, the command after --; a summary line each', () => {
  const prefix = join(dir, 'out');
  const r = ncu(prefix, 'gated=gemv_.*gated', 'head=gemv_bf16_m1_k2048_r2_kw1_none$@16', '--', 'node', 'dist/bench/decode-drive.js', '--model', 'llama');
  assert.equal(r.status, 0, r.stderr);
  const calls = readFileSync(join(dir, 'calls.txt'), 'utf8').trim().split('\n');
  assert.equal(calls.length, 2);
  assert.match(calls[0]!, /^--clock-control none --cache-control all -k regex:gemv_\.\*gated -s 0 -c 1 .*--section SpeedOfLight .*--section WarpStateStats .*--section SourceCounters node dist\/bench\/decode-drive\.js --model llama$/);
  assert.match(calls[1]!, /-k regex:gemv_bf16_m1_k2048_r2_kw1_none\$ -s 16 -c 1 /);
  assert.match(readFileSync(`${prefix}-gated.txt`, 'utf8'), /DRAM Throughput/);
  const lines = r.stdout.trim().split('\n');
  assert.equal(lines.length, 2);
  assert.match(lines[0]!, /^gated: gemv_bf16_m1_k2048_r1_kw1_gated \(264, 1, 1\)x\(256, 1, 1\).* \| Duration us 19\.71 \| DRAM Throughput % 81\.25$/);
});

test('bench/ncu.sh: a command line without a command or a target, or a target not NAME=REGEX, is refused with the reason', () => {
  assert.match(ncu(join(dir, 'x'), 'a=b').stderr, /no command after --/);
  assert.match(ncu(join(dir, 'x'), '--', 'true').stderr, /no NAME=REGEX target before --/);
  const bad = ncu(join(dir, 'x'), 'justaregex', '--', 'true');
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /target 'justaregex' is not NAME=REGEX\[@SKIP\]/);
});
