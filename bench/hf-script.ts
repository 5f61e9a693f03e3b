// A Hugging Face side script of a benchmark (bench/hf_*.py: `build DIR …` makes the workload, `run DIR …` times
// HF on it): run to its end with its output shown, its stderr's tail in the error when it fails.

import { spawnSync } from 'node:child_process';

/** `script`'s runner under `python` (20 minutes at most a call). */
export function hfScript(python: string, script: string): (args: readonly string[]) => void {
  return (args) => {
    const run = spawnSync(python, [script, ...args], { encoding: 'utf8', stdio: ['ignore', 'inherit', 'pipe'], timeout: 1_200_000, killSignal: 'SIGKILL' });
    if (run.status !== 0) throw new Error(`${script} ${args[0]} failed (status ${run.status}): ${(run.stderr || String(run.error)).slice(-2000)}`);
  };
}
