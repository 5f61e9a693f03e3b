// Prints the functions with the most self time in a V8 .cpuprofile (node --cpu-prof): a quick look at
// where a host-bound run spends its time, on a machine without devtools.
//   node bench/cpuprofile-top.mjs <file.cpuprofile> [count=25]
import { readFileSync } from 'node:fs';

const [file, countArg] = process.argv.slice(2);
if (!file) { console.error('usage: node bench/cpuprofile-top.mjs <file.cpuprofile> [count]'); process.exit(2); }
const profile = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const selfUs = new Map();
const dt = profile.timeDeltas;
for (let i = 0; i < profile.samples.length; i++) {
  const node = byId.get(profile.samples[i]);
  const f = node.callFrame, name = `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}`;
  selfUs.set(name, (selfUs.get(name) ?? 0) + (dt[i] ?? 0));
}
const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
console.log(`total ${(total / 1000).toFixed(0)} ms sampled`);
for (const [name, us] of [...selfUs].sort((a, b) => b[1] - a[1]).slice(0, Number(countArg ?? 25))) {
  console.log(`${(us / 1000).toFixed(0).padStart(8)} ms ${(100 * us / total).toFixed(1).padStart(5)}%  ${name}`);
}
