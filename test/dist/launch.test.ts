// The launcher: ranks get their variables and the rendezvous payload of rank 0; one failing rank stops
// the others and sets the launcher's status; bad arguments are refused. The rendezvous on its own:
// refusals (wrong world size) and timeouts name the problem.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { launch, parseLaunchArgs } from '../../src/cli/launch.js';
import { distributedEnv, rendezvous } from '../../src/dist/rendezvous.js';

const rankProgram = fileURLToPath(new URL('./launch-rank.js', import.meta.url));

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

test('launch --gpus 3: every rank gets its variables and rank 0\'s rendezvous payload', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'ff-launch-'));
  try {
    const port = await freePort();
    const options = parseLaunchArgs(['--gpus', '3', '--master-port', String(port), '--', process.execPath, rankProgram]);
    const result = await launch({ ...options, env: { ...process.env, LAUNCH_TEST_DIR: dir }, stdio: 'ignore' });
    assert.equal(result.code, 0);
    assert.deepEqual(result.exits.map((e) => [e.rank, e.code]), [[0, 0], [1, 0], [2, 0]]);
    assert.deepEqual(readdirSync(dir).sort(), ['rank-0.json', 'rank-1.json', 'rank-2.json']);
    const expected = Array.from({ length: 16 }, (_, i) => (port + i) % 256);
    for (let r = 0; r < 3; r++) {
      const seen = JSON.parse(readFileSync(join(dir, `rank-${r}.json`), 'utf8')) as { env: Record<string, unknown>; localWorldSize: string; payload: number[] };
      assert.deepEqual(seen.env, { rank: r, worldSize: 3, localRank: r, masterAddr: '127.0.0.1', masterPort: port });
      assert.equal(seen.localWorldSize, '3');
      assert.deepEqual(seen.payload, expected, `payload on rank ${r}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('one rank exiting non-zero stops the others and becomes the launcher\'s status', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'ff-launch-'));
  try {
    const port = await freePort();
    const started = Date.now();
    const options = parseLaunchArgs(['--gpus', '3', '--master-port', String(port), '--grace-ms', '2000', '--', process.execPath, rankProgram]);
    const result = await launch({ ...options, env: { ...process.env, LAUNCH_TEST_DIR: dir, LAUNCH_TEST_MODE: 'fail' }, stdio: 'ignore' });
    assert.equal(result.code, 3);
    assert.equal(result.failedRank, 1);
    assert.ok(Date.now() - started < 30_000, 'the waiting ranks were stopped, not left to time out');
    for (const e of result.exits.filter((x) => x.rank !== 1)) assert.equal(e.signal, 'SIGTERM', `rank ${e.rank} was terminated`);
    assert.deepEqual(readdirSync(dir), [], 'no rank got past the rendezvous');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('multi-node ranks: global rank = node-rank × gpus + local rank', async () => {
  const o = parseLaunchArgs(['--gpus', '2', '--nodes', '3', '--node-rank', '2', '--master-addr', '10.0.0.1', '--', 'x']);
  const { rankEnv } = await import('../../src/cli/launch.js');
  const env = rankEnv(o, 1, {});
  assert.deepEqual(distributedEnv(env), { rank: 5, worldSize: 6, localRank: 1, masterAddr: '10.0.0.1', masterPort: 29500 });
});

test('bad launcher arguments and environments are refused by name', () => {
  assert.throws(() => parseLaunchArgs(['--', 'x']), /--gpus N is required/);
  assert.throws(() => parseLaunchArgs(['--gpus', '2']), /no command given/);
  assert.throws(() => parseLaunchArgs(['--gpus', '0', '--', 'x']), /--gpus must be an integer ≥ 1, got '0'/);
  assert.throws(() => parseLaunchArgs(['--gpus', '2', '--nodes', '2', '--node-rank', '2', '--', 'x']), /--node-rank 2 must be below --nodes 2/);
  assert.throws(() => parseLaunchArgs(['--gpus', '2', '--master-port', '70000', '--', 'x']), /not a TCP port/);
  assert.equal(distributedEnv({}), null);
  assert.throws(() => distributedEnv({ WORLD_SIZE: '2', RANK: '2' }), /RANK=2 must be below WORLD_SIZE=2/);
  assert.throws(() => distributedEnv({ WORLD_SIZE: 'two', RANK: '0' }), /WORLD_SIZE='two' must be a non-negative integer/);
});

test('the rendezvous refuses a mismatched world size and times out naming the missing ranks', async () => {
  const port = await freePort();
  const server = rendezvous({ rank: 0, worldSize: 3, masterAddr: '127.0.0.1', masterPort: port, timeoutMs: 3000 }, () => new Uint8Array([1]));
  const serverDone = assert.rejects(server, /only 1 of 3 ranks joined .* \(missing ranks 1, 2\)/);
  await assert.rejects(rendezvous({ rank: 1, worldSize: 2, masterAddr: '127.0.0.1', masterPort: port, timeoutMs: 3000 }, () => new Uint8Array()),
    /rendezvous refused rank 1: rank 1 expects world size 2, rank 0 has 3/);
  await serverDone;
  await assert.rejects(rendezvous({ rank: 2, worldSize: 3, masterAddr: '127.0.0.1', masterPort: port, timeoutMs: 500 }, () => new Uint8Array()),
    /rank 2 could not reach rank 0 at 127\.0\.0\.1:\d+ in time/);
});

test('teardown stops what a rank started too: a rank behind a shell wrapper leaves no process running', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'ff-launch-group-'));
  try {
    // Rank 0's shell starts a long sleep (a grandchild of the launcher) and waits; rank 1 fails at once.
    const script = `if [ "$RANK" = 1 ]; then sleep 0.3; exit 4; fi; sleep 30 & echo $! > "${dir}/sleep.pid"; wait`;
    const options = parseLaunchArgs(['--gpus', '2', '--master-port', String(await freePort()), '--grace-ms', '2000', '--', 'sh', '-c', script]);
    const started = Date.now();
    const result = await launch({ ...options, stdio: 'ignore' });
    assert.equal(result.code, 4);
    assert.ok(Date.now() - started < 10_000, 'the launcher did not wait for the sleep');
    const pid = Number(readFileSync(join(dir, 'sleep.pid'), 'utf8'));
    // Gone, or a zombie (state Z): dead, waiting for an init that may never reap it (as in some containers).
    const running = () => { try { return readFileSync(`/proc/${pid}/stat`, 'utf8').split(' ')[2] !== 'Z'; } catch { return false; } };
    let alive = true;
    for (let i = 0; i < 50 && alive; i++) {
      alive = running();
      if (alive) await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(alive, false, `the rank's own child (pid ${pid}) was stopped with it`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
