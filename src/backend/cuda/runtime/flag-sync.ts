// Flag release between dependent kernels of a captured step (opt-in, FUSEFORMER_FLAG_SYNC=1; not yet run
// on a GPU). A programmatically launched kernel's griddepcontrol.wait returns only once the grid before it
// has completed and flushed; batch-1 decode is a chain of ~60 such boundaries a GPT-2 step at ~3 µs each
// (bench/chain-latency.ts times one). Under flag release a kernel instead waits until one step-wide counter
// reaches the number of blocks of the flag kernels launched before it in the step, and each of its blocks
// adds 1 (release) once its last warp is done (device-lib.ts: every warp at every exit, after its last
// write, counts in shared memory first). The counter is zeroed by a memset at the start of each captured
// graph.
//
// Why one counter is enough: a block counts only after its kernel's wait has passed, and launch i's wait
// needs the count of every block of launches 0..i−1 — so no block of launch i or later can count before
// those have all counted, and the counter reaching S(i−1) means exactly they have. (Hence a warp may never
// count before its wait; device-lib.ts FLAG_SYNC_DONE at an early exit comes after FLAG_SYNC_WAIT.)
// A kernel follows another that does not count (cuBLASLt, a kernel not ported, a memset or copy between
// them needs nothing: those are full dependencies) with griddepcontrol.wait instead: the launcher passes
// FLAG_SYNC_SENTINEL. Outside a capture, on another stream, or after work the launcher cannot see, kernels
// get the sentinel and a null counter (they neither wait on it nor count), so only one chain ever counts.
// A flag kernel lets the next launch start only after its own wait (GRID_DEPENDENCY_TRIGGER after it), so
// every block it waits on is already resident: the spin cannot starve the kernel it waits for.
// One counter a runtime: two captured graphs that count must never replay at the same time (on two
// streams); the decode and serving engines replay theirs one after another on the compute stream.

import { envFlag } from '../env-switch.js';

/** The expected count that tells a flag kernel to use griddepcontrol.wait instead (device-lib.ts). */
export const FLAG_SYNC_SENTINEL = 0xffffffff;

/** The NVRTC option that compiles a kernel's flag-release form (FLAG_SYNC_* macros in device-lib.ts). */
export const FLAG_SYNC_DEFINE = '-DFUSEFORMER_FLAG_SYNC';

/** FUSEFORMER_FLAG_SYNC=1: flag release between the ported kernels of captured steps (read once). */
export function flagSyncRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  return envFlag('FUSEFORMER_FLAG_SYNC', env['FUSEFORMER_FLAG_SYNC'], false);
}

/** What a flag kernel's launch appends to its arguments: the counter (0n: none) and the count to wait for. */
export interface FlagSyncArgs {
  readonly counter: bigint;
  readonly expected: number;
}

/**
 * The host side of one captured chain: which launches count, and the count each waits for. `counter` is
 * the device word (4 bytes, zeroed by the caller's memset at capture start).
 */
export class FlagChain {
  private active = false;
  private stream = 0n;
  private blocks = 0;
  private previousCounts = false;
  /** Flag launches captured so far that wait on the counter (released), and that wait in full at a chain's start or after other work. */
  readonly launches = { released: 0, full: 0 };

  constructor(readonly counter: bigint) {}

  /** A capture on `stream` begins (after the counter's memset): the chain starts empty. */
  begin(stream: bigint): void {
    this.active = true;
    this.stream = stream;
    this.blocks = 0;
    this.previousCounts = false;
  }

  /** The capture ended: later launches neither wait on the counter nor count. */
  end(): void {
    this.active = false;
    this.previousCounts = false;
  }

  /** Whether launches on `stream` are part of the chain now. */
  counts(stream: bigint): boolean {
    return this.active && stream === this.stream;
  }

  /** A flag kernel of `blocks` blocks launched on `stream`: the arguments it gets; the chain advances. */
  flagLaunch(stream: bigint, blocks: number): FlagSyncArgs {
    if (!this.counts(stream)) {
      if (this.active) this.previousCounts = false; // another stream's work: the next launch here waits in full
      return { counter: 0n, expected: FLAG_SYNC_SENTINEL };
    }
    const expected = this.previousCounts ? this.blocks : FLAG_SYNC_SENTINEL;
    if (this.previousCounts) this.launches.released++;
    else this.launches.full++;
    this.blocks += blocks;
    if (this.blocks >= FLAG_SYNC_SENTINEL) throw new RangeError(`flag release: a captured step of more than ${FLAG_SYNC_SENTINEL - 1} counted blocks`);
    this.previousCounts = true;
    return { counter: this.counter, expected };
  }

  /** A kernel that does not count, or stream work the launcher does not see (cuBLASLt, NCCL): the next flag kernel waits in full. */
  otherWork(): void {
    this.previousCounts = false;
  }
}
