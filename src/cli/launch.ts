// `fuseformer launch`: one process per GPU. Starts --gpus copies of a command on this node with the
// process-group variables each rank reads (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT); rank 0 then hosts the TCP rendezvous (dist/rendezvous.ts) that hands the
// NCCL unique id to the other ranks. Multi-node: run the launcher once per node with the same --nodes,
// --master-addr and --master-port and that node's --node-rank; global rank = node-rank · gpus + local.
//
// Failure handling: if any rank exits non-zero (or is killed by a signal), the launcher sends SIGTERM
// to the ranks still running on this node, SIGKILL after a grace period, and exits with that rank's
// status. Ranks on other nodes then fail in NCCL (ncclRemoteError) or at the rendezvous, and their
// launchers tear down the same way. SIGINT/SIGTERM to the launcher are passed on to every rank.

import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { ArgumentError } from '../errors.js';

export const LAUNCH_USAGE = `usage: fuseformer launch --gpus N [options] -- <command> [args...]

Starts N processes of <command> (one per GPU) with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set; rank 0 hosts the rendezvous that shares the NCCL unique id.
If one rank fails, all are stopped and the launcher exits with its status.

options:
  --gpus N             processes on this node (one per GPU; LOCAL_RANK picks the device)
  --nodes M            nodes in the job (default 1)
  --node-rank K        this node's index, 0..M-1 (default 0)
  --master-addr HOST   address of the node running rank 0 (default 127.0.0.1)
  --master-port PORT   TCP port of the rendezvous (default 29500)
  --grace-ms MS        wait before SIGKILL after SIGTERM on teardown (default 5000)
`;

export interface LaunchOptions {
  readonly gpus: number;
  readonly nodes: number;
  readonly nodeRank: number;
  readonly masterAddr: string;
  readonly masterPort: number;
  readonly graceMs: number;
  readonly command: readonly string[];
  /** The environment the ranks inherit (default process.env). */
  readonly env?: NodeJS.ProcessEnv;
  /** 'inherit' (the CLI) or 'ignore' / 'pipe' (tests). */
  readonly stdio?: 'inherit' | 'ignore' | 'pipe';
}

export interface LaunchResult {
  /** The launcher's exit status: 0, or the status of the first rank that failed. */
  readonly code: number;
  /** The global rank that failed first, if any. */
  readonly failedRank?: number;
  /** How each local rank ended: its exit code, or the signal that stopped it. */
  readonly exits: readonly { rank: number; code: number | null; signal: NodeJS.Signals | null }[];
}

function positiveInt(name: string, text: string | undefined, fallback: number, min = 1): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < min) throw new ArgumentError(`launch: ${name} must be an integer ≥ ${min}, got '${text}'`);
  return value;
}

export function parseLaunchArgs(argv: readonly string[]): LaunchOptions {
  const dashes = argv.indexOf('--');
  const own = dashes < 0 ? argv : argv.slice(0, dashes);
  const command = dashes < 0 ? [] : argv.slice(dashes + 1);
  const { values } = parseArgs({
    args: [...own],
    options: {
      gpus: { type: 'string' }, nodes: { type: 'string' }, 'node-rank': { type: 'string' },
      'master-addr': { type: 'string' }, 'master-port': { type: 'string' }, 'grace-ms': { type: 'string' },
    },
  });
  if (values.gpus === undefined) throw new ArgumentError('launch: --gpus N is required');
  if (command.length === 0) throw new ArgumentError('launch: no command given: fuseformer launch --gpus N -- <command> [args...]');
  const nodes = positiveInt('--nodes', values.nodes, 1);
  const nodeRank = positiveInt('--node-rank', values['node-rank'], 0, 0);
  if (nodeRank >= nodes) throw new ArgumentError(`launch: --node-rank ${nodeRank} must be below --nodes ${nodes}`);
  const masterPort = positiveInt('--master-port', values['master-port'], 29500);
  if (masterPort > 65535) throw new ArgumentError(`launch: --master-port ${masterPort} is not a TCP port`);
  return {
    gpus: positiveInt('--gpus', values.gpus, 1), nodes, nodeRank, masterPort,
    masterAddr: values['master-addr'] ?? '127.0.0.1', graceMs: positiveInt('--grace-ms', values['grace-ms'], 5000, 0), command,
  };
}

/** The environment of local rank `local`. */
export function rankEnv(o: LaunchOptions, local: number, base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return {
    ...base,
    RANK: String(o.nodeRank * o.gpus + local), WORLD_SIZE: String(o.nodes * o.gpus),
    LOCAL_RANK: String(local), LOCAL_WORLD_SIZE: String(o.gpus),
    MASTER_ADDR: o.masterAddr, MASTER_PORT: String(o.masterPort),
  };
}

/** Runs the ranks of this node to completion (or to the first failure and the teardown). */
export function launch(o: LaunchOptions): Promise<LaunchResult> {
  const base = o.env ?? process.env;
  const children: ChildProcess[] = [];
  const exits: { rank: number; code: number | null; signal: NodeJS.Signals | null }[] = [];
  let failure: { rank: number; code: number } | undefined;
  let killTimer: NodeJS.Timeout | undefined;

  // Each rank runs in a process group of its own (detached), and teardown signals the whole group: a rank
  // started through a wrapper (sh -c, npx) would otherwise leave the real process running, holding its GPU.
  const signalGroup = (child: ChildProcess, signal: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try { process.kill(-child.pid, signal); } catch { /* the group has no process left */ }
  };
  const teardown = (signal: NodeJS.Signals) => {
    for (const child of children) signalGroup(child, signal);
    killTimer ??= setTimeout(() => {
      for (const child of children) signalGroup(child, 'SIGKILL');
    }, o.graceMs);
  };
  const forward = (signal: NodeJS.Signals) => () => teardown(signal);
  const onInt = forward('SIGINT'), onTerm = forward('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);

  return new Promise((resolve) => {
    let running = o.gpus;
    for (let local = 0; local < o.gpus; local++) {
      const rank = o.nodeRank * o.gpus + local;
      const child = spawn(o.command[0]!, o.command.slice(1), { env: rankEnv(o, local, base), stdio: o.stdio ?? 'inherit', detached: true });
      children.push(child);
      const finish = (code: number | null, signal: NodeJS.Signals | null) => {
        exits.push({ rank, code, signal });
        if ((code !== 0 || signal !== null) && failure === undefined) {
          failure = { rank, code: code ?? 128 + signalNumber(signal) };
          teardown('SIGTERM');
        }
        if (--running === 0) {
          if (killTimer) clearTimeout(killTimer);
          // Every rank has exited; after a failure, what they started and left behind goes too.
          if (failure) for (const c of children) signalGroup(c, 'SIGKILL');
          process.off('SIGINT', onInt);
          process.off('SIGTERM', onTerm);
          exits.sort((a, b) => a.rank - b.rank);
          resolve(failure ? { code: failure.code, failedRank: failure.rank, exits } : { code: 0, exits });
        }
      };
      let done = false;
      child.on('error', (err) => {
        if (done) return;
        done = true;
        process.stderr.write(`fuseformer launch: rank ${rank}: cannot start '${o.command[0]}': ${err.message}\n`);
        finish(127, null);
      });
      child.on('exit', (code, signal) => { if (!done) { done = true; finish(code, signal); } });
    }
  });
}

function signalNumber(signal: NodeJS.Signals | null): number {
  const numbers: Partial<Record<NodeJS.Signals, number>> = { SIGINT: 2, SIGKILL: 9, SIGSEGV: 11, SIGTERM: 15, SIGABRT: 6 };
  return (signal && numbers[signal]) ?? 1;
}

/** The CLI entry: returns the exit status. */
export async function runLaunch(argv: readonly string[]): Promise<number> {
  const helpAt = argv.findIndex((a) => a === '--help' || a === '-h'), commandAt = argv.indexOf('--');
  if (helpAt >= 0 && (commandAt < 0 || helpAt < commandAt)) {
    process.stdout.write(LAUNCH_USAGE);
    return 0;
  }
  const options = parseLaunchArgs(argv);
  const result = await launch(options);
  if (result.failedRank !== undefined) process.stderr.write(`fuseformer launch: rank ${result.failedRank} failed with status ${result.code}; stopped the other ranks\n`);
  return result.code;
}
