import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ConfigError, ConfigFields, hfActivationName, readConfigFile } from '../../src/models/config-fields.js';
import { FuseformerError } from '../../src/errors.js';
import { assertConfigError } from './config-error.js';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-config-fields-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const SOURCE = 'model/config.json';
const fieldsOf = (json: Record<string, unknown>) => new ConfigFields(json, SOURCE);

test('positive integers: required, defaulted when missing or null, and checked', () => {
  const fields = fieldsOf({ n: 768, zero: 0, half: 1.5, text: '768', none: null });
  assert.equal(fields.positiveInteger('n'), 768);
  assert.equal(fields.positiveInteger('none', 7), 7);
  assert.equal(fields.positiveInteger('absent', 7), 7);
  assert.equal(assertConfigError(() => fields.positiveInteger('absent'), SOURCE, 'absent'),
    'model/config.json: field "absent" is missing; expected a positive integer');
  assertConfigError(() => fields.positiveInteger('none'), SOURCE, 'none', /is null; expected a positive integer/);
  assertConfigError(() => fields.positiveInteger('text'), SOURCE, 'text', /is "768"; expected a positive integer/);
  assertConfigError(() => fields.positiveInteger('zero', 1), SOURCE, 'zero', /is 0;/);
  assertConfigError(() => fields.positiveInteger('half'), SOURCE, 'half', /is 1.5;/);
});

test('numbers in a range, booleans, strings from a set, token ids', () => {
  const fields = fieldsOf({ eps: 1e-5, p: 0.1, p1: 1, factor: 0.5, flag: true, flagText: 'true', kind: 'llama3', id: 0, ids: [1, 2], badIds: [1, -2] });
  assert.equal(fields.number('eps', 'positive'), 1e-5);
  assert.equal(fields.number('absent', 'probability', 0.1), 0.1);
  assert.equal(fields.number('p', 'probability'), 0.1);
  assertConfigError(() => fields.number('p1', 'probability'), SOURCE, 'p1', /expected a probability in \[0, 1\)/);
  assertConfigError(() => fields.number('factor', 'atLeastOne'), SOURCE, 'factor', /is 0.5; expected a number >= 1/);
  assert.equal(fields.boolean('flag'), true);
  assert.equal(fields.boolean('absent', false), false);
  assertConfigError(() => fields.boolean('flagText'), SOURCE, 'flagText', /is "true"; expected true or false/);
  assert.equal(fields.oneOf('kind', ['linear', 'llama3']), 'llama3');
  assertConfigError(() => fields.oneOf('kind', ['linear', 'yarn']), SOURCE, 'kind', /expected one of "linear", "yarn"/);
  assert.equal(fields.tokenId('id'), 0);
  assert.deepEqual(fields.tokenIds('id', [9]), [0]);
  assert.deepEqual(fields.tokenIds('ids', [9]), [1, 2]);
  assert.deepEqual(fields.tokenIds('absent', [9]), [9]);
  assertConfigError(() => fields.tokenIds('badIds', [9]), SOURCE, 'badIds', /a token id or a non-empty list of token ids/);
});

test('activations: HF names map to what they compute, and back', () => {
  const fields = fieldsOf({ a: 'gelu_new', b: 'gelu', c: 'swish', d: 'gelu_pytorch_tanh', e: 'tanh' });
  assert.equal(fields.activation('a', 'relu'), 'gelu_tanh');
  assert.equal(fields.activation('b', 'relu'), 'gelu');
  assert.equal(fields.activation('c', 'relu'), 'silu');
  assert.equal(fields.activation('d', 'relu'), 'gelu_tanh');
  assert.equal(fields.activation('absent', 'relu'), 'relu');
  assertConfigError(() => fields.activation('e', 'relu'), SOURCE, 'e', /is "tanh"; expected one of "gelu", "gelu_new"/);
  assert.equal(hfActivationName('gelu_tanh'), 'gelu_new');
  assert.equal(hfActivationName('silu'), 'silu');
});

test('nested objects name their fields with a prefix; only own properties are fields', () => {
  const fields = fieldsOf({ rope_scaling: { factor: 'big' }, list: [1] });
  const nested = fields.object('rope_scaling');
  assert.ok(nested);
  assertConfigError(() => nested.number('factor', 'atLeastOne'), SOURCE, 'rope_scaling.factor', /is "big"/);
  assert.equal(fields.object('absent'), undefined);
  assertConfigError(() => fields.object('list'), SOURCE, 'list', /is \[1\]; expected a JSON object or null/);
  assert.equal(fields.has('constructor'), false);
  assert.equal(fields.positiveInteger('toString', 3), 3);
});

test('requireIfPresent and modelType refuse other values but accept absence', () => {
  const fields = fieldsOf({ model_type: 'bert', scale: false });
  fields.modelType('bert');
  assertConfigError(() => fields.modelType('gpt2'), SOURCE, 'model_type', /is "bert"; expected "gpt2" \(this is a gpt2 configuration\)/);
  assertConfigError(() => fields.requireIfPresent('scale', true, 'why not'), SOURCE, 'scale', /expected true \(why not\)/);
  fields.requireIfPresent('absent', true, 'unused');
});

test('readConfigFile: parsed object, or an error naming the file', () => {
  const good = join(dir, 'good.json');
  writeFileSync(good, '{"n_embd": 768}');
  assert.deepEqual(readConfigFile(good), { n_embd: 768 });
  const missing = join(dir, 'missing.json');
  assert.throws(() => readConfigFile(missing), { name: 'ConfigError', message: `${missing}: file not found` });
  const broken = join(dir, 'broken.json');
  writeFileSync(broken, '{"n_embd": 768,');
  assert.throws(() => readConfigFile(broken), (error: unknown) =>
    error instanceof ConfigError && error instanceof FuseformerError && error.message.startsWith(`${broken}: not valid JSON (`));
  const list = join(dir, 'list.json');
  writeFileSync(list, '[1, 2]');
  assert.throws(() => readConfigFile(list), { message: `${list}: the top level is [1,2]; expected a JSON object` });
  assert.throws(() => readConfigFile(dir), { message: `${dir}: is a directory; expected a config.json file` });
});
