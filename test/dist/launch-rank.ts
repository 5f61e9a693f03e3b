// A rank program for the launcher test: reads the launcher's variables, runs the rendezvous (rank 0
// serves 16 bytes derived from MASTER_PORT), and writes what it saw to $LAUNCH_TEST_DIR/rank-<RANK>.json.
// LAUNCH_TEST_MODE=fail: rank 1 exits with status 3 at once, and the others block in the rendezvous.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { distributedEnv, rendezvous } from '../../src/dist/rendezvous.js';

// Without the launcher's variables (a test runner importing every file under test/) it does nothing.
const env = distributedEnv();
if (env && process.env['LAUNCH_TEST_DIR'] !== undefined) {
  if (process.env['LAUNCH_TEST_MODE'] === 'fail' && env.rank === 1) process.exit(3);
  const payload = await rendezvous(env, () => Uint8Array.from({ length: 16 }, (_, i) => (env.masterPort + i) % 256));
  writeFileSync(join(process.env['LAUNCH_TEST_DIR'], `rank-${env.rank}.json`), JSON.stringify({
    env, localWorldSize: process.env['LOCAL_WORLD_SIZE'], payload: Array.from(payload),
  }));
}
