// A sentence-transformers model directory (all-MiniLM-L6-v2, bge, e5 …): beside the BERT files,
// modules.json lists the pipeline — Transformer, then Pooling (1_Pooling/config.json), often Normalize —
// and sentence_bert_config.json the sequence length the model was trained at. `fuseformer embed` takes its
// defaults from them, so a vector equals SentenceTransformer(dir).encode(text): the pooling mode, unit
// length where a Normalize module follows, texts truncated to max_seq_length ([CLS] … [SEP] kept), and
// lower-cased first where do_lower_case says. A module fuseformer cannot run (Dense, a pooling mode other
// than mean or CLS) is refused by name rather than giving other vectors.

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ArgumentError } from '../errors.js';
import { describeValue, readConfigFile } from '../models/config-fields.js';
import type { BertPooling } from './bert.js';

export interface SentenceTransformersConfig {
  /** The directory holding the BERT files (the Transformer module's path; usually the directory itself). */
  readonly modelDir: string;
  readonly pooling: BertPooling;
  readonly normalize: boolean;
  /** sentence_bert_config.json's max_seq_length: longer texts are truncated to it (tokens, specials included). */
  readonly maxSeqLength?: number;
  readonly lowerCase: boolean;
}

const TRANSFORMER = 'sentence_transformers.models.Transformer', POOLING = 'sentence_transformers.models.Pooling', NORMALIZE = 'sentence_transformers.models.Normalize';
const POOLING_MODES: Record<string, BertPooling | undefined> = {
  pooling_mode_cls_token: 'cls', pooling_mode_mean_tokens: 'mean', pooling_mode_max_tokens: undefined, pooling_mode_mean_sqrt_len_tokens: undefined,
  pooling_mode_weightedmean_tokens: undefined, pooling_mode_lasttoken: undefined,
};

/** The directory's sentence-transformers settings, or undefined where it has no modules.json. */
export function readSentenceTransformersConfig(dir: string): SentenceTransformersConfig | undefined {
  const modulesFile = join(dir, 'modules.json');
  if (!existsSync(modulesFile)) return undefined;
  const modules = readJsonList(modulesFile);
  let modelDir: string | undefined, pooling: BertPooling | undefined, normalize = false;
  modules.forEach((module: unknown, i) => {
    const where = `${modulesFile}: module ${i}`;
    if (typeof module !== 'object' || module === null) throw new ArgumentError(`${where} is ${describeValue(module)}; expected {"type", "path"}`);
    const { type, path } = module as Record<string, unknown>;
    if (typeof type !== 'string' || typeof path !== 'string') throw new ArgumentError(`${where}: expected string fields "type" and "path"`);
    const order = [modelDir !== undefined, pooling !== undefined];
    if (type === TRANSFORMER && !order[0]) modelDir = join(dir, path);
    else if (type === POOLING && order[0] && !order[1]) pooling = poolingOf(join(dir, path, 'config.json'));
    else if (type === NORMALIZE && order[1]) normalize = true;
    else throw new ArgumentError(`${where} is ${type}${path ? ` (${path})` : ''}, which fuseformer embed does not run here (it runs Transformer → Pooling (mean or CLS) → Normalize); its vectors would differ from sentence-transformers'`);
  });
  if (modelDir === undefined || pooling === undefined) throw new ArgumentError(`${modulesFile}: expected a Transformer module then a Pooling module`);
  const bertConfig = join(modelDir, 'sentence_bert_config.json'), rootConfig = join(dir, 'sentence_bert_config.json');
  const settingsFile = existsSync(bertConfig) ? bertConfig : existsSync(rootConfig) ? rootConfig : undefined;
  const { max_seq_length: maxSeqLength, do_lower_case: lowerCase } = settingsFile ? readConfigFile(settingsFile) : {};
  if (maxSeqLength !== undefined && maxSeqLength !== null && !(Number.isSafeInteger(maxSeqLength) && (maxSeqLength as number) >= 2)) {
    throw new ArgumentError(`${settingsFile}: field "max_seq_length" is ${describeValue(maxSeqLength)}; expected an integer of at least 2`);
  }
  if (lowerCase !== undefined && typeof lowerCase !== 'boolean') throw new ArgumentError(`${settingsFile}: field "do_lower_case" is ${describeValue(lowerCase)}; expected true or false`);
  return { modelDir, pooling, normalize, ...(typeof maxSeqLength === 'number' ? { maxSeqLength } : {}), lowerCase: lowerCase ?? false };
}

/** The one pooling mode 1_Pooling/config.json turns on, where fuseformer runs it. */
function poolingOf(file: string): BertPooling {
  const config = readConfigFile(file);
  const on = Object.keys(POOLING_MODES).filter((mode) => config[mode] === true);
  if (on.length !== 1) throw new ArgumentError(`${file}: ${on.length === 0 ? 'no pooling mode is on' : `pooling modes ${on.join(', ')} are on together (their vectors concatenated)`}; fuseformer embed runs one mode, mean or CLS`);
  const pooling = POOLING_MODES[on[0]!];
  if (pooling === undefined) throw new ArgumentError(`${file}: ${on[0]} is not implemented (fuseformer embed pools by mean or CLS); its vectors would differ from sentence-transformers'`);
  return pooling;
}

/** `ids` ([CLS] … [SEP]) cut to `length` tokens keeping the last one, as a tokenizer truncating the text does. */
export function truncateTokens(ids: readonly number[], length: number): number[] {
  return ids.length <= length ? [...ids] : [...ids.slice(0, length - 1), ids[ids.length - 1]!];
}

/** modules.json: a JSON list (readConfigFile reads objects); errors name the file. */
function readJsonList(file: string): unknown[] {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new ArgumentError(`${file}: ${error instanceof SyntaxError ? 'not valid JSON' : 'cannot be read'} (${(error as Error).message})`);
  }
  if (!Array.isArray(value)) throw new ArgumentError(`${file}: expected a list of modules, got ${describeValue(value)}`);
  return value;
}
