// Imported by every GPU suite for this one effect: each finished test is reported at once, not when its parent
// ends. A suite's subtests are synchronous GPU work awaited one after another, so the run never reaches the
// event loop's macrotask turn where node:test's reporter writes (a microtask resolves each `await t.test`);
// under `node --test` a file of one top-level test then printed nothing until it ended, and a device call cut
// by its time bound brought back no result at all (session 58: decode-gemv.test.js, infer-ops.test.js).
// A root-level afterEach also runs after every nested subtest.

import { afterEach } from 'node:test';
import { setImmediate as macrotaskTurn } from 'node:timers/promises';

afterEach(() => macrotaskTurn());
