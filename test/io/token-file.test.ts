import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { readTokenFile, writeTokenFile } from '../../src/io/token-file.js';

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-tokens-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** llm.c's header, built by hand: 256 int32, [magic, version, count, 0...]. */
function llmcHeader(magic: number, version: number, count: number): Buffer {
  const header = Buffer.alloc(1024);
  header.writeInt32LE(magic, 0); header.writeInt32LE(version, 4); header.writeInt32LE(count, 8);
  return header;
}

test('writes llm.c format: uint16 when ids fit, uint32 otherwise; reads back', () => {
  const small = join(dir, 'small.bin');
  writeTokenFile(small, [50256, 1, 2, 65535]);
  const bytes = readFileSync(small);
  assert.equal(bytes.length, 1024 + 8);
  assert.deepEqual(bytes.subarray(0, 1024), llmcHeader(20240520, 1, 4));
  assert.equal(bytes.readUInt16LE(1024), 50256);
  const read = readTokenFile(small);
  assert.ok(read instanceof Uint16Array);
  assert.deepEqual([...read], [50256, 1, 2, 65535]);

  const big = join(dir, 'big.bin');
  writeTokenFile(big, [128000, 5]);
  assert.deepEqual(readFileSync(big).subarray(0, 12), llmcHeader(20240801, 7, 2).subarray(0, 12));
  const bigRead = readTokenFile(big);
  assert.ok(bigRead instanceof Uint32Array);
  assert.deepEqual([...bigRead], [128000, 5]);
  assert.deepEqual(readdirSync(dir).filter((n) => n.includes('.tmp-')), [], 'no temporary files left');
});

test('reads a file made by llm.c byte for byte', () => {
  const path = join(dir, 'llmc.bin');
  const body = Buffer.alloc(6);
  body.writeUInt16LE(15496, 0); body.writeUInt16LE(11, 2); body.writeUInt16LE(50256, 4);
  writeFileSync(path, Buffer.concat([llmcHeader(20240520, 1, 3), body]));
  assert.deepEqual([...readTokenFile(path)], [15496, 11, 50256]);
});

test('raw formats: header-less u16 and i32', () => {
  const u16 = join(dir, 'raw16.bin');
  writeFileSync(u16, Buffer.from(new Uint16Array([1, 2, 3]).buffer));
  assert.deepEqual([...readTokenFile(u16, 'raw-u16')], [1, 2, 3]);
  const i32 = join(dir, 'raw32.bin');
  writeFileSync(i32, Buffer.from(new Int32Array([7, 100000]).buffer));
  assert.deepEqual([...readTokenFile(i32, 'raw-i32')], [7, 100000]);
  writeFileSync(i32, Buffer.from(new Int32Array([7, -1]).buffer));
  assert.throws(() => readTokenFile(i32, 'raw-i32'), /token 1 is -1; token ids must be >= 0/);
  writeFileSync(u16, Buffer.alloc(3));
  assert.throws(() => readTokenFile(u16, 'raw-u16'), /3 bytes is not a whole number of 2-byte tokens/);
});

test('bad files are errors naming the file and the problem', () => {
  const path = join(dir, 'bad.bin');
  writeFileSync(path, Buffer.concat([llmcHeader(20240520, 1, 10), Buffer.alloc(8)]));
  assert.throws(() => readTokenFile(path), (e: Error) => e.message.includes(path) && /header says 10 tokens .* 1032 bytes \(truncated\?\)/.test(e.message));
  writeFileSync(path, Buffer.alloc(2000));
  assert.throws(() => readTokenFile(path), /magic 0 \/ version 0 is not llm.c's token format.*raw-u16/);
  writeFileSync(path, Buffer.alloc(10));
  assert.throws(() => readTokenFile(path), /too short for llm.c's 1024-byte header/);
  assert.throws(() => readTokenFile(join(dir, 'missing.bin')), /cannot read token file \(ENOENT\)/);
  assert.throws(() => writeTokenFile(path, [1, -2]), /token 1 is -2/);
});
