// PyTorch weight files against what torch itself reads back from them (test/fixtures/torch/, written by
// torch.save through make.py): both layouts, every dtype a state dict holds, shared storages, strided
// views; and malformed or hostile files refused with a message that names the problem.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { FuseformerError } from '../../src/errors.js';
import { PickleError, PickleTruncated, pickleCallable, unpickle } from '../../src/io/pickle.js';
import { SAFETENSORS_DTYPES } from '../../src/io/safetensors.js';
import { TorchCheckpointReader } from '../../src/io/torch-checkpoint.js';
import { openWeightFile } from '../../src/io/weight-file.js';
import { ZipArchive } from '../../src/io/zip-archive.js';
import { Rng } from '../../src/testing/random.js';

const FIXTURES = 'test/fixtures/torch';
const scratch = mkdtempSync(join(tmpdir(), 'fuseformer-torch-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

type Expected = Record<string, { dtype: string; shape: number[]; values: number[] }>;
const expected = JSON.parse(readFileSync(join(FIXTURES, 'tensors.json'), 'utf8')) as { zip: Expected; legacy: Expected };

const DTYPES: Record<string, string> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16', float64: 'F64', int64: 'I64', int8: 'I8', bool: 'BOOL', float8_e4m3fn: 'F8_E4M3' };

/** A tensor's bytes as numbers, decoded independently of the reader's readFloats. */
function numbers(dtype: string, bytes: Uint8Array): number[] {
  const copy = bytes.slice();
  switch (dtype) {
    case 'F64': return Array.from(new Float64Array(copy.buffer));
    case 'I64': return Array.from(new BigInt64Array(copy.buffer), Number);
    case 'I8': return Array.from(new Int8Array(copy.buffer));
    case 'BOOL': return Array.from(copy);
    case 'F8_E4M3': return Array.from(copy, e4m3);
    default: throw new Error(dtype);
  }
}

/** float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits. */
function e4m3(byte: number): number {
  const sign = byte & 0x80 ? -1 : 1, exponent = (byte >> 3) & 0xf, mantissa = byte & 7;
  return sign * (exponent === 0 ? mantissa / 8 * 2 ** -6 : (1 + mantissa / 8) * 2 ** (exponent - 7));
}

for (const [file, layout] of [['tensors-zip.bin', 'zip'], ['tensors-legacy.bin', 'legacy'], ['tensors-deflated.bin', 'zip']] as const) {
  test(`${file}: every tensor's dtype, shape and values are what torch.load returns`, () => {
    const want = expected[layout];
    const reader = TorchCheckpointReader.open(join(FIXTURES, file));
    try {
      // Non-tensor entries (a string, an int) are not tensors of the file.
      assert.deepEqual(reader.tensors.map((t) => t.name).sort(), Object.keys(want).sort());
      for (const [name, w] of Object.entries(want)) {
        const info = reader.info(name);
        assert.equal(info.dtype, DTYPES[w.dtype], name);
        assert.deepEqual(info.shape, w.shape, name);
        const got = ['F32', 'F16', 'BF16'].includes(info.dtype) ? Array.from(reader.readFloats(name)) : numbers(info.dtype, reader.read(name).bytes);
        // f32 / f16 / bf16 / f8 values are exact in float64; int64 2^40 too.
        assert.deepEqual(got, w.values, name);
      }
      assert.deepEqual(reader.readFloats('tied'), reader.readFloats('0.weight'));
    } finally {
      reader.close();
    }
  });
}

test('element ranges of contiguous and strided tensors equal the same elements of the whole', () => {
  const reader = TorchCheckpointReader.open(join(FIXTURES, 'tensors-zip.bin'));
  try {
    for (const name of ['0.weight', 'transposed', 'row_slice', 'column_slice']) {
      const whole = reader.readFloats(name);
      const ranges: [number, number][] = [[1, 3], [whole.length - 2, whole.length], [0, 1]];
      assert.deepEqual(Array.from(reader.readFloats(name, ranges)), ranges.flatMap(([s, e]) => Array.from(whole.subarray(s, e))), name);
    }
    assert.throws(() => reader.readElements('row_slice', [[0, 13]]), /elements \[0, 13\) of tensor 'row_slice' are outside its 12 elements/);
    assert.throws(() => reader.readFloats('i64'), /tensor 'i64' is I64; only F32, F16 and BF16 weights are read/);
    assert.throws(() => reader.info('nope'), /no tensor named 'nope'/);
  } finally {
    reader.close();
  }
});

test('openWeightFile reads a PyTorch file by its extension, and a closed reader says so', () => {
  const reader = openWeightFile(join(FIXTURES, 'tensors-legacy.bin'));
  assert.deepEqual(reader.metadata, {});
  reader.close();
  assert.throws(() => reader.read('0.weight'), /the reader is closed/);
});

test('a pickle that would run code is refused by the name it calls, and nothing runs', () => {
  assert.throws(() => TorchCheckpointReader.open(join(FIXTURES, 'unsafe.bin')), (error: Error) => {
    assert.match(error.message, /unsafe\.bin: unsafe\/data\.pkl: pickle byte \d+: the pickle names posix\.system/);
    assert.match(error.message, /nothing in the file is run/);
    return true;
  });
});

test('malformed files: each refused with what is wrong', () => {
  const bytes = readFileSync(join(FIXTURES, 'tensors-zip.bin'));
  const write = (name: string, data: Uint8Array) => { const p = join(scratch, name); writeFileSync(p, data); return p; };
  // Not a checkpoint at all.
  assert.throws(() => TorchCheckpointReader.open(write('text.bin', Buffer.from('hello, world'))), /text\.bin: not a PyTorch checkpoint \(neither a ZIP archive nor a pickle\)/);
  // A ZIP cut short loses its central directory.
  assert.throws(() => TorchCheckpointReader.open(write('cut.bin', bytes.subarray(0, bytes.length - 200))), /cut\.bin: not a ZIP archive \(no end-of-central-directory record\)|runs past the end/);
  // The legacy layout cut inside a storage.
  const legacy = readFileSync(join(FIXTURES, 'tensors-legacy.bin'));
  assert.throws(() => TorchCheckpointReader.open(write('legacy-cut.bin', legacy.subarray(0, legacy.length - 10))), /legacy-cut\.bin: storage '\w+' \(\d+ bytes at \d+\) runs past the end/);
  // The legacy layout cut inside its pickles.
  assert.throws(() => TorchCheckpointReader.open(write('legacy-pickle-cut.bin', legacy.subarray(0, 300))), /legacy-pickle-cut\.bin: the pickle is cut off at byte 300/);
  // A pickle, but not torch's legacy layout.
  assert.throws(() => TorchCheckpointReader.open(write('list.bin', pickleOf([0x80, 0x02, 0x5d, 0x2e]))), /list\.bin: starts with a pickle, but not PyTorch's magic number/);
  // A tar archive of torch < 0.4.
  const tar = new Uint8Array(1024);
  tar.set(Buffer.from('ustar'), 257);
  assert.throws(() => TorchCheckpointReader.open(write('old.bin', tar)), /old\.bin: a PyTorch checkpoint in the tar format of torch < 0\.4/);
  assert.throws(() => TorchCheckpointReader.open(join(scratch, 'absent.bin')), /absent\.bin: cannot open \(ENOENT\)/);
});

test('a ZIP whose pickle names a storage the archive lacks, or one too small for its tensor', () => {
  // Rename entry data/0 in the central directory and the local header ("data/0" → "data/Z"): the pickle's storage '0' is gone.
  const bytes = Buffer.from(readFileSync(join(FIXTURES, 'tensors-zip.bin')));
  const renamed = Buffer.from(bytes.toString('latin1').replaceAll('tensors-zip/data/0', 'tensors-zip/data/Z'), 'latin1');
  const path = join(scratch, 'renamed.bin');
  writeFileSync(path, renamed);
  assert.throws(() => TorchCheckpointReader.open(path), /renamed\.bin: the pickle names storage '0', but the archive has no entry tensors-zip\/data\/0/);
});

test('the ZIP reader: entries, stored data in place and deflated data inflated', () => {
  const stored = ZipArchive.open(join(FIXTURES, 'tensors-zip.bin'));
  const deflated = ZipArchive.open(join(FIXTURES, 'tensors-deflated.bin'));
  try {
    const names = stored.entries.map((e) => e.name);
    assert.ok(names.includes('tensors-zip/data.pkl') && names.includes('tensors-zip/byteorder'), names.join(', '));
    for (const entry of stored.entries) {
      assert.equal(entry.method, 0, `${entry.name} is stored`);
      const other = deflated.entry(entry.name)!;
      assert.equal(other.method, 8, `${entry.name} is deflated in the copy`);
      assert.deepEqual(deflated.read(other), stored.read(entry), entry.name);
    }
    // torch.save aligns every storage to 64 bytes.
    for (const entry of stored.entries.filter((e) => e.name.includes('/data/'))) assert.equal(stored.dataOffset(entry) % 64, 0, entry.name);
  } finally {
    stored.close();
    deflated.close();
  }
});

function pickleOf(opcodes: number[]): Uint8Array { return new Uint8Array(opcodes); }

const plain = { findGlobal: (m: string, n: string) => { throw new Error(`${m}.${n} is not allowed`); }, source: 'test' };

test('the unpickler: protocol-0 text opcodes, memo, integers of every width, nested containers', () => {
  // Written by hand in protocol 0: {'keyé': 12, 'bA': 123456789012345678901, 'list': [False, 1.5, None], 'again': <memo 1>}.
  const text = "(dp0\nVkey\\u00e9\np1\nI12\nsS'b\\x41'\nL123456789012345678901L\nsVlist\n(lI00\naF1.5\naNasVagain\ng1\ns.";
  const { value, end } = unpickle(Buffer.from(text, 'latin1'), plain);
  assert.equal(end, text.length);
  assert.deepEqual(value, new Map<unknown, unknown>([['keyé', 12], ['bA', 123456789012345678901n], ['list', [false, 1.5, null]], ['again', 'keyé']]));
  // Binary opcodes: LONG1 negative, BININT, BINFLOAT, SHORT_BINUNICODE, TUPLE2, EMPTY_SET + ADDITEMS, MEMOIZE / BINGET.
  const binary = [0x80, 0x04, 0x5d, 0x94, // PROTO 4, EMPTY_LIST, MEMOIZE (0)
    0x28, 0x8a, 0x02, 0x00, 0x80, // MARK, LONG1 2 bytes 0x8000 → -32768
    0x4a, 0xff, 0xff, 0xff, 0xff, // BININT -1
    0x47, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, // BINFLOAT 1.5
    0x8c, 0x02, 0x68, 0x69, // SHORT_BINUNICODE 'hi'
    0x4b, 0x01, 0x4b, 0x02, 0x86, // (1, 2)
    0x8f, 0x28, 0x4b, 0x07, 0x90, // {7}
    0x43, 0x02, 0xde, 0xad, // b'\xde\xad'
    0x65, 0x2e]; // APPENDS, STOP
  const list = unpickle(pickleOf(binary), plain).value as unknown[];
  assert.deepEqual(list.slice(0, 5), [-32768, -1, 1.5, 'hi', [1, 2]]);
  assert.deepEqual(list[5], new Set([7]));
  assert.deepEqual(list[6], new Uint8Array([0xde, 0xad]));
  assert.ok(Object.isFrozen(list[4]), 'a tuple is frozen');
});

test('the unpickler: globals only through findGlobal, and bad streams are errors', () => {
  // cbuiltins\neval\n(Vprint(1)\ntR. — eval is refused by name.
  const evil = Buffer.from('cbuiltins\neval\n(Vprint(1)\ntR.', 'latin1');
  assert.throws(() => unpickle(evil, plain), (e: Error) => e instanceof PickleError && /test: pickle byte 0: builtins\.eval is not allowed/.test(e.message));
  // An allowed callable is called with its arguments.
  const allowed = { ...plain, findGlobal: (m: string, n: string) => pickleCallable(`${m}.${n}`, (args) => (args as number[]).reduce((a, b) => a + b, 0)) };
  assert.equal(unpickle(Buffer.from('cmath\nfsum\n(I1\nI2\ntR.', 'latin1'), allowed).value, 3);
  assert.throws(() => unpickle(pickleOf([0x80, 0x02, 0x4a, 0x01]), plain), PickleTruncated);
  assert.throws(() => unpickle(pickleOf([0x80, 0x02, 0xff]), plain), /unknown opcode 0xff/);
  assert.throws(() => unpickle(pickleOf([0x80, 0x02, 0x68, 0x05, 0x2e]), plain), /memo entry 5 was never stored/);
  assert.throws(() => unpickle(pickleOf([0x80, 0x02, 0x30, 0x2e]), plain), /the stack is empty/);
  assert.throws(() => unpickle(pickleOf([0x80, 0x02, 0x4b, 0x01, 0x4b, 0x02, 0x2e]), plain), /STOP with 2 values on the stack/);
  assert.throws(() => unpickle(pickleOf([0x80, 0x02, 0x4b, 0x01, 0x51, 0x2e]), plain), /a persistent id, which this pickle may not hold/);
  assert.throws(() => unpickle(pickleOf([0x80, 0x02, 0x4b, 0x01, 0x29, 0x52, 0x2e]), plain), /calls number 1, which is not callable/);
  // A BINUNICODE8 length past the end is a truncation, not a huge allocation.
  assert.throws(() => unpickle(pickleOf([0x80, 0x04, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]), plain), PickleTruncated);
});

test('fuzz: corrupted checkpoints load or fail with a FuseformerError, never a crash or a hang', () => {
  const rng = new Rng(2026);
  const pick = (n: number) => Math.floor(rng.next() * n);
  for (const file of ['tensors-zip.bin', 'tensors-legacy.bin']) {
    const original = readFileSync(join(FIXTURES, file));
    for (let trial = 0; trial < 400; trial++) {
      const bytes = Buffer.from(original);
      // The pickle sits at the front of both layouts, the ZIP's central directory at the end.
      for (let f = 1 + pick(4); f > 0; f--) {
        const at = rng.next() < 0.7 ? pick(Math.min(bytes.length, 1200)) : bytes.length - 1 - pick(Math.min(bytes.length, 900));
        bytes[at] = pick(256);
      }
      const path = join(scratch, `fuzz-${file}`);
      writeFileSync(path, trial % 5 === 0 ? bytes.subarray(0, pick(bytes.length)) : bytes);
      try {
        const reader = TorchCheckpointReader.open(path);
        try {
          for (const t of reader.tensors) {
            const numel = t.shape.reduce((a, b) => a * b, 1);
            assert.equal(reader.read(t.name).bytes.length, numel * SAFETENSORS_DTYPES[t.dtype], `trial ${trial}: ${t.name}`);
          }
        } finally {
          reader.close();
        }
      } catch (error) {
        assert.ok(error instanceof FuseformerError, `${file} trial ${trial}: ${(error as Error).name}: ${(error as Error).message}`);
      }
    }
  }
});
