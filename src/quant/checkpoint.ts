// Quantized GPT-2 and Llama-family checkpoints: our own layout (written and read), and the two INT4
// layouts published on the Hugging Face hub (read): GPTQ and AWQ (weights.ts has their bit layouts).
// The quantizable modules are a family's linear layers under their HF names (quantizableModules):
// GPT-2's attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj; Llama's self_attn.{q,k,v,o}_proj and
// mlp.{gate,up,down}_proj — one module each, as GPTQ / AWQ checkpoints of Llama models store them.
//
// Our directory (written whole or not at all: into a temporary directory, fsynced, renamed into place):
//   model.safetensors   every float parameter under its HF name (F32 by default), and per quantized module
//                       <prefix>.qweight  I32 [out, in/8]   INT4, nibble k%8 of word k/8, low nibble first
//                       <prefix>.scales   F16 [out, in/G]   INT4 group scales
//                       <prefix>.qzeros   U8  [out, in/G]   INT4 zero points       w = scale·(q − zero)
//                       <prefix>.input_order I32 [in]      INT4 of act-order GPTQ only: column j multiplies
//                                                            input channel input_order[j]
//                     or <prefix>.qweight  I8  [out, in]    INT8
//                       <prefix>.scales   F32 [out]         INT8 per-channel scales w = scale·q
//                       (the module's <prefix>.bias stays a float parameter)
//                       header metadata: format "fuseformer-quant", version, method, bits, group_size,
//                       smooth_alpha, modules (a JSON list of the quantized prefixes)
//   config.json         the model's config with "quantization_config": {"quant_method": "fuseformer", …}
//   tokenizer.json, tokenizer_config.json, special_tokens_map.json, chat_template.jinja / .json,
//   generation_config.json
//                       copied from the source model directory where it has them (the tokenizer, the
//                       chat template `serve` renders, the generation defaults and stop tokens)
//
// Reading a Hugging Face GPTQ or AWQ directory: config.json's quantization_config says which
// ("quant_method": "gptq" with "checkpoint_format" gptq | gptq_v2, or "awq" with "version": "gemm"),
// its bits must be 4; every module with a .qweight is converted to our layout losslessly; the other
// tensors load as float parameters (names with or without the "transformer." / "model." prefix), so a
// module left unquantized (AWQ's modules_to_not_convert) keeps its float weight.

import { copyFileSync, existsSync, fsyncSync, mkdirSync, openSync, closeSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { encodeFloats } from '../dtype.js';
import type { FloatDType } from '../dtype.js';
import { ArgumentError, FuseformerError } from '../errors.js';
import { temporaryPathFor, writeFileAtomically } from '../io/atomic-write.js';
import { checkReplaceableDirectory } from '../io/output-dir.js';
import type { SafetensorsDType, TensorToWrite } from '../io/safetensors.js';
import { writeSafetensors } from '../io/safetensors.js';
import { openWeightFile } from '../io/weight-file.js';
import type { WeightFile } from '../io/weight-file.js';
import { decoderArchitecture } from '../infer/architecture.js';
import { gpt2ParameterSpecs } from '../models/gpt2-model.js';
import { shardFiles } from '../models/hf-weights.js';
import type { ModelConfig } from '../models/registry.js';
import { modelConfigFromJson, toHfJson } from '../models/registry.js';
import { formatShape } from '../tensor.js';
import type { HostParams, QuantizationInfo, QuantizedModel } from './model.js';
import type { GptqCheckpointFormat, QuantizedHostWeight } from './weights.js';
import { checkInt4HostWeight, fromAwq, fromGptq } from './weights.js';

export class QuantCheckpointError extends FuseformerError {}

export const QUANT_FORMAT = 'fuseformer-quant';
/** Files of a model directory besides its weights and config that a quantized copy keeps. */
export const COMPANION_FILES = ['tokenizer.json', 'tokenizer.model', 'tokenizer_config.json', 'special_tokens_map.json', 'chat_template.jinja', 'chat_template.json', 'generation_config.json'] as const;
export const QUANT_FORMAT_VERSION = 1;
const MODEL_FILE = 'model.safetensors';

export interface SaveQuantizedOptions {
  /** The model's config (GPT-2 or Llama family), written to config.json with its quantization_config. */
  readonly config: ModelConfig;
  /** The source model directory: its tokenizer, chat template and generation defaults are copied (COMPANION_FILES). */
  readonly copyFrom?: string;
  /** The float parameters' dtype in the file (default f32). */
  readonly floatDType?: FloatDType;
  /** Where the weights came from (recorded in the metadata). */
  readonly source?: string;
}

const FLOAT_TAG: Record<FloatDType, SafetensorsDType> = { f32: 'F32', f16: 'F16', bf16: 'BF16' };

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** The tensors of a quantized model in our layout (see the file comment). */
export function quantizedTensors(q: QuantizedModel, floatDType: FloatDType = 'f32'): TensorToWrite[] {
  const tensors: TensorToWrite[] = [];
  for (const [name, t] of [...q.floats].sort(([a], [b]) => a.localeCompare(b))) {
    tensors.push({ name, dtype: FLOAT_TAG[floatDType], shape: t.shape, bytes: encodeFloats(t.data, floatDType) });
  }
  for (const [prefix, w] of [...q.modules].sort(([a], [b]) => a.localeCompare(b))) {
    const { inFeatures: K, outFeatures: N } = w;
    if (w.kind === 'int4') {
      const G = w.groupSize;
      tensors.push(
        { name: `${prefix}.qweight`, dtype: 'I32', shape: [N, K / 8], bytes: bytesOf(w.qweight) },
        { name: `${prefix}.scales`, dtype: 'F16', shape: [N, K / G], bytes: encodeFloats(w.scales, 'f16') },
        { name: `${prefix}.qzeros`, dtype: 'U8', shape: [N, K / G], bytes: bytesOf(w.zeros) },
        ...(w.inputOrder ? [{ name: `${prefix}.input_order`, dtype: 'I32' as const, shape: [K], bytes: bytesOf(w.inputOrder) }] : []),
      );
    } else {
      tensors.push(
        { name: `${prefix}.qweight`, dtype: 'I8', shape: [N, K], bytes: bytesOf(w.qweight) },
        { name: `${prefix}.scales`, dtype: 'F32', shape: [N], bytes: bytesOf(w.scales) },
      );
    }
  }
  return tensors;
}

function infoMetadata(info: QuantizationInfo, modules: readonly string[], source: string | undefined): Record<string, string> {
  return {
    format: QUANT_FORMAT, version: String(QUANT_FORMAT_VERSION), method: info.method, bits: String(info.bits),
    ...(info.groupSize !== undefined ? { group_size: String(info.groupSize) } : {}),
    ...(info.smoothAlpha !== undefined ? { smooth_alpha: String(info.smoothAlpha) } : {}),
    modules: JSON.stringify(modules), ...(source ? { source } : {}),
  };
}

function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try { fsyncSync(fd); } finally { closeSync(fd); }
}

/** A directory `saveQuantizedModel` wrote (its config.json's quantization_config says so). */
export function isFuseformerQuantizedDirectory(dir: string): boolean {
  try {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { quantization_config?: { quant_method?: unknown } };
    return config.quantization_config?.quant_method === 'fuseformer';
  } catch {
    return false;
  }
}

/**
 * Checks that `dir` may be written by saveQuantizedModel: new, empty or an earlier quantized output, and
 * neither the source model nor a directory holding it (the swap deletes what `dir` held).
 */
export function checkQuantizedOutput(dir: string, source: string | undefined, option = '--out'): void {
  checkReplaceableDirectory(dir, {
    option, inputs: source !== undefined ? [{ path: source, option: '--model' }] : [],
    replaceable: isFuseformerQuantizedDirectory, replaceableWhat: 'a directory fuseformer quantize wrote',
  });
}

/** Writes the quantized model as directory `dir` (replacing an earlier quantized output there), atomically. */
export function saveQuantizedModel(dir: string, q: QuantizedModel, options: SaveQuantizedOptions): void {
  checkQuantizedOutput(dir, options.copyFrom, 'quantized model directory');
  const tensors = quantizedTensors(q, options.floatDType ?? 'f32');
  const modules = [...q.modules.keys()].sort();
  const config = {
    ...toHfJson(options.config),
    quantization_config: {
      quant_method: 'fuseformer', format_version: QUANT_FORMAT_VERSION, method: q.info.method, bits: q.info.bits,
      ...(q.info.groupSize !== undefined ? { group_size: q.info.groupSize } : {}),
      ...(q.info.smoothAlpha !== undefined ? { smooth_alpha: q.info.smoothAlpha } : {}),
      ...(q.info.actOrder ? { desc_act: true } : {}),
    },
  };
  mkdirSync(dirname(dir), { recursive: true });
  const temporary = temporaryPathFor(dir);
  try {
    mkdirSync(temporary);
    writeSafetensors(join(temporary, MODEL_FILE), tensors, infoMetadata(q.info, modules, options.source));
    writeFileAtomically(join(temporary, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
    for (const file of options.copyFrom ? COMPANION_FILES : []) {
      const from = join(options.copyFrom!, file);
      if (!existsSync(from)) continue;
      copyFileSync(from, join(temporary, file));
      fsyncPath(join(temporary, file));
    }
    fsyncPath(temporary);
    if (existsSync(dir)) {
      const old = `${dir}.old-${basename(temporary).split('.tmp-')[1]}`;
      renameSync(dir, old);
      renameSync(temporary, dir);
      rmSync(old, { recursive: true, force: true });
    } else {
      renameSync(temporary, dir);
    }
    fsyncPath(dirname(dir));
  } catch (error) {
    rmSync(temporary, { recursive: true, force: true });
    throw error;
  }
}

// --- reading --------------------------------------------------------------------------------------

export interface LoadedQuantizedModel {
  readonly model: ModelConfig;
  readonly quantized: QuantizedModel;
  /** Whose layout the directory had. */
  readonly layout: 'fuseformer' | 'gptq' | 'awq';
}

type Json = Record<string, unknown>;

function readConfig(dir: string): Json {
  const path = join(dir, 'config.json');
  if (!existsSync(path)) throw new QuantCheckpointError(`${dir}: no config.json (not a model directory)`);
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as unknown;
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not an object');
    return parsed as Json;
  } catch (error) {
    throw new QuantCheckpointError(`${path}: not a JSON object (${(error as Error).message})`);
  }
}


/** Every tensor of the directory's files by name (read lazily through the open readers). */
class TensorSource {
  private readonly readers: WeightFile[];
  private readonly byName = new Map<string, WeightFile>();

  constructor(readonly dir: string) {
    this.readers = shardFiles(dir).map((f) => openWeightFile(f));
    for (const r of this.readers) for (const t of r.tensors) this.byName.set(t.name, r);
  }

  get names(): string[] { return [...this.byName.keys()]; }
  get metadata(): Readonly<Record<string, string>> { return this.readers[0]!.metadata; }
  has(name: string): boolean { return this.byName.has(name); }

  /** The file holding tensor `name`, once its dtype and shape are what they must be. */
  private checked(name: string, dtypes: readonly SafetensorsDType[], shape: readonly number[]): WeightFile {
    const reader = this.byName.get(name);
    if (!reader) throw new QuantCheckpointError(`${this.dir}: tensor '${name}' is missing`);
    const info = reader.info(name);
    if (!dtypes.includes(info.dtype)) throw new QuantCheckpointError(`${reader.path}: tensor '${name}' is ${info.dtype}, expected ${dtypes.join(' or ')}`);
    if (formatShape(info.shape) !== formatShape(shape)) throw new QuantCheckpointError(`${reader.path}: tensor '${name}' has shape ${formatShape(info.shape)}, expected ${formatShape(shape)}`);
    return reader;
  }

  read(name: string, dtypes: readonly SafetensorsDType[], shape: readonly number[]): { dtype: SafetensorsDType; bytes: Uint8Array } {
    const data = this.checked(name, dtypes, shape).read(name);
    return { dtype: data.dtype, bytes: data.bytes };
  }

  floats(name: string, shape: readonly number[]): Float32Array {
    return this.checked(name, ['F32', 'F16', 'BF16'], shape).readFloats(name);
  }

  int32s(name: string, shape: readonly number[]): Int32Array {
    return new Int32Array(this.read(name, ['I32'], shape).bytes.slice().buffer);
  }

  close(): void { for (const r of this.readers) r.close(); }
}

/** A GPT-2 or Llama-family model's quantizable linear layers: HF module prefix → [K inputs, N outputs], in layer order. */
export function quantizableModules(model: ModelConfig): Map<string, [number, number]> {
  const modules = new Map<string, [number, number]>();
  if (model.family === 'gpt2') {
    const { hidden: C, ffn: F } = model.config;
    for (let i = 0; i < model.config.layers; i++) {
      const h = `transformer.h.${i}`;
      modules.set(`${h}.attn.c_attn`, [C, 3 * C]);
      modules.set(`${h}.attn.c_proj`, [C, C]);
      modules.set(`${h}.mlp.c_fc`, [C, F]);
      modules.set(`${h}.mlp.c_proj`, [F, C]);
    }
    return modules;
  }
  if (model.family !== 'llama') throw new QuantCheckpointError(`quantized ${model.family} models are not supported (GPT-2 and Llama-family decoders are)`);
  const { hidden: H, ffn: F, heads, kvHeads, headDim: d } = model.config;
  for (let i = 0; i < model.config.layers; i++) {
    const a = `model.layers.${i}.self_attn`, m = `model.layers.${i}.mlp`;
    if (model.config.variant === 'phi3') {
      // Phi-3: q/k/v and gate/up fused, as its files store them.
      modules.set(`${a}.qkv_proj`, [H, (heads + 2 * kvHeads) * d]);
      modules.set(`${a}.o_proj`, [heads * d, H]);
      modules.set(`${m}.gate_up_proj`, [H, 2 * F]);
      modules.set(`${m}.down_proj`, [F, H]);
      continue;
    }
    modules.set(`${a}.q_proj`, [H, heads * d]);
    modules.set(`${a}.k_proj`, [H, kvHeads * d]);
    modules.set(`${a}.v_proj`, [H, kvHeads * d]);
    modules.set(`${a}.o_proj`, [heads * d, H]);
    modules.set(`${m}.gate_proj`, [H, F]);
    modules.set(`${m}.up_proj`, [H, F]);
    modules.set(`${m}.down_proj`, [F, H]);
  }
  return modules;
}

/** Every float parameter of the model in its checkpoint shape, and the prefix files may leave off. */
function floatParameterSpecs(model: ModelConfig): { specs: { name: string; shape: readonly number[] }[]; optionalPrefix: string } {
  if (model.family === 'gpt2') return { specs: gpt2ParameterSpecs(model.config).map((s) => ({ name: s.name, shape: s.fileShape ?? s.shape })), optionalPrefix: 'transformer.' };
  const arch = decoderArchitecture(model);
  return { specs: arch.weights.map((w) => ({ name: w.name, shape: w.fileShape ?? w.shape })), optionalPrefix: arch.optionalPrefix };
}

function integerField(q: Json, key: string, where: string): number {
  const v = q[key];
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new QuantCheckpointError(`${where}: quantization_config.${key} must be an integer, ${v === undefined ? 'and it is missing' : `got ${JSON.stringify(v)}`}`);
  return v;
}

/** An INT4 group size the kernels take (a positive multiple of 32) that divides the inputs of every quantized layer. */
function checkGroupSize(G: number, key: string, shapes: ReadonlyMap<string, readonly [number, number]>, where: string): void {
  if (!(G >= 32 && G % 32 === 0)) throw new QuantCheckpointError(`${where}: quantization_config.${key} is ${G}; INT4 groups must be a positive multiple of 32`);
  for (const [module, [K]] of shapes) {
    if (K % G !== 0) throw new QuantCheckpointError(`${where}: quantization_config.${key} ${G} does not divide the ${K} inputs of '${module}'`);
  }
}

/** Loads a quantized GPT-2 or Llama-family directory: ours, Hugging Face GPTQ, or Hugging Face AWQ. */
export function loadQuantizedModel(dir: string): LoadedQuantizedModel {
  const json = readConfig(dir);
  const where = join(dir, 'config.json');
  const qc = json['quantization_config'];
  if (typeof qc !== 'object' || qc === null) throw new QuantCheckpointError(`${where}: no quantization_config (not a quantized model; quantize it with \`fuseformer quantize\`)`);
  const q = qc as Json;
  const { quantization_config: _, ...modelJson } = json;
  const model = modelConfigFromJson(modelJson as Parameters<typeof modelConfigFromJson>[0], where);
  if (model.family !== 'gpt2' && model.family !== 'llama') throw new QuantCheckpointError(`${where}: a quantized ${model.family} model is not supported (GPT-2 and Llama-family decoders are)`);
  const method = String(q['quant_method']);
  const source = new TensorSource(dir);
  try {
    if (method === 'fuseformer') return { model, quantized: readOurs(source, model, q, where), layout: 'fuseformer' };
    if (method === 'gptq' || method === 'awq') return { model, quantized: readHf(source, model, q, method, where), layout: method };
    throw new QuantCheckpointError(`${where}: quant_method '${method}' is not supported (fuseformer, gptq and awq are)`);
  } finally {
    source.close();
  }
}

/** The float parameters (HF names, file shapes) except the quantized modules' weights. */
function readFloats(source: TensorSource, model: ModelConfig, quantized: ReadonlySet<string>): HostParams {
  const floats: HostParams = new Map();
  const { specs, optionalPrefix } = floatParameterSpecs(model);
  for (const { name: full, shape } of specs) {
    if (quantized.has(full.replace(/\.weight$/, ''))) continue;
    const name = [full, full.startsWith(optionalPrefix) ? full.slice(optionalPrefix.length) : full].find((n) => source.has(n));
    if (!name) throw new QuantCheckpointError(`${source.dir}: parameter '${full}' ${formatShape(shape)} is missing`);
    floats.set(full, { shape, data: source.floats(name, shape) });
  }
  return floats;
}

function readOurs(source: TensorSource, model: ModelConfig, q: Json, where: string): QuantizedModel {
  const meta = source.metadata;
  if (meta['format'] !== QUANT_FORMAT) throw new QuantCheckpointError(`${source.dir}: the safetensors header's format is '${meta['format']}', expected '${QUANT_FORMAT}'`);
  if (Number(meta['version']) > QUANT_FORMAT_VERSION) throw new QuantCheckpointError(`${source.dir}: format version ${meta['version']} is newer than this fuseformer reads (${QUANT_FORMAT_VERSION})`);
  const bits = integerField(q, 'bits', where);
  if (bits !== 4 && bits !== 8) throw new QuantCheckpointError(`${where}: bits must be 4 or 8, got ${bits}`);
  const G = bits === 4 ? integerField(q, 'group_size', where) : undefined;
  if (G !== undefined) checkGroupSize(G, 'group_size', quantizableModules(model), where);
  let listed: unknown;
  try { listed = JSON.parse(meta['modules'] ?? '[]'); } catch { listed = undefined; }
  if (!Array.isArray(listed)) throw new QuantCheckpointError(`${source.dir}: the header's "modules" is not a JSON list`);
  const shapes = quantizableModules(model);
  const modules = new Map<string, QuantizedHostWeight>();
  for (const prefix of listed as unknown[]) {
    const dims = shapes.get(String(prefix));
    if (!dims) throw new QuantCheckpointError(`${source.dir}: quantized module '${String(prefix)}' is not a linear layer of this ${model.family === 'gpt2' ? 'GPT-2' : 'Llama'} model`);
    const [K, N] = dims, p = String(prefix);
    if (bits === 4) {
      const w = {
        kind: 'int4' as const, inFeatures: K, outFeatures: N, groupSize: G!,
        qweight: source.int32s(`${p}.qweight`, [N, K / 8]),
        scales: source.floats(`${p}.scales`, [N, K / G!]),
        zeros: new Uint8Array(source.read(`${p}.qzeros`, ['U8'], [N, K / G!]).bytes),
        ...(source.has(`${p}.input_order`) ? { inputOrder: source.int32s(`${p}.input_order`, [K]) } : {}),
      };
      checkInt4HostWeight(w, `${source.dir}: ${p}`);
      modules.set(p, w);
    } else {
      modules.set(p, {
        kind: 'int8', inFeatures: K, outFeatures: N,
        qweight: new Int8Array(source.read(`${p}.qweight`, ['I8'], [N, K]).bytes.slice().buffer),
        scales: source.floats(`${p}.scales`, [N]),
      });
    }
  }
  const info: QuantizationInfo = {
    method: String(q['method'] ?? 'unknown'), bits,
    ...(G !== undefined ? { groupSize: G } : {}),
    ...(typeof q['smooth_alpha'] === 'number' ? { smoothAlpha: q['smooth_alpha'] } : {}),
    ...(q['desc_act'] === true ? { actOrder: true } : {}),
  };
  return { info, modules, floats: readFloats(source, model, new Set(modules.keys())) };
}

function readHf(source: TensorSource, model: ModelConfig, q: Json, method: 'gptq' | 'awq', where: string): QuantizedModel {
  const bits = integerField(q, method === 'gptq' ? 'bits' : (q['w_bit'] !== undefined ? 'w_bit' : 'bits'), where);
  if (bits !== 4) throw new QuantCheckpointError(`${where}: only 4-bit ${method.toUpperCase()} checkpoints are read, this one has ${bits} bits`);
  const groupKey = method === 'awq' && q['q_group_size'] !== undefined ? 'q_group_size' : 'group_size';
  const G = integerField(q, groupKey, where);
  if (G <= 0) throw new QuantCheckpointError(`${where}: group_size ${G} is not supported (per-channel, -1, is not read; a positive multiple of 32 is)`);
  checkGroupSize(G, groupKey, quantizableModules(model), where);
  if (method === 'awq') {
    const version = String(q['version'] ?? 'gemm').toLowerCase();
    if (version !== 'gemm') throw new QuantCheckpointError(`${where}: AWQ version '${version}' is not read (only "gemm": qweight [in, out/8])`);
    if (q['zero_point'] === false) throw new QuantCheckpointError(`${where}: AWQ without zero points is not read`);
  }
  const format = String(q['checkpoint_format'] ?? 'gptq') as GptqCheckpointFormat;
  if (method === 'gptq' && format !== 'gptq' && format !== 'gptq_v2') throw new QuantCheckpointError(`${where}: GPTQ checkpoint_format '${format}' is not read (gptq or gptq_v2)`);
  const modules = new Map<string, QuantizedHostWeight>();
  const optionalPrefix = floatParameterSpecs(model).optionalPrefix;
  for (const [prefix, [K, N]] of quantizableModules(model)) {
    const name = [prefix, prefix.startsWith(optionalPrefix) ? prefix.slice(optionalPrefix.length) : prefix].find((p) => source.has(`${p}.qweight`));
    if (!name) continue;
    if (K % G !== 0) throw new QuantCheckpointError(`${source.dir}: group size ${G} does not divide the ${K} inputs of ${prefix}`);
    const what = `${source.dir}: ${name}`;
    try {
      if (method === 'gptq') {
        const gIdx = source.has(`${name}.g_idx`) ? source.int32s(`${name}.g_idx`, [K]) : undefined;
        modules.set(prefix, fromGptq({
          qweight: source.int32s(`${name}.qweight`, [K / 8, N]), qzeros: source.int32s(`${name}.qzeros`, [K / G, N / 8]),
          scales: source.floats(`${name}.scales`, [K / G, N]), ...(gIdx ? { gIdx } : {}),
        }, K, N, G, format, what));
      } else {
        modules.set(prefix, fromAwq({
          qweight: source.int32s(`${name}.qweight`, [K, N / 8]), qzeros: source.int32s(`${name}.qzeros`, [K / G, N / 8]),
          scales: source.floats(`${name}.scales`, [K / G, N]),
        }, K, N, G, what));
      }
    } catch (error) {
      if (error instanceof ArgumentError) throw new QuantCheckpointError(error.message);
      throw error;
    }
  }
  if (modules.size === 0) throw new QuantCheckpointError(`${source.dir}: quantization_config says ${method}, but no tensor ends in .qweight`);
  const actOrder = [...modules.values()].some((w) => w.kind === 'int4' && w.inputOrder !== undefined);
  return { info: { method, bits: 4, groupSize: G, ...(actOrder ? { actOrder } : {}) }, modules, floats: readFloats(source, model, new Set(modules.keys())) };
}
