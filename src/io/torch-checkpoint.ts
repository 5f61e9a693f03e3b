// PyTorch weight files (pytorch_model.bin, *.pt, *.pth) read without Python and without running them.
//
// Many Hugging Face repositories — Helsinki-NLP's opus-mt models, checkpoints fine-tuned before 2023 —
// ship only pytorch_model.bin: a state dict written by torch.save. Two layouts exist:
//   ZIP (torch ≥ 1.6): an uncompressed ZIP archive holding `<prefix>/data.pkl` (the pickled dict), one
//     entry `<prefix>/data/<key>` per tensor storage (raw little-endian elements, 64-byte aligned), and
//     `<prefix>/byteorder` ("little"; absent in files from before it existed, which were little-endian).
//   legacy (torch < 1.6, `_use_new_zipfile_serialization=False`): five pickles back to back — the magic
//     number 0x1950a86a20f9469cfc6c, the protocol version 1001, a sys_info dict (little_endian), the dict,
//     the list of storage keys — then each listed storage in that order as an int64 element count and
//     its raw elements.
// In the pickled dict a tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, …)` (or
// `_rebuild_tensor_v3(…, dtype)` with an untyped storage; `_rebuild_parameter` and `_rebuild_from_type_v2`
// around either), the storage a persistent id ('storage', torch.FloatStorage, key, location, numel).
// pickle.ts runs the pickle with only those names allowed (and collections.OrderedDict); any other global
// is refused by name — loading a weights file never runs code from it.
//
// A contiguous tensor's bytes are read in place at their file offset (tied weights share a storage: two
// names, one range); a strided one is gathered element by element. The reader has SafetensorsReader's
// methods (weight-file.ts), so model loaders take either format.

import { closeSync, fstatSync, openSync } from 'node:fs';
import { FuseformerError } from '../errors.js';
import { formatShape } from '../tensor.js';
import { elementRangesTotal, readFileRange } from './file-range.js';
import { describe, isPickleCallable, pickleCallable, PickleTruncated, unpickle } from './pickle.js';
import type { PickleCallable } from './pickle.js';
import type { SafetensorsDType, TensorData } from './safetensors.js';
import { finiteFloats, SAFETENSORS_DTYPES } from './safetensors.js';
import type { WeightFile, WeightInfo } from './weight-file.js';
import { looksLikeZip, ZipArchive } from './zip-archive.js';

export class TorchCheckpointError extends FuseformerError {}

/** torch.<Name>Storage classes → element type. */
const STORAGE_DTYPES: Readonly<Record<string, SafetensorsDType>> = {
  FloatStorage: 'F32', DoubleStorage: 'F64', HalfStorage: 'F16', BFloat16Storage: 'BF16', LongStorage: 'I64',
  IntStorage: 'I32', ShortStorage: 'I16', CharStorage: 'I8', ByteStorage: 'U8', BoolStorage: 'BOOL',
};
/** torch.<dtype> attributes (the dtype argument of _rebuild_tensor_v3) → element type. */
const TORCH_DTYPES: Readonly<Record<string, SafetensorsDType>> = {
  float32: 'F32', float: 'F32', float64: 'F64', double: 'F64', float16: 'F16', half: 'F16', bfloat16: 'BF16',
  int64: 'I64', long: 'I64', int32: 'I32', int: 'I32', int16: 'I16', short: 'I16', int8: 'I8', uint8: 'U8',
  bool: 'BOOL', float8_e4m3fn: 'F8_E4M3', float8_e5m2: 'F8_E5M2',
};
const LEGACY_MAGIC = 0x1950a86a20f9469cfc6cn;
const LEGACY_PROTOCOL = 1001;

/** A storage a persistent id names: `numel` elements of `dtype` (bytes when untyped); a legacy view starts `byteOffset` into its root storage. */
class StorageRef {
  constructor(readonly key: string, readonly dtype: SafetensorsDType | 'UNTYPED', readonly numel: number, readonly byteOffset = 0) {}
  get bytes(): number { return this.numel * (this.dtype === 'UNTYPED' ? 1 : SAFETENSORS_DTYPES[this.dtype]); }
}

class TensorRef {
  constructor(readonly storage: StorageRef, readonly dtype: SafetensorsDType, readonly offset: number, readonly shape: readonly number[], readonly stride: readonly number[]) {}
}

class TypeMarker {
  constructor(readonly storageDtype?: SafetensorsDType | 'UNTYPED', readonly tensorDtype?: SafetensorsDType, readonly tensorClass?: string) {}
}

/** Where a storage's bytes are: a file offset, or (a deflated ZIP entry) in memory. */
type StorageBytes = { readonly offset: number; readonly length: number } | { readonly memory: Uint8Array };

interface Located extends WeightInfo {
  readonly storage: StorageBytes;
  /** Byte offset of element 0 within the storage. */
  readonly start: number;
  readonly stride: readonly number[];
  readonly contiguous: boolean;
}

export class TorchCheckpointReader implements WeightFile {
  readonly tensors: readonly WeightInfo[];
  readonly metadata: Readonly<Record<string, string>> = {};
  private readonly byName: Map<string, Located>;
  private fd: number | null;

  private constructor(readonly path: string, fd: number, located: readonly Located[]) {
    this.fd = fd;
    this.byName = new Map(located.map((t) => [t.name, t]));
    this.tensors = located.map(({ name, dtype, shape }) => ({ name, dtype, shape }));
  }

  static open(path: string): TorchCheckpointReader {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (error) {
      throw new TorchCheckpointError(`${path}: cannot open (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
    }
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile()) throw new TorchCheckpointError(`${path}: not a file`);
      const head = readAt(fd, 0, Math.min(stat.size, 512), stat.size, path);
      if (looksLikeZip(head)) return new TorchCheckpointReader(path, fd, readZipCheckpoint(path));
      if (head[0] === 0x80) return new TorchCheckpointReader(path, fd, readLegacyCheckpoint(fd, stat.size, path));
      if (head.length >= 262 && new TextDecoder().decode(head.subarray(257, 262)) === 'ustar') {
        throw new TorchCheckpointError(`${path}: a PyTorch checkpoint in the tar format of torch < 0.4, which is not read; load and re-save it with a current torch.save`);
      }
      throw new TorchCheckpointError(`${path}: not a PyTorch checkpoint (neither a ZIP archive nor a pickle)`);
    } catch (error) {
      closeSync(fd);
      throw error;
    }
  }

  has(name: string): boolean { return this.byName.has(name); }

  info(name: string): WeightInfo {
    const t = this.located(name);
    return { name: t.name, dtype: t.dtype, shape: t.shape };
  }

  read(name: string): TensorData {
    const t = this.located(name);
    return { dtype: t.dtype, shape: t.shape, bytes: this.bytesOf(t) };
  }

  readElements(name: string, ranges: readonly (readonly [number, number])[]): Uint8Array {
    const t = this.located(name);
    const size = SAFETENSORS_DTYPES[t.dtype], numel = t.shape.reduce((a, b) => a * b, 1);
    const total = elementRangesTotal(ranges, numel, this.path, name, (message) => new TorchCheckpointError(message));
    const out = new Uint8Array(total * size);
    const whole = t.contiguous ? undefined : this.bytesOf(t);
    let at = 0;
    for (const [start, end] of ranges) {
      const part = whole ? whole.subarray(start * size, end * size) : this.storageBytes(t.storage, t.start + start * size, (end - start) * size);
      out.set(part, at);
      at += part.length;
    }
    return out;
  }

  readFloats(name: string, ranges?: readonly (readonly [number, number])[]): Float32Array {
    const t = this.located(name);
    if (t.dtype !== 'F32' && t.dtype !== 'F16' && t.dtype !== 'BF16') throw new TorchCheckpointError(`${this.path}: tensor '${name}' is ${t.dtype}; only F32, F16 and BF16 weights are read`);
    return finiteFloats(ranges ? this.readElements(name, ranges) : this.read(name).bytes, t.dtype, `${this.path}: tensor '${name}'`, ranges !== undefined);
  }

  close(): void {
    if (this.fd !== null) { closeSync(this.fd); this.fd = null; }
  }

  private located(name: string): Located {
    const t = this.byName.get(name);
    if (!t) throw new TorchCheckpointError(`${this.path}: no tensor named '${name}' (the file has ${this.tensors.length}: ${this.tensors.slice(0, 5).map((x) => x.name).join(', ')}${this.tensors.length > 5 ? ', …' : ''})`);
    return t;
  }

  /** The tensor's elements in row-major order. */
  private bytesOf(t: Located): Uint8Array {
    const size = SAFETENSORS_DTYPES[t.dtype], numel = t.shape.reduce((a, b) => a * b, 1);
    if (t.contiguous || numel === 0) return this.storageBytes(t.storage, t.start, numel * size);
    // Strided: read the span the tensor touches, then gather.
    const span = t.shape.reduce((s, n, d) => s + (n - 1) * t.stride[d]!, 0) + 1;
    const source = this.storageBytes(t.storage, t.start, span * size);
    const out = new Uint8Array(numel * size), index = new Array<number>(t.shape.length).fill(0);
    for (let i = 0; i < numel; i++) {
      let element = 0;
      for (let d = 0; d < index.length; d++) element += index[d]! * t.stride[d]!;
      out.set(source.subarray(element * size, (element + 1) * size), i * size);
      for (let d = index.length - 1; d >= 0 && ++index[d]! === t.shape[d]; d--) index[d] = 0;
    }
    return out;
  }

  private storageBytes(storage: StorageBytes, start: number, length: number): Uint8Array {
    if ('memory' in storage) return storage.memory.subarray(start, start + length);
    if (this.fd === null) throw new TorchCheckpointError(`${this.path}: the reader is closed`);
    return readAt(this.fd, storage.offset + start, length, storage.offset + storage.length, this.path);
  }
}

/** The names a checkpoint's pickle may use; anything else is refused by name. */
function findTorchGlobal(module: string, name: string): unknown {
  const qualified = `${module}.${name}`;
  switch (qualified) {
    case 'collections.OrderedDict': return pickleCallable(qualified, () => new Map());
    case 'torch._utils._rebuild_tensor':
    case 'torch._utils._rebuild_tensor_v2':
      return pickleCallable(qualified, (a) => rebuildTensor(a[0], a[1], a[2], a[3], undefined));
    case 'torch._utils._rebuild_tensor_v3':
      return pickleCallable(qualified, (a) => rebuildTensor(a[0], a[1], a[2], a[3], a[6]));
    case 'torch._utils._rebuild_parameter':
    case 'torch._utils._rebuild_parameter_with_state':
      return pickleCallable(qualified, (a) => {
        if (!(a[0] instanceof TensorRef)) throw new Error(`expects a tensor, got ${describe(a[0])}`);
        return a[0];
      });
    case 'torch._tensor._rebuild_from_type_v2':
      return pickleCallable(qualified, ([rebuild, type, args]) => {
        if (!isPickleCallable(rebuild) || !Array.isArray(args)) throw new Error('expects a rebuild function and its arguments');
        if (!(type instanceof TypeMarker) || type.tensorClass === undefined) throw new Error(`rebuilds a ${describe(type)}, not a tensor`);
        return (rebuild as PickleCallable).call(args as unknown[]);
      });
    case 'torch.Tensor': case 'torch._tensor.Tensor': case 'torch.nn.parameter.Parameter': case 'torch.nn.Parameter':
      return new TypeMarker(undefined, undefined, qualified);
  }
  if ((module === 'torch' || module === 'torch.storage') && name === 'UntypedStorage') return new TypeMarker('UNTYPED');
  if (module === 'torch' && STORAGE_DTYPES[name]) return new TypeMarker(STORAGE_DTYPES[name]);
  if (module === 'torch' && TORCH_DTYPES[name]) return new TypeMarker(undefined, TORCH_DTYPES[name]);
  if (module === 'torch' && /Storage$/.test(name)) throw new Error(`torch.${name}: tensors of that element type are not read (F32, F16, BF16, F64 and integer types are)`);
  throw new Error(`the pickle names ${qualified}, which a weights file has no use for; only tensors in (ordered) dicts are read, and nothing in the file is run`);
}

function rebuildTensor(storage: unknown, offset: unknown, size: unknown, stride: unknown, dtype: unknown): TensorRef {
  if (!(storage instanceof StorageRef)) throw new Error(`expects a storage, got ${describe(storage)}`);
  const ints = (value: unknown, what: string): number[] => {
    if (!Array.isArray(value) || !value.every((n) => Number.isInteger(n) && n >= 0)) throw new Error(`its ${what} is ${describe(value)}, not a tuple of non-negative integers`);
    return value as number[];
  };
  const shape = ints(size, 'size'), strides = ints(stride, 'stride');
  if (strides.length !== shape.length) throw new Error(`a size of ${shape.length} dimensions with a stride of ${strides.length}`);
  if (!Number.isInteger(offset) || (offset as number) < 0) throw new Error(`its storage offset is ${describe(offset)}`);
  let elementType: SafetensorsDType;
  if (storage.dtype === 'UNTYPED') {
    if (!(dtype instanceof TypeMarker) || !dtype.tensorDtype) throw new Error(`an untyped storage with the dtype ${describe(dtype)}`);
    elementType = dtype.tensorDtype;
  } else {
    elementType = storage.dtype;
  }
  const size1 = SAFETENSORS_DTYPES[elementType];
  const available = Math.floor(storage.bytes / size1);
  const numel = shape.reduce((a, b) => a * b, 1);
  const last = (offset as number) + shape.reduce((s, n, d) => s + (n - 1) * strides[d]!, 0);
  if (numel > 0 && last >= available) throw new Error(`a ${elementType} tensor of shape ${formatShape(shape)} reaches element ${last} of a storage of ${available}`);
  return new TensorRef(storage, elementType, offset as number, shape, strides);
}

/** Collects the storages the pickle names (key → ref); `legacy` ids carry a sixth field, the view. */
function storageLoader(storages: Map<string, StorageRef>): (pid: unknown) => unknown {
  return (pid) => {
    if (!Array.isArray(pid) || pid[0] !== 'storage' || (pid.length !== 5 && pid.length !== 6)) throw new Error(`a persistent id ${describe(pid)} that is not a tensor storage`);
    const [, type, key, , numel, view] = pid as unknown[];
    if (!(type instanceof TypeMarker) || type.storageDtype === undefined) throw new Error(`a storage of type ${describe(type)}`);
    if (typeof key !== 'string' || !Number.isInteger(numel) || (numel as number) < 0) throw new Error(`a malformed storage id (key ${describe(key)}, size ${describe(numel)})`);
    const root = new StorageRef(key, type.storageDtype, numel as number);
    const known = storages.get(key);
    if (known && (known.dtype !== root.dtype || known.numel !== root.numel)) throw new Error(`storage '${key}' is named with two types or sizes`);
    storages.set(key, root);
    if (view === undefined || view === null) return root;
    // Legacy views: (view key, element offset, element count) into the root storage.
    const [, viewOffset, viewSize] = view as unknown[];
    if (!Number.isInteger(viewOffset) || !Number.isInteger(viewSize) || (viewOffset as number) + (viewSize as number) > root.numel) throw new Error(`a malformed storage view ${describe(view)}`);
    return new StorageRef(key, root.dtype, viewSize as number, (viewOffset as number) * (root.dtype === 'UNTYPED' ? 1 : SAFETENSORS_DTYPES[root.dtype]));
  };
}

/** The name → tensor entries of the pickled top-level dict. */
function tensorEntries(value: unknown, path: string): [string, TensorRef][] {
  if (!(value instanceof Map)) throw new TorchCheckpointError(`${path}: holds ${describe(value)}, not a dict of tensors (a state dict)`);
  const entries: [string, TensorRef][] = [];
  for (const [name, tensor] of value) {
    if (typeof name === 'string' && tensor instanceof TensorRef) entries.push([name, tensor]);
  }
  if (entries.length === 0) throw new TorchCheckpointError(`${path}: its dict holds no tensors (keys: ${[...value.keys()].slice(0, 5).map((k) => describe(k)).join(', ')})`);
  return entries;
}

function locate(name: string, t: TensorRef, storage: StorageBytes, path: string): Located {
  const size = SAFETENSORS_DTYPES[t.dtype];
  const available = 'memory' in storage ? storage.memory.length : storage.length;
  if (t.storage.bytes + t.storage.byteOffset > available) {
    throw new TorchCheckpointError(`${path}: tensor '${name}' needs ${t.storage.bytes} bytes of storage '${t.storage.key}', which holds ${available}`);
  }
  // Contiguous: row-major strides (a dimension of size 1 may have any stride).
  let expected = 1, contiguous = true;
  for (let d = t.shape.length - 1; d >= 0; d--) {
    if (t.shape[d] !== 1 && t.stride[d] !== expected) contiguous = false;
    expected *= t.shape[d]!;
  }
  return { name, dtype: t.dtype, shape: t.shape, storage, start: t.storage.byteOffset + t.offset * size, stride: t.stride, contiguous };
}

function readZipCheckpoint(path: string): Located[] {
  const zip = ZipArchive.open(path);
  try {
    const pickles = zip.entries.filter((e) => e.name === 'data.pkl' || e.name.endsWith('/data.pkl'));
    if (pickles.length !== 1) throw new TorchCheckpointError(`${path}: a ZIP archive with ${pickles.length} data.pkl entries; a torch.save file has exactly one`);
    const prefix = pickles[0]!.name.slice(0, -'data.pkl'.length);
    const byteorder = zip.entry(`${prefix}byteorder`);
    if (byteorder) {
      const order = new TextDecoder().decode(zip.read(byteorder)).trim();
      if (order !== 'little') throw new TorchCheckpointError(`${path}: its tensors are stored ${order}-endian; only little-endian files are read`);
    }
    const storages = new Map<string, StorageRef>();
    const { value } = unpickle(zip.read(pickles[0]!), { findGlobal: findTorchGlobal, persistentLoad: storageLoader(storages), source: `${path}: ${pickles[0]!.name}` });
    const entries = tensorEntries(value, path);
    const places = new Map<string, StorageBytes>();
    for (const [key] of storages) {
      const entry = zip.entry(`${prefix}data/${key}`);
      if (!entry) throw new TorchCheckpointError(`${path}: the pickle names storage '${key}', but the archive has no entry ${prefix}data/${key}`);
      places.set(key, entry.method === 0 ? { offset: zip.dataOffset(entry), length: entry.size } : { memory: zip.read(entry) });
    }
    return entries.map(([name, t]) => locate(name, t, places.get(t.storage.key)!, path));
  } catch (error) {
    if (error instanceof PickleTruncated) throw new TorchCheckpointError(error.message);
    throw error;
  } finally {
    zip.close();
  }
}

function readLegacyCheckpoint(fd: number, fileBytes: number, path: string): Located[] {
  // The pickles come first; read a growing prefix of the file until they fit in it.
  for (let prefix = Math.min(fileBytes, 1 << 20); ; prefix = Math.min(fileBytes, prefix * 4)) {
    const bytes = readAt(fd, 0, prefix, fileBytes, path);
    try {
      return parseLegacy(fd, bytes, fileBytes, path);
    } catch (error) {
      if (!(error instanceof PickleTruncated)) throw error;
      if (prefix === fileBytes) throw new TorchCheckpointError(`${path}: ${error.message.slice(path.length + 2)}`);
    }
  }
}

function parseLegacy(fd: number, bytes: Uint8Array, fileBytes: number, path: string): Located[] {
  const plain = { findGlobal: findTorchGlobal, source: path };
  const magic = unpickle(bytes, plain);
  if (magic.value !== LEGACY_MAGIC) throw new TorchCheckpointError(`${path}: starts with a pickle, but not PyTorch's magic number (not a torch.save file)`);
  const protocol = unpickle(bytes, plain, magic.end);
  if (protocol.value !== LEGACY_PROTOCOL) throw new TorchCheckpointError(`${path}: PyTorch legacy format version ${describe(protocol.value)}; only ${LEGACY_PROTOCOL} is read`);
  const sysInfo = unpickle(bytes, plain, protocol.end);
  if (sysInfo.value instanceof Map && sysInfo.value.get('little_endian') === false) throw new TorchCheckpointError(`${path}: written on a big-endian machine; only little-endian files are read`);
  const storages = new Map<string, StorageRef>();
  const main = unpickle(bytes, { ...plain, persistentLoad: storageLoader(storages) }, sysInfo.end);
  const keys = unpickle(bytes, plain, main.end);
  if (!Array.isArray(keys.value) || !keys.value.every((k) => typeof k === 'string')) throw new TorchCheckpointError(`${path}: the storage key list is ${describe(keys.value)}`);
  const entries = tensorEntries(main.value, path);
  // Each storage: an int64 element count, then its elements.
  const places = new Map<string, StorageBytes>();
  let at = keys.end;
  for (const key of keys.value as string[]) {
    const storage = storages.get(key);
    if (!storage) throw new TorchCheckpointError(`${path}: storage '${key}' is listed but no tensor uses it`);
    const count = readAt(fd, at, 8, fileBytes, path);
    const numel = Number(new DataView(count.buffer, count.byteOffset, 8).getBigInt64(0, true));
    if (numel !== storage.numel) throw new TorchCheckpointError(`${path}: storage '${key}' holds ${numel} elements at byte ${at}, its id says ${storage.numel}`);
    const length = storage.bytes;
    if (at + 8 + length > fileBytes) throw new TorchCheckpointError(`${path}: storage '${key}' (${length} bytes at ${at + 8}) runs past the end of the ${fileBytes}-byte file`);
    places.set(key, { offset: at + 8, length });
    at += 8 + length;
  }
  return entries.map(([name, t]) => {
    const place = places.get(t.storage.key);
    if (!place) throw new TorchCheckpointError(`${path}: tensor '${name}' uses storage '${t.storage.key}', which the file does not hold`);
    return locate(name, t, place, path);
  });
}

function readAt(fd: number, position: number, length: number, limit: number, path: string): Uint8Array {
  return readFileRange(fd, position, length, path, (message) => new TorchCheckpointError(message), limit);
}
