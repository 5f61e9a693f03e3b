// runtime/flag-sync.ts: which launches of a captured chain wait on the step counter, for what count, and
// which fall back to griddepcontrol.wait; the launcher appending the two arguments.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import koffi from 'koffi';
import { FLAG_SYNC_SENTINEL, FlagChain, flagSyncRequested } from '../../../../src/backend/cuda/runtime/flag-sync.js';
import { arg } from '../../../../src/backend/cuda/runtime/kernel.js';
import { KernelLauncher, type LaunchApi } from '../../../../src/backend/cuda/runtime/launch.js';

const COUNTER = 0xc0000n, MAIN = 0x5n, SIDE = 0x6n;

test('FUSEFORMER_FLAG_SYNC: off unless 1; a bad value names the variable', () => {
  assert.equal(flagSyncRequested({}), false);
  assert.equal(flagSyncRequested({ FUSEFORMER_FLAG_SYNC: '1' }), true);
  assert.throws(() => flagSyncRequested({ FUSEFORMER_FLAG_SYNC: 'yes' }), /FUSEFORMER_FLAG_SYNC must be 0 or 1, got 'yes'/);
});

test('a chain: the first flag launch waits in full, each next one for the blocks launched before it; other work resets the wait, never the count', () => {
  const chain = new FlagChain(COUNTER);
  assert.deepEqual(chain.flagLaunch(MAIN, 96), { counter: 0n, expected: FLAG_SYNC_SENTINEL }, 'outside a capture: neither waits nor counts');
  chain.begin(MAIN);
  assert.deepEqual(chain.flagLaunch(MAIN, 96), { counter: COUNTER, expected: FLAG_SYNC_SENTINEL }, 'the first: its predecessor did not count');
  assert.deepEqual(chain.flagLaunch(MAIN, 144), { counter: COUNTER, expected: 96 });
  assert.deepEqual(chain.flagLaunch(MAIN, 288), { counter: COUNTER, expected: 240 });
  chain.otherWork(); // e.g. the attention kernel, or cuBLASLt
  assert.deepEqual(chain.flagLaunch(MAIN, 96), { counter: COUNTER, expected: FLAG_SYNC_SENTINEL }, 'after other work: griddepcontrol.wait, still counted');
  assert.deepEqual(chain.flagLaunch(MAIN, 96), { counter: COUNTER, expected: 624 }, 'the count includes the blocks of the launch that waited in full');
  assert.deepEqual(chain.flagLaunch(SIDE, 32), { counter: 0n, expected: FLAG_SYNC_SENTINEL }, 'another stream: not part of the chain');
  assert.deepEqual(chain.flagLaunch(MAIN, 96), { counter: COUNTER, expected: FLAG_SYNC_SENTINEL }, 'after another stream\'s work: in full');
  chain.end();
  assert.deepEqual(chain.flagLaunch(MAIN, 96), { counter: 0n, expected: FLAG_SYNC_SENTINEL });
  assert.deepEqual(chain.launches, { released: 3, full: 3 }, 'launches in a capture: by counter or in full');
  chain.begin(MAIN);
  assert.deepEqual([chain.flagLaunch(MAIN, 10), chain.flagLaunch(MAIN, 10)].map((a) => a.expected), [FLAG_SYNC_SENTINEL, 10], 'a new capture starts from zero');
});

/** A launcher on a fake driver that records each launch's last `tail` argument slots (8 bytes each). */
function recordingLauncher(tail: number) {
  const seen: bigint[][] = [];
  const api: LaunchApi = {
    nameOf: () => 'unknown status',
    launchKernel: (_fn: bigint, _gx: number, _gy: number, _gz: number, _bx: number, _by: number, _bz: number, _shared: number, _stream: bigint, params: bigint) => {
      // params: an array of pointers, one per argument slot; read how many the test passed.
      const pointers = new BigUint64Array(koffi.view(params, 8 * tail));
      seen.push(Array.from(pointers, (p) => new BigUint64Array(koffi.view(p, 8))[0]!));
      return 0;
    },
    funcSetAttribute: () => undefined,
  } as LaunchApi;
  return { launcher: new KernelLauncher(api, 227 * 1024), seen };
}

test('the launcher appends the counter and the count (blocks) to a flag kernel\'s arguments; other kernels break the chain', () => {
  const { launcher, seen } = recordingLauncher(3);
  const chain = new FlagChain(COUNTER);
  launcher.flagChain = chain;
  chain.begin(MAIN);
  const gemv = { name: 'gemv', function: 1n, gridDependencyWait: true, flagSync: true };
  const attention = { name: 'attention', function: 2n, gridDependencyWait: true };
  launcher.launch(gemv, { grid: 96, block: 256 }, [arg.i32(7)], MAIN);
  launcher.launch(gemv, { grid: [4, 3], block: 100 }, [arg.i32(8)], MAIN);
  launcher.launch(gemv, { grid: 1, block: 32 }, [arg.i32(9)], MAIN);
  launcher.launch(attention, { grid: 12, block: 128 }, [arg.i32(1), arg.i32(2), arg.i32(3)], MAIN);
  launcher.launch(gemv, { grid: 1, block: 32 }, [arg.i32(10)], MAIN);
  const sentinel = BigInt(FLAG_SYNC_SENTINEL);
  assert.deepEqual(seen, [
    [7n, COUNTER, sentinel],
    [8n, COUNTER, 96n], // the 96 blocks before it
    [9n, COUNTER, 96n + 12n], // + [4, 3] blocks
    [1n, 2n, 3n], // the attention kernel: its own arguments only
    [10n, COUNTER, sentinel], // after it: griddepcontrol.wait
  ]);
});
