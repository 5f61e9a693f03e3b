// Training checkpoints: one directory per checkpoint, written whole or not at all.
//
//   <root>/step-00001200/
//     model.safetensors      parameters under their Hugging Face names (metadata format=pt), so the
//                            directory, with the config.json passed in `files`, is a model directory
//     optimizer.safetensors  AdamW state over the flat parameter workspace: m, v and (when kept) the
//                            f32 master weights, each F32 [numel] — padding included, so it loads
//                            straight back into the workspace
//     trainer.json           step, loss scaler, data loader position, RNG offsets, run config
//     ...                    any extra files given (config.json, tokenizer.json, loss.svg)
//
// Atomicity: everything is written into `<dir>.tmp-<pid>-<rand>`, flushed (fsync), and the directory
// is renamed into place; a crash leaves a *.tmp-* directory that listCheckpoints ignores, never a
// checkpoint with a missing or half-written file. Loading checks every tensor against what the caller
// expects and names the tensor and the file on any mismatch.

import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { DType } from '../dtype.js';
import { FuseformerError } from '../errors.js';
import { temporaryPathFor, writeFileAtomically } from '../io/atomic-write.js';
import { SAFETENSORS_DTYPES, SafetensorsReader, safetensorsDType, writeSafetensors, type TensorToWrite } from '../io/safetensors.js';
import type { CausalLMLoaderState } from './data.js';
import { restoreLossScaler, type LossScalerState } from './loss-scaler.js';

export class CheckpointError extends FuseformerError {}

export const CHECKPOINT_FORMAT_VERSION = 1;
export const MODEL_FILE = 'model.safetensors';
export const OPTIMIZER_FILE = 'optimizer.safetensors';
export const TRAINER_FILE = 'trainer.json';

/** Host storage per dtype: f16/bf16 travel as their raw 16-bit patterns. */
export type HostArray = Float32Array | Int32Array | Uint16Array | Int8Array | Uint8Array;

export interface NamedHostTensor {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly data: HostArray;
}

export interface TensorExpectation {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
}

export interface OptimizerState {
  readonly m: Float32Array;
  readonly v: Float32Array;
  /** f32 master weights; absent in no-master mode (the parameters are f32 or the run keeps none). */
  readonly master?: Float32Array;
}

/** JSON only. 64-bit RNG offsets go in as decimal strings (JSON numbers stop at 2^53). */
export interface TrainerState {
  readonly step: number;
  readonly lossScaler?: LossScalerState;
  readonly data?: CausalLMLoaderState;
  readonly rngOffsets?: Readonly<Record<string, string>>;
  readonly config?: unknown;
  readonly [key: string]: unknown;
}

export interface Checkpoint {
  readonly model: readonly NamedHostTensor[];
  readonly optimizer?: OptimizerState;
  readonly trainer: TrainerState;
}

export interface SaveOptions {
  /** Extra files for the directory (config.json, tokenizer.json, ...): name → content. */
  readonly files?: Readonly<Record<string, string | Uint8Array>>;
}

/** The directory name for a step: zero-padded so names sort by step. */
export function checkpointPath(root: string, step: number): string {
  return join(root, `step-${String(step).padStart(8, '0')}`);
}

/** Writes the checkpoint as directory `path` (replacing one that exists); see the file comment. */
export function saveCheckpoint(path: string, checkpoint: Checkpoint, options: SaveOptions = {}): void {
  const model = checkpoint.model.map((t) => toWrite(t, path));
  const trainer = { format: 'fuseformer-checkpoint', version: CHECKPOINT_FORMAT_VERSION, ...checkpoint.trainer };
  checkTrainerState(trainer, join(path, TRAINER_FILE));
  let json: string;
  try {
    json = JSON.stringify(trainer, null, 2);
  } catch (error) {
    throw new CheckpointError(`${join(path, TRAINER_FILE)}: the trainer state is not JSON (${(error as Error).message}); 64-bit values go in as decimal strings`);
  }
  const extra = Object.entries(options.files ?? {});
  for (const [name] of extra) {
    if (name !== basename(name) || name.startsWith('.') || [MODEL_FILE, OPTIMIZER_FILE, TRAINER_FILE].includes(name)) {
      throw new CheckpointError(`${path}: extra file name '${name}' must be a plain file name other than ${MODEL_FILE}, ${OPTIMIZER_FILE}, ${TRAINER_FILE}`);
    }
  }
  const optimizer = checkpoint.optimizer ? optimizerTensors(checkpoint.optimizer, path) : undefined;

  mkdirSync(dirname(path), { recursive: true });
  const temporary = temporaryPathFor(path);
  try {
    mkdirSync(temporary);
    writeSafetensors(join(temporary, MODEL_FILE), model, { format: 'pt' });
    fsyncFile(join(temporary, MODEL_FILE));
    if (optimizer) {
      writeSafetensors(join(temporary, OPTIMIZER_FILE), optimizer, { format: 'fuseformer-adamw' });
      fsyncFile(join(temporary, OPTIMIZER_FILE));
    }
    for (const [name, content] of extra) writeFileAtomically(join(temporary, name), content);
    writeFileAtomically(join(temporary, TRAINER_FILE), `${json}\n`);
    fsyncFile(temporary);
    if (existsSync(path)) {
      // rename() cannot replace a non-empty directory: move the old one aside first.
      const old = `${path}.old-${basename(temporary).split('.tmp-')[1]}`;
      renameSync(path, old);
      renameSync(temporary, path);
      rmSync(old, { recursive: true, force: true });
    } else {
      renameSync(temporary, path);
    }
    fsyncFile(dirname(path));
  } catch (error) {
    rmSync(temporary, { recursive: true, force: true });
    throw error;
  }
}

export interface LoadExpectation {
  /** Every parameter the model has; the file must hold exactly these. */
  readonly model: readonly TensorExpectation[];
  /** Elements of the flat parameter workspace; when given, optimizer.safetensors must exist. */
  readonly optimizerNumel?: number;
  /** Whether master weights must be present (default: load them if present). */
  readonly master?: boolean;
}

/** Reads and validates a checkpoint directory written by saveCheckpoint. */
export function loadCheckpoint(path: string, expected: LoadExpectation): Checkpoint {
  if (!isDirectory(path)) throw new CheckpointError(`${path}: not a checkpoint directory (it does not exist or is a file)`);
  const trainer = readTrainerState(join(path, TRAINER_FILE));
  const model = readTensors(join(path, MODEL_FILE), expected.model);
  let optimizer: OptimizerState | undefined;
  const optimizerFile = join(path, OPTIMIZER_FILE);
  if (expected.optimizerNumel !== undefined) {
    if (!existsSync(optimizerFile)) throw new CheckpointError(`${optimizerFile}: missing; this checkpoint holds no optimizer state (saved for inference only?)`);
    const numel = expected.optimizerNumel;
    const reader = openReader(optimizerFile);
    const withMaster = expected.master ?? reader.has('master');
    reader.close();
    const specs = ['m', 'v', ...(withMaster ? ['master'] : [])].map((name) => ({ name, dtype: 'f32' as const, shape: [numel] }));
    const tensors = readTensors(optimizerFile, specs);
    const byName = new Map(tensors.map((t) => [t.name, t.data as Float32Array]));
    optimizer = { m: byName.get('m')!, v: byName.get('v')!, ...(withMaster ? { master: byName.get('master')! } : {}) };
  }
  return { model, trainer, ...(optimizer ? { optimizer } : {}) };
}

/** Checkpoint directories under `root` (complete ones only), by increasing step. */
export function listCheckpoints(root: string): { step: number; path: string }[] {
  if (!isDirectory(root)) return [];
  return readdirSync(root)
    .map((name) => ({ name, match: /^step-(\d+)$/.exec(name) }))
    .filter(({ name, match }) => match !== null && existsSync(join(root, name, TRAINER_FILE)))
    .map(({ name, match }) => ({ step: Number(match![1]), path: join(root, name) }))
    .sort((a, b) => a.step - b.step);
}

/** The newest checkpoint under `root`, or undefined when there is none (start from scratch). */
export function latestCheckpoint(root: string): string | undefined {
  return listCheckpoints(root).at(-1)?.path;
}

/** Deletes all but the newest `keep` checkpoints under `root` (and stray temporary directories). */
export function pruneCheckpoints(root: string, keep: number): void {
  if (!Number.isSafeInteger(keep) || keep < 1) throw new CheckpointError(`pruneCheckpoints: keep must be an integer >= 1, got ${keep}`);
  const all = listCheckpoints(root);
  for (const { path } of all.slice(0, Math.max(0, all.length - keep))) rmSync(path, { recursive: true, force: true });
  // Leftovers of a save that crashed; a live process's save in progress is left alone.
  for (const name of readdirSync(root)) {
    const match = /^step-\d+\.(?:tmp|old)-(\d+)-[0-9a-f]+$/.exec(name);
    if (match && !processIsAlive(Number(match[1]))) rmSync(join(root, name), { recursive: true, force: true });
  }
}

/** 64-bit RNG offsets (dropout's Philox counters) as JSON-safe decimal strings, and back. */
export function encodeRngOffsets(offsets: Readonly<Record<string, bigint>>): Record<string, string> {
  return Object.fromEntries(Object.entries(offsets).map(([key, v]) => [key, v.toString()]));
}

export function decodeRngOffsets(offsets: Readonly<Record<string, string>>): Record<string, bigint> {
  return Object.fromEntries(Object.entries(offsets).map(([key, v]) => [key, BigInt(v)]));
}

// --- helpers -------------------------------------------------------------------------------------

const ARRAY_OF: Record<DType, string> = { f32: 'Float32Array', i32: 'Int32Array', f16: 'Uint16Array', bf16: 'Uint16Array', i8: 'Int8Array', u8: 'Uint8Array' };

function toWrite(t: NamedHostTensor, path: string): TensorToWrite {
  const where = `${path}: tensor '${t.name}'`;
  if (!(t.dtype in ARRAY_OF)) throw new CheckpointError(`${where}: unknown dtype ${JSON.stringify(t.dtype)}`);
  if (t.data?.constructor?.name !== ARRAY_OF[t.dtype]) {
    throw new CheckpointError(`${where}: dtype ${t.dtype} is stored in a ${ARRAY_OF[t.dtype]}, got ${t.data?.constructor?.name ?? typeof t.data}`);
  }
  const numel = t.shape.reduce((a, b) => a * b, 1);
  if (!t.shape.every((d) => Number.isSafeInteger(d) && d >= 0) || numel !== t.data.length) {
    throw new CheckpointError(`${where}: shape [${t.shape.join(', ')}] holds ${numel} elements but the array has ${t.data.length}`);
  }
  return { name: t.name, dtype: safetensorsDType(t.dtype), shape: t.shape, bytes: new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength) };
}

function optimizerTensors(state: OptimizerState, path: string): TensorToWrite[] {
  const entries: [string, Float32Array | undefined][] = [['m', state.m], ['v', state.v], ['master', state.master]];
  const numel = state.m?.length;
  return entries.filter(([, data]) => data !== undefined).map(([name, data]) => {
    if (!(data instanceof Float32Array)) throw new CheckpointError(`${path}: optimizer state '${name}' must be a Float32Array`);
    if (data.length !== numel) throw new CheckpointError(`${path}: optimizer state '${name}' has ${data.length} elements but 'm' has ${numel}; all cover the same workspace`);
    return toWrite({ name, dtype: 'f32', shape: [numel], data }, path);
  });
}

/** Reads exactly the expected tensors from `file`, refusing missing, extra or mismatched ones. */
function readTensors(file: string, expected: readonly TensorExpectation[]): NamedHostTensor[] {
  const reader = openReader(file);
  try {
    const wanted = new Set(expected.map((e) => e.name));
    const extra = reader.tensors.map((t) => t.name).filter((name) => !wanted.has(name));
    if (extra.length > 0) {
      throw new CheckpointError(`${file}: holds ${extra.length} tensor(s) the model does not have: ${extra.slice(0, 5).map((n) => `'${n}'`).join(', ')}${extra.length > 5 ? ', …' : ''} (a checkpoint of another model?)`);
    }
    return expected.map((e) => {
      if (!reader.has(e.name)) throw new CheckpointError(`${file}: tensor '${e.name}' is missing`);
      const info = reader.info(e.name);
      const dtype = safetensorsDType(e.dtype);
      if (info.dtype !== dtype) throw new CheckpointError(`${file}: tensor '${e.name}' is ${info.dtype} but ${dtype} is expected`);
      if (info.shape.length !== e.shape.length || info.shape.some((d, i) => d !== e.shape[i])) {
        throw new CheckpointError(`${file}: tensor '${e.name}' has shape [${info.shape.join(', ')}] but [${e.shape.join(', ')}] is expected`);
      }
      const bytes = reader.read(e.name).bytes; // a fresh, exactly sized buffer: typed views need no copy
      const n = bytes.byteLength / SAFETENSORS_DTYPES[dtype];
      const data: HostArray = e.dtype === 'f32' ? new Float32Array(bytes.buffer, 0, n)
        : e.dtype === 'i32' ? new Int32Array(bytes.buffer, 0, n)
          : e.dtype === 'i8' ? new Int8Array(bytes.buffer, 0, n)
            : e.dtype === 'u8' ? bytes
              : new Uint16Array(bytes.buffer, 0, n);
      return { name: e.name, dtype: e.dtype, shape: [...info.shape], data };
    });
  } finally {
    reader.close();
  }
}

function openReader(file: string): SafetensorsReader {
  if (!existsSync(file)) throw new CheckpointError(`${file}: missing`);
  return SafetensorsReader.open(file);
}

function readTrainerState(file: string): TrainerState {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new CheckpointError(`${file}: ${code === 'ENOENT' ? 'missing' : `not readable JSON (${(error as Error).message})`}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new CheckpointError(`${file}: must hold a JSON object`);
  const { format, version, ...state } = value as Record<string, unknown>;
  if (format !== 'fuseformer-checkpoint') throw new CheckpointError(`${file}: "format" is ${JSON.stringify(format)}, expected "fuseformer-checkpoint"`);
  if (version !== CHECKPOINT_FORMAT_VERSION) throw new CheckpointError(`${file}: checkpoint format version ${JSON.stringify(version)} is not supported (this fuseformer reads version ${CHECKPOINT_FORMAT_VERSION})`);
  checkTrainerState(state, file);
  return state as unknown as TrainerState;
}

function checkTrainerState(state: Record<string, unknown>, file: string): void {
  const fail = (message: string): never => { throw new CheckpointError(`${file}: ${message}`); };
  if (!Number.isSafeInteger(state['step']) || (state['step'] as number) < 0) fail(`"step" must be an integer >= 0, got ${describe(state['step'])}`);
  if (state['lossScaler'] !== undefined) {
    try {
      restoreLossScaler(state['lossScaler'] as LossScalerState, '"lossScaler"');
    } catch (error) {
      fail((error as Error).message);
    }
  }
  const offsets = state['rngOffsets'];
  if (offsets !== undefined) {
    if (typeof offsets !== 'object' || offsets === null || Array.isArray(offsets)) fail('"rngOffsets" must be an object of decimal strings');
    for (const [key, v] of Object.entries(offsets as Record<string, unknown>)) {
      if (typeof v !== 'string' || !/^\d+$/.test(v)) fail(`"rngOffsets.${key}" must be a decimal string (a 64-bit offset; encodeRngOffsets makes them), got ${describe(v)}`);
    }
  }
  if (state['data'] !== undefined && (typeof state['data'] !== 'object' || state['data'] === null)) fail('"data" must be the data loader\'s state object');
}

/**
 * Flushes a file or directory to disk (a directory's fsync makes the renames in it durable). Best
 * effort for directories: some platforms (Windows) cannot open one.
 */
function fsyncFile(path: string): void {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (error) {
    if (isDirectory(path)) return;
    throw error;
  }
  try {
    fsyncSync(fd);
  } catch (error) {
    if (!isDirectory(path)) throw error;
  } finally {
    closeSync(fd);
  }
}

function describe(value: unknown): string {
  return typeof value === 'bigint' ? `the BigInt ${value}n` : JSON.stringify(value) ?? String(value);
}

function processIsAlive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0); // signal 0: only checks that the process exists
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'; // exists, owned by someone else
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
