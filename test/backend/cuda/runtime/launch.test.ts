import assert from 'node:assert/strict';
import { test } from 'node:test';
import koffi from 'koffi';
import { arg } from '../../../../src/backend/cuda/runtime/kernel.js';
import { ARG_SLOT_BYTES, KernelArgPacker, KernelLauncher, LaunchableKernel, type LaunchApi } from '../../../../src/backend/cuda/runtime/launch.js';
import { ArgumentError, CudaError } from '../../../../src/errors.js';

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('hex');
}

test('arguments are packed one per 8-byte slot, little-endian, with pointers to each slot', () => {
  const packer = new KernelArgPacker(8);
  try {
    const params = packer.pack([
      arg.ptr(0x7f0000001234n),
      arg.i32(-3),
      arg.f32(1.5),
      arg.u32(0xfffffffe),
      arg.u64((1n << 64n) - 1n),
      arg.i64(-2n),
      arg.ptr({ ptr: 0x10n }),
    ], 'k');
    assert.equal(params, packer.pointerArrayAddress);
    assert.equal(hex(packer.slotBytes(7)), [
      '34120000007f0000', // ptr 0x7f0000001234
      'fdffffff00000000', // i32 -3, upper half zeroed
      '0000c03f00000000', // f32 1.5
      'feffffff00000000', // u32
      'ffffffffffffffff', // u64 max
      'feffffffffffffff', // i64 -2
      '1000000000000000', // ptr from a tensor-like object
    ].join(''));
    const entries = packer.pointerEntries(7);
    entries.forEach((entry, i) => assert.equal(entry, packer.valuesAddress + BigInt(i * ARG_SLOT_BYTES)));
  } finally {
    packer.dispose();
  }
});

test('the native layout is what C reads through void** (checked with libc memcpy)', () => {
  const packer = new KernelArgPacker(4);
  try {
    const libc = koffi.load('libc.so.6');
    const memcpy = libc.func('uint64_t memcpy(void *dst, uint64_t src, size_t n)');
    const params = packer.pack([arg.f32(-0.25), arg.i32(7)], 'k');
    // Read params[1] (a pointer) and then the 4 bytes it points to, as cuLaunchKernel would.
    const pointer = new BigUint64Array(1);
    memcpy(pointer, params + 8n, 8);
    const value = new Int32Array(1);
    memcpy(value, pointer[0]!, 4);
    assert.equal(value[0], 7);
    const first = new BigUint64Array(1);
    memcpy(first, params, 8);
    const f = new Float32Array(1);
    memcpy(f, first[0]!, 4);
    assert.equal(f[0], -0.25);
  } finally {
    packer.dispose();
  }
});

test('out-of-range or mistyped arguments are rejected naming the kernel and the argument', () => {
  const packer = new KernelArgPacker(2);
  try {
    assert.throws(() => packer.pack([arg.i32(2 ** 31)], 'softmax'), /kernel 'softmax' argument 0 \(i32\) is 2147483648: expected an integer/);
    assert.throws(() => packer.pack([arg.i32(0), arg.u32(-1)], 'k'), /argument 1 \(u32\) is -1/);
    assert.throws(() => packer.pack([arg.i32(1.5)], 'k'), ArgumentError);
    assert.throws(() => packer.pack([arg.ptr(-1n)], 'k'), ArgumentError);
    assert.throws(() => packer.pack([arg.i32(1), arg.i32(2), arg.i32(3)], 'k'), /3 arguments: at most 2/);
  } finally {
    packer.dispose();
  }
});

interface LaunchCall { fn: bigint; dims: number[]; shared: number; stream: bigint; params: bigint }

function fakeApi(status = 0): LaunchApi & { launches: LaunchCall[]; attributes: [bigint, number, number][] } {
  const launches: LaunchCall[] = [];
  const attributes: [bigint, number, number][] = [];
  return {
    launches,
    attributes,
    nameOf: (s) => (s === 1 ? 'CUDA_ERROR_INVALID_VALUE' : 'unknown status'),
    launchKernel: (fn, gx, gy, gz, bx, by, bz, shared, stream, params) => {
      launches.push({ fn, dims: [gx, gy, gz, bx, by, bz], shared, stream, params });
      return status;
    },
    funcSetAttribute: (fn, attribute, value) => { attributes.push([fn, attribute, value]); },
  };
}

test('launch: dims default to 1, arguments go through the packer, the current stream is used', () => {
  const api = fakeApi();
  const launcher = new KernelLauncher(api, 227 * 1024);
  let stream = 0x5n;
  const kernel = new LaunchableKernel({ name: 'axpb', function: 0xf00n }, launcher, () => stream);
  kernel.launch({ grid: 10, block: [128, 2] }, [arg.f32(2)]);
  stream = 0x6n;
  kernel.launch({ grid: [3, 4, 5], block: [32], sharedBytes: 1024 }, []);
  assert.equal(kernel.name, 'axpb');
  assert.deepEqual(api.launches.map((l) => [l.fn, l.dims, l.shared, l.stream]), [
    [0xf00n, [10, 1, 1, 128, 2, 1], 0, 0x5n],
    [0xf00n, [3, 4, 5, 32, 1, 1], 1024, 0x6n],
  ]);
  assert.deepEqual(api.attributes, [], 'no attribute change at or under 48 KiB');
});

test('launch: more than 48 KiB of dynamic shared memory raises the limit once per function', () => {
  const api = fakeApi();
  const launcher = new KernelLauncher(api, 227 * 1024);
  const a = { name: 'a', function: 1n };
  const b = { name: 'b', function: 2n };
  launcher.launch(a, { grid: 1, block: 32, sharedBytes: 100_000 }, [], 0n);
  launcher.launch(a, { grid: 1, block: 32, sharedBytes: 100_000 }, [], 0n);
  launcher.launch(a, { grid: 1, block: 32, sharedBytes: 64_000 }, [], 0n);
  launcher.launch(b, { grid: 1, block: 32, sharedBytes: 64_000 }, [], 0n);
  launcher.launch(a, { grid: 1, block: 32, sharedBytes: 200_000 }, [], 0n);
  assert.deepEqual(api.attributes, [[1n, 8, 100_000], [2n, 8, 64_000], [1n, 8, 200_000]]);
  assert.throws(() => launcher.launch(a, { grid: 1, block: 32, sharedBytes: 300_000 }, [], 0n), /300000 bytes of dynamic shared memory: this GPU allows at most 232448/);
});

test('launch: a function\'s static shared arrays count against the 48 KiB default', () => {
  // Session 24: 48 KiB of dynamic memory beside a static array failed to launch until the limit was raised.
  const api = { ...fakeApi(), funcGetAttribute: (fn: bigint, attribute: number) => (attribute === 1 && fn === 1n ? 2048 : 0) };
  const launcher = new KernelLauncher(api, 227 * 1024);
  launcher.launch({ name: 'static', function: 1n }, { grid: 1, block: 32, sharedBytes: 46 * 1024 }, [], 0n);
  launcher.launch({ name: 'static', function: 1n }, { grid: 1, block: 32, sharedBytes: 48 * 1024 }, [], 0n);
  launcher.launch({ name: 'plain', function: 2n }, { grid: 1, block: 32, sharedBytes: 48 * 1024 }, [], 0n);
  assert.deepEqual(api.attributes, [[1n, 8, 48 * 1024]], 'raised for the function with a static array only, when past 48 KiB less it');
});

test('launch: bad shapes are rejected before the driver; a failed launch names the kernel', () => {
  const launcher = new KernelLauncher(fakeApi(), 227 * 1024);
  const k = { name: 'k', function: 1n };
  assert.throws(() => launcher.launch(k, { grid: 0, block: 32 }, [], 0n), /kernel 'k' grid 0: every dimension must be a positive integer/);
  assert.throws(() => launcher.launch(k, { grid: [1, 70000], block: 32 }, [], 0n), /at most 65535/);
  assert.throws(() => launcher.launch(k, { grid: 1, block: [64, 32] }, [], 0n), /at most 1024 threads per block/);
  assert.throws(() => launcher.launch(k, { grid: 1.5, block: 32 }, [], 0n), ArgumentError);

  const failing = new KernelLauncher(fakeApi(1), 227 * 1024);
  assert.throws(() => failing.launch(k, { grid: [2, 3], block: 256 }, [arg.i32(1)], 0n), (err: unknown) =>
    err instanceof CudaError && err.message === "cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE (1): kernel 'k', grid [2, 3, 1], block [256, 1, 1], 0 B shared, 1 arguments");
});

test('programmatic launch: kernels that wait for their prerequisites go through cuLaunchKernelEx with the serialization attribute', () => {
  const api = fakeApi();
  const ex: { config: Uint8Array; fn: bigint; params: bigint }[] = [];
  const withEx: LaunchApi = {
    ...api,
    hasLaunchKernelEx: true,
    launchKernelEx: (config, fn, params) => {
      ex.push({ config: new Uint8Array(koffi.view(config, 136).slice(0)), fn, params });
      return 0;
    },
  };
  const launcher = new KernelLauncher(withEx, 227 * 1024);
  const waits = { name: 'waits', function: 0xaan, gridDependencyWait: true }, plain = { name: 'plain', function: 0xbbn };
  launcher.launch(waits, { grid: [7, 2], block: 128 }, [arg.i32(1)], 0x55n);
  assert.equal(ex.length, 0, 'off by default: an ordinary launch');
  assert.equal(api.launches.length, 1);
  launcher.programmaticLaunch = true;
  launcher.launch(waits, { grid: [7, 2], block: [128, 1, 1], sharedBytes: 512 }, [arg.i32(1)], 0x55n);
  launcher.launch(plain, { grid: 3, block: 64 }, [], 0x55n);
  assert.equal(api.launches.length, 2, 'a kernel that does not wait is never launched programmatically');
  assert.equal(ex.length, 1);
  const view = new DataView(ex[0]!.config.buffer);
  const u32 = (o: number) => view.getUint32(o, true);
  assert.deepEqual([0, 4, 8, 12, 16, 20, 24].map(u32), [7, 2, 1, 128, 1, 1, 512], 'grid, block, shared bytes');
  assert.equal(view.getBigUint64(32, true), 0x55n, 'the stream');
  assert.equal(u32(48), 1, 'one attribute');
  assert.equal(u32(64), 6, 'CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION');
  assert.equal(view.getInt32(72, true), 1, 'programmaticStreamSerializationAllowed');
  assert.equal(ex[0]!.fn, 0xaan);
  const attrs = view.getBigUint64(40, true);
  assert.deepEqual(new Uint8Array(koffi.view(attrs, 72).slice(0)), ex[0]!.config.subarray(64, 136), 'attrs points at the attribute in the same buffer');
  assert.throws(() => { new KernelLauncher(fakeApi(), 1024).programmaticLaunch = true; }, /needs cuLaunchKernelEx/);
});

test('a tensor-map argument is encoded into a 64-byte aligned 128-byte slot its pointer entry points at; a plain argument there again points back at its value slot', () => {
  const libc = koffi.load('libc.so.6');
  const memcpy = libc.func('uint64_t memcpy(void *dst, uint64_t src, size_t n)');
  const encoded: { rows: number; out: bigint }[] = [];
  // A stand-in for cuTensorMapEncodeTiled: writes the map's row count into the first 8 bytes.
  const fill = libc.func('uint64_t memset(uint64_t dst, int c, size_t n)');
  const packer = new KernelArgPacker(4, (map, out) => {
    encoded.push({ rows: map.rows, out });
    fill(out, map.rows, 128);
  });
  try {
    const map = { address: 0x1000n, dtype: 'bf16' as const, cols: 2048, rows: 7, rowStrideBytes: 4096, boxCols: 64, boxRows: 128 };
    const params = packer.pack([arg.tensorMap(map), arg.tensorMap({ ...map, rows: 9 }), arg.i32(5)], 'k');
    assert.equal(encoded.length, 2);
    assert.equal(encoded[0]!.out % 64n, 0n, 'CUtensorMap is 64-byte aligned');
    assert.equal(encoded[1]!.out - encoded[0]!.out, 128n);
    const entries = new BigUint64Array(3);
    memcpy(entries, params, 24);
    assert.deepEqual([entries[0], entries[1]], [encoded[0]!.out, encoded[1]!.out]);
    const bytes = new Uint8Array(128);
    memcpy(bytes, entries[1]!, 128);
    assert.ok(bytes.every((b) => b === 9), 'the entry points at the encoded map');
    // The next launch passes plain arguments in those positions: they point at their value slots again.
    const again = packer.pack([arg.i32(1), arg.i32(2), arg.i32(3)], 'k');
    memcpy(entries, again, 24);
    assert.deepEqual([...entries], [packer.valuesAddress, packer.valuesAddress + 8n, packer.valuesAddress + 16n]);
    const none = new KernelArgPacker(2);
    try {
      assert.throws(() => none.pack([arg.tensorMap(map)], 'gemm'), /kernel 'gemm' argument 0 is a tensor map, but this runtime cannot encode tensor maps/);
    } finally {
      none.dispose();
    }
  } finally {
    packer.dispose();
  }
});
