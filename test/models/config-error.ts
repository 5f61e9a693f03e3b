import assert from 'node:assert/strict';
import { ConfigError } from '../../src/models/config-fields.js';

/** Asserts that `run` throws a ConfigError whose message names `source` and `field`, and returns the message. */
export function assertConfigError(run: () => unknown, source: string, field: string, expected?: RegExp): string {
  let message = '';
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    message = error.message;
    return true;
  });
  assert.ok(message.startsWith(`${source}: `), `the message should start with the file: ${message}`);
  assert.ok(message.includes(`"${field}"`), `the message should name the field "${field}": ${message}`);
  if (expected) assert.match(message, expected);
  return message;
}
