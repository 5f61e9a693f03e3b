// `fuseformer info`: what this machine offers fuseformer — GPUs, driver, the CUDA libraries found
// (with the file each came from, or why it could not be loaded) and where compiled kernels are cached.

import { probeCuda } from '../cuda/probe.js';
import { defaultKernelCacheDir } from '../backend/cuda/runtime/jit.js';

export function runInfo(out: (line: string) => void = (line) => process.stdout.write(`${line}\n`)): void {
  const probe = probeCuda();
  out(`fuseformer on Node ${process.version} (${process.platform}-${process.arch})`);
  out(`driver:     ${probe.driverVersion ? `CUDA ${probe.driverVersion}` : 'not found'}`);
  if (probe.devices?.length) {
    probe.devices.forEach((d, i) => out(`gpu ${i}:      ${d.name}, compute capability ${d.computeCapability}, ${d.multiProcessors} SMs, ${(d.memoryBytes / 2 ** 30).toFixed(1)} GiB`));
  } else {
    out('gpus:       none found');
  }
  out('libraries:');
  for (const lib of probe.libraries) {
    if (lib.path) { out(`  ${lib.name.padEnd(9)} ${lib.path}`); continue; }
    // The full error lists every place searched; the first line and the install hint are enough here.
    const lines = (lib.error ?? 'not found').split('\n');
    const hint = lines.find((l) => l.startsWith('Install'));
    out(`  ${lib.name.padEnd(9)} not found (${lines[0]!.replace(/\. Places tried:$|: Places tried:$| Places tried:$/, '')})`);
    if (hint) out(`  ${''.padEnd(9)} ${hint}`);
  }
  out(`kernel cache: ${defaultKernelCacheDir()}`);
  out(probe.available ? 'backend:    cuda' : `backend:    cpu (${probe.reason?.split('\n')[0]})`);
}
