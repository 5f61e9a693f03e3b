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

// The stand-in records its arguments (one line a run) and prints a report shaped like ncu's; with -o it
// writes the report file instead, --import prints it back, and the source page comes as ncu's CSV.
const fake = join(dir, 'ncu');
writeFileSync(fake, `#!/usr/bin/env bash
echo "$*" >> "${join(dir, 'calls.txt')}"
report() {
  echo "  gemv_bf16_m1_k2048_r1_kw1_gated (264, 1, 1)x(256, 1, 1), Context 1, Stream 13, Device 0, CC 9.0"
  echo "    Section: GPU Speed Of Light Throughput"
  echo "    DRAM Throughput                 %        81.25"
  echo "    Duration                       us        19.71"
}
if [[ " $* " == *" --page source "* ]]; then
  echo "==PROF== a note above the table"
  echo '"Kernel Name","gemv_bf16_m1_k2048_r1_kw1_gated",'
  echo '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","stall_long_sb","stall_barrier","stall_long_sb (Not Issued)"'
  echo '"0x7f0000000010","LDG.E.128.CONSTANT R4, desc[UR4][R2.64]","10","2","0","0","0"'
  echo '"0x7f0000000020","HMMA.16816.F32.BF16 R8, R12, R16, R8","60","50","40","20","40"'
  echo '"0x7f0000000030","ACQBULK","1,030","1,000","30","1,000","30"'
  exit 0
fi
if [[ " $* " == *" --import "* ]]; then report; exit 0; fi
for ((i = 1; i <= $#; i++)); do if [ "\${!i}" = -o ]; then j=$((i + 1)); echo rep > "\${!j}.ncu-rep"; echo "==PROF== Report: \${!j}.ncu-rep"; exit 0; fi; done
echo "==PROF== Connected to process 1"
report
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

test('bench/ncu.sh NCU_SOURCE=1: the report saved, read back as the details page and as the SASS source page (CSV), the instructions with the most stall samples ranked; the report removed', () => {
  const prefix = join(dir, 'src');
  rmSync(join(dir, 'calls.txt'), { force: true });
  const r = spawnSync('bash', ['bench/ncu.sh', prefix, 'gated=gemv_.*gated', '--', 'node', 'x.js'], { encoding: 'utf8', env: { ...process.env, PATH: `${dir}:${process.env['PATH']}`, NCU_SOURCE: '1' } });
  assert.equal(r.status, 0, r.stderr);
  const calls = readFileSync(join(dir, 'calls.txt'), 'utf8').trim().split('\n');
  assert.equal(calls.length, 3);
  assert.match(calls[0]!, /--section SourceCounters -f -o .*src-gated node x\.js$/);
  assert.match(calls[1]!, /^--import .*src-gated\.ncu-rep$/);
  assert.match(calls[2]!, /^--import .*src-gated\.ncu-rep --page source --print-source sass --csv$/);
  assert.match(r.stdout, /^gated: gemv_bf16_m1_k2048_r1_kw1_gated .*\| Duration us 19\.71 \| DRAM Throughput % 81\.25$/m);
  const stalls = readFileSync(`${prefix}-gated-stalls.txt`, 'utf8').split('\n');
  assert.match(stalls[0]!, /3 instructions, 1100 samples \(Warp Stall Sampling \(All Samples\)\); not issued: Warp Stall Sampling \(Not-issued Samples\)/);
  assert.match(stalls[1]!, /^\s*00030\s+93\.6%\s+90\.9%\s+ACQBULK\s+barrier 1000 long_sb 30$/, 'the most sampled first (the table below ncu\'s "Kernel Name" line), thousands separators read, its two leading reasons');
  assert.match(stalls[2]!, /00020\s+5\.5%\s+4\.5%\s+HMMA.*long_sb 40 barrier 20$/);
  assert.match(stalls.at(-3)!, /^top 3: 100\.0% of the samples$/);
  assert.match(stalls.at(-2)!, /^by reason: barrier 92\.7%, long_sb 6\.4%$/, 'the "(Not Issued)" columns left out of the reasons');
  assert.throws(() => readFileSync(`${prefix}-gated.ncu-rep`), /ENOENT/, 'the report removed (NCU_KEEP_REP unset)');
});
