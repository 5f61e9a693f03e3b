// A sentence-transformers model directory (all-MiniLM-L6-v2, bge, e5, LaBSE …): beside the encoder's files,
// modules.json lists the pipeline — Transformer, then Pooling (1_Pooling/config.json), then any Dense layers
// (2_Dense: a linear layer and its activation), often Normalize — and sentence_bert_config.json the sequence
// length the model was trained at. `fuseformer embed` takes its defaults from them, so a vector equals
// SentenceTransformer(dir).encode(text): the pooling mode, the Dense layers, unit length where a Normalize
// module follows, texts truncated to max_seq_length ([CLS] … [SEP] kept), and lower-cased first where
// do_lower_case says. Both layouts are read: sentence-transformers ≤ 5 (types sentence_transformers.models.X,
// pooling_mode_*_tokens flags, max_seq_length in sentence_bert_config.json) and 6 (types
// sentence_transformers.….X, "pooling_mode": "mean", the length as tokenizer_config.json's model_max_length).
// A module fuseformer cannot run (a pooling mode other than mean or CLS, a Dense activation other than tanh or
// identity) is refused by name rather than giving other vectors.

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ArgumentError } from '../errors.js';
import { shardFiles, withTensor } from '../models/hf-weights.js';
import { describeValue, readConfigFile } from '../models/config-fields.js';
import { formatShape } from '../tensor.js';
import type { Pooling } from './pooling.js';

export interface SentenceTransformersConfig {
  /** The directory holding the BERT files (the Transformer module's path; usually the directory itself). */
  readonly modelDir: string;
  readonly pooling: Pooling;
  readonly normalize: boolean;
  /** sentence_bert_config.json's max_seq_length: longer texts are truncated to it (tokens, specials included). */
  readonly maxSeqLength?: number;
  readonly lowerCase: boolean;
  /** The Dense modules between Pooling and Normalize, in order. */
  readonly dense: readonly DenseModule[];
  /**
   * config_sentence_transformers.json's prompts by name (Qwen3-Embedding's "query": "Instruct: …\nQuery:"):
   * encode(texts, prompt_name=name) prefixes each text with the prompt.
   */
  readonly prompts: Readonly<Record<string, string>>;
  /** Its default_prompt_name: the prompt every text gets unless another is asked for. */
  readonly defaultPromptName?: string;
}

/** A Dense module: y = activation(x·Wᵀ + b), W [out, in]. */
export interface DenseModule {
  readonly source: string;
  readonly inFeatures: number;
  readonly outFeatures: number;
  /** [out, in], row-major. */
  readonly weight: Float32Array;
  readonly bias?: Float32Array;
  readonly activation: 'tanh' | 'identity';
}

/** A module's class by the last part of its type: sentence_transformers.models.Pooling (≤ 5), sentence_transformers.….pooling.Pooling (6). */
function moduleKind(type: string): 'Transformer' | 'Pooling' | 'Dense' | 'Normalize' | undefined {
  const match = /^sentence_transformers\.(?:[A-Za-z_]+\.)*(Transformer|Pooling|Dense|Normalize)$/.exec(type);
  return match ? (match[1] as 'Transformer' | 'Pooling' | 'Dense' | 'Normalize') : undefined;
}
const POOLING_MODES: Record<string, Pooling | undefined> = {
  pooling_mode_cls_token: 'cls', pooling_mode_mean_tokens: 'mean', pooling_mode_max_tokens: undefined, pooling_mode_mean_sqrt_len_tokens: undefined,
  pooling_mode_weightedmean_tokens: undefined, pooling_mode_lasttoken: 'last',
};
/** sentence-transformers 6's pooling_mode names, by what fuseformer runs. */
const POOLING_MODE_NAMES: Record<string, Pooling | undefined> = { cls: 'cls', mean: 'mean', max: undefined, mean_sqrt_len_tokens: undefined, weightedmean: undefined, lasttoken: 'last' };
const DENSE_ACTIVATIONS: Record<string, 'tanh' | 'identity'> = {
  'torch.nn.modules.activation.Tanh': 'tanh', 'torch.nn.modules.linear.Identity': 'identity',
};
/** Tokenizers without a length limit say model_max_length = VERY_LARGE_INTEGER (1e30); a real one is far below this. */
const REAL_LENGTH_LIMIT = 1e9;

/** The directory's sentence-transformers settings, or undefined where it has no modules.json. */
export function readSentenceTransformersConfig(dir: string): SentenceTransformersConfig | undefined {
  const modulesFile = join(dir, 'modules.json');
  if (!existsSync(modulesFile)) return undefined;
  if (isCrossEncoderModules(dir)) throw new ArgumentError(`${dir}: a sentence-transformers CrossEncoder (a reranker), not a SentenceTransformer: \`fuseformer rerank\` scores pairs with it, \`fuseformer serve\` serves it as /v1/rerank`);
  const modules = readJsonList(modulesFile);
  let modelDir: string | undefined, pooling: Pooling | undefined, width: number | undefined, normalize = false;
  const dense: DenseModule[] = [];
  modules.forEach((module: unknown, i) => {
    const where = `${modulesFile}: module ${i}`;
    if (typeof module !== 'object' || module === null) throw new ArgumentError(`${where} is ${describeValue(module)}; expected {"type", "path"}`);
    const { type, path } = module as Record<string, unknown>;
    if (typeof type !== 'string' || typeof path !== 'string') throw new ArgumentError(`${where}: expected string fields "type" and "path"`);
    const kind = moduleKind(type);
    if (kind === 'Transformer' && modelDir === undefined) {
      modelDir = join(dir, path);
    } else if (kind === 'Pooling' && modelDir !== undefined && pooling === undefined) {
      pooling = poolingOf(join(dir, path, 'config.json'));
    } else if (kind === 'Dense' && pooling !== undefined && !normalize) {
      const layer = denseOf(join(dir, path), width);
      dense.push(layer);
      width = layer.outFeatures;
    } else if (kind === 'Normalize' && pooling !== undefined && !normalize) {
      normalize = true;
    } else {
      throw new ArgumentError(`${where} is ${type}${path ? ` (${path})` : ''}, which fuseformer embed does not run here (it runs Transformer → Pooling (mean, CLS or last token) → Dense … → Normalize); its vectors would differ from sentence-transformers'`);
    }
  });
  if (modelDir === undefined || pooling === undefined) throw new ArgumentError(`${modulesFile}: expected a Transformer module then a Pooling module`);
  const bertConfig = join(modelDir, 'sentence_bert_config.json'), rootConfig = join(dir, 'sentence_bert_config.json');
  const settingsFile = existsSync(bertConfig) ? bertConfig : existsSync(rootConfig) ? rootConfig : undefined;
  const { max_seq_length: maxSeqLength, do_lower_case: lowerCase } = settingsFile ? readConfigFile(settingsFile) : {};
  if (maxSeqLength !== undefined && maxSeqLength !== null && !(Number.isSafeInteger(maxSeqLength) && (maxSeqLength as number) >= 2)) {
    throw new ArgumentError(`${settingsFile}: field "max_seq_length" is ${describeValue(maxSeqLength)}; expected an integer of at least 2`);
  }
  if (lowerCase !== undefined && typeof lowerCase !== 'boolean') throw new ArgumentError(`${settingsFile}: field "do_lower_case" is ${describeValue(lowerCase)}; expected true or false`);
  // Without max_seq_length (sentence-transformers 6 keeps the length in the tokenizer), the tokenizer's limit.
  const length = typeof maxSeqLength === 'number' ? maxSeqLength : tokenizerLengthLimit(modelDir);
  const { prompts, defaultPromptName } = promptsOf(join(dir, 'config_sentence_transformers.json'));
  return {
    modelDir, pooling, normalize, dense, ...(length !== undefined ? { maxSeqLength: length } : {}), lowerCase: lowerCase ?? false,
    prompts, ...(defaultPromptName !== undefined ? { defaultPromptName } : {}),
  };
}

/**
 * A sentence-transformers CrossEncoder directory's settings (sentence-transformers 6: modules.json lists a
 * Transformer, then for a causal LM a LogitScore module; config_sentence_transformers.json says "model_type":
 * "CrossEncoder"). Undefined where the directory has no modules.json (an HF …ForSequenceClassification directory:
 * the defaults a CrossEncoder gives it apply).
 */
export interface CrossEncoderConfig {
  /** The directory holding the model's files (the Transformer module's path). */
  readonly modelDir: string;
  /** LogitScore: the score is logit(true token) − logit(false token) at the last position (or the true token's alone). */
  readonly logitScore?: { readonly trueTokenId: number; readonly falseTokenId?: number };
  /** activation_fn: a score's sigmoid (the default for one label) or the logit itself. */
  readonly activation: 'sigmoid' | 'identity';
  /** The most tokens a pair may have (max_seq_length, else the tokenizer's model_max_length). */
  readonly maxSeqLength?: number;
  readonly prompts: Readonly<Record<string, string>>;
  readonly defaultPromptName?: string;
  /** processing_kwargs.chat_template: variables for the chat template (add_generation_prompt, …). */
  readonly chatTemplateKwargs: Readonly<Record<string, unknown>>;
}

const ACTIVATIONS: Record<string, 'sigmoid' | 'identity'> = {
  'torch.nn.modules.activation.Sigmoid': 'sigmoid', 'torch.nn.modules.linear.Identity': 'identity',
};

/** Whether modules.json describes a CrossEncoder (its config says so, or a LogitScore module follows the Transformer). */
export function isCrossEncoderModules(dir: string): boolean {
  const modulesFile = join(dir, 'modules.json');
  if (!existsSync(modulesFile)) return false;
  try {
    const settings = join(dir, 'config_sentence_transformers.json');
    if (existsSync(settings) && readConfigFile(settings)['model_type'] === 'CrossEncoder') return true;
    return readJsonList(modulesFile).some((m) => typeof m === 'object' && m !== null && typeof (m as { type?: unknown }).type === 'string' && /\.LogitScore$/.test((m as { type: string }).type));
  } catch {
    return false; // the loaders report a malformed file with their own message
  }
}

/** The directory's CrossEncoder settings, or undefined where it has no modules.json. */
export function readCrossEncoderConfig(dir: string): CrossEncoderConfig | undefined {
  const modulesFile = join(dir, 'modules.json');
  if (!existsSync(modulesFile)) return undefined;
  let modelDir: string | undefined, logitScore: CrossEncoderConfig['logitScore'];
  readJsonList(modulesFile).forEach((module: unknown, i) => {
    const where = `${modulesFile}: module ${i}`;
    if (typeof module !== 'object' || module === null) throw new ArgumentError(`${where} is ${describeValue(module)}; expected {"type", "path"}`);
    const { type, path } = module as Record<string, unknown>;
    if (typeof type !== 'string' || typeof path !== 'string') throw new ArgumentError(`${where}: expected string fields "type" and "path"`);
    if (modelDir === undefined && moduleKind(type) === 'Transformer') modelDir = join(dir, path);
    else if (modelDir !== undefined && logitScore === undefined && /^sentence_transformers\.(?:[A-Za-z_]+\.)*LogitScore$/.test(type)) logitScore = logitScoreOf(join(dir, path, 'config.json'));
    else throw new ArgumentError(`${where} is ${type}${path ? ` (${path})` : ''}, which fuseformer rerank does not run (it runs a Transformer, then LogitScore for a causal LM); its scores would differ from sentence-transformers'`);
  });
  if (modelDir === undefined) throw new ArgumentError(`${modulesFile}: expected a Transformer module`);
  const settingsFile = join(dir, 'config_sentence_transformers.json');
  const settings = existsSync(settingsFile) ? readConfigFile(settingsFile) : {};
  const activationName = settings['activation_fn'] ?? 'torch.nn.modules.activation.Sigmoid';
  const activation = typeof activationName === 'string' ? ACTIVATIONS[activationName] : undefined;
  if (activation === undefined) throw new ArgumentError(`${settingsFile}: activation_fn ${describeValue(activationName)} is not implemented (fuseformer rerank applies ${Object.keys(ACTIVATIONS).join(' or ')}); its scores would differ from sentence-transformers'`);
  const bertConfig = join(modelDir, 'sentence_bert_config.json');
  const transformerSettings = existsSync(bertConfig) ? readConfigFile(bertConfig) : {};
  const maxSeqLength = transformerSettings['max_seq_length'];
  if (maxSeqLength !== undefined && maxSeqLength !== null && !(Number.isSafeInteger(maxSeqLength) && (maxSeqLength as number) >= 2)) {
    throw new ArgumentError(`${bertConfig}: field "max_seq_length" is ${describeValue(maxSeqLength)}; expected an integer of at least 2`);
  }
  const length = typeof maxSeqLength === 'number' ? maxSeqLength : tokenizerLengthLimit(modelDir);
  const processing = transformerSettings['processing_kwargs'] ?? {};
  const chat = typeof processing === 'object' && processing !== null ? (processing as Record<string, unknown>)['chat_template'] ?? {} : undefined;
  if (typeof chat !== 'object' || chat === null || Array.isArray(chat)) throw new ArgumentError(`${bertConfig}: processing_kwargs.chat_template is ${describeValue(chat)}; expected an object of template variables`);
  const { prompts, defaultPromptName } = promptsOf(settingsFile);
  return {
    modelDir, ...(logitScore ? { logitScore } : {}), activation, ...(length !== undefined ? { maxSeqLength: length } : {}),
    prompts, ...(defaultPromptName !== undefined ? { defaultPromptName } : {}), chatTemplateKwargs: chat as Record<string, unknown>,
  };
}

/** A LogitScore module's config.json: true_token_id (and false_token_id) over the causal LM's logits. */
function logitScoreOf(file: string): NonNullable<CrossEncoderConfig['logitScore']> {
  const config = existsSync(file) ? readConfigFile(file) : {};
  const id = (field: string, value: unknown) => {
    if (!(Number.isSafeInteger(value) && (value as number) >= 0)) throw new ArgumentError(`${file}: field "${field}" is ${describeValue(value)}; expected a token id`);
    return value as number;
  };
  const input = config['module_input_name'] ?? 'causal_logits';
  if (input !== 'causal_logits') throw new ArgumentError(`${file}: module_input_name ${describeValue(input)}; fuseformer rerank scores the causal LM's logits ("causal_logits")`);
  const falseId = config['false_token_id'];
  return { trueTokenId: id('true_token_id', config['true_token_id']), ...(falseId === undefined || falseId === null ? {} : { falseTokenId: id('false_token_id', falseId) }) };
}

/**
 * The prompt `options` ask for (`who` names the caller in errors): `prompt` as given, `promptName` from `prompts`,
 * else the default name's; undefined where none applies.
 */
export function chosenPrompt(prompts: Readonly<Record<string, string>>, defaultName: string | undefined, options: { readonly prompt?: string; readonly promptName?: string }, who: string): string | undefined {
  if (options.prompt !== undefined && options.promptName !== undefined) throw new ArgumentError(`${who}: give a prompt or a prompt name, not both`);
  if (options.prompt !== undefined) {
    if (typeof options.prompt !== 'string') throw new ArgumentError(`${who}: prompt must be a string, got ${typeof options.prompt}`);
    return options.prompt;
  }
  const name = options.promptName ?? defaultName;
  if (name === undefined) return undefined;
  if (!Object.hasOwn(prompts, name)) {
    const names = Object.keys(prompts);
    throw new ArgumentError(`${who}: no prompt named '${name}'; ${names.length > 0 ? `the model's prompts are ${names.map((n) => `'${n}'`).join(', ')}` : 'the model has no named prompts (config_sentence_transformers.json)'}`);
  }
  return prompts[name]!;
}

/** config_sentence_transformers.json's "prompts" (name → text) and "default_prompt_name", checked; none without the file. */
function promptsOf(file: string): { prompts: Record<string, string>; defaultPromptName?: string } {
  if (!existsSync(file)) return { prompts: {} };
  const config = readConfigFile(file);
  const raw = config['prompts'] ?? {};
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ArgumentError(`${file}: field "prompts" is ${describeValue(raw)}; expected an object of prompt names to texts`);
  const prompts: Record<string, string> = {};
  for (const [name, text] of Object.entries(raw)) {
    if (typeof text !== 'string') throw new ArgumentError(`${file}: prompts["${name}"] is ${describeValue(text)}; expected a string`);
    prompts[name] = text;
  }
  const defaultName = config['default_prompt_name'];
  if (defaultName === undefined || defaultName === null) return { prompts };
  if (typeof defaultName !== 'string' || !Object.hasOwn(prompts, defaultName)) {
    throw new ArgumentError(`${file}: default_prompt_name ${describeValue(defaultName)} is not one of its prompts (${Object.keys(prompts).map((n) => `"${n}"`).join(', ') || 'none'})`);
  }
  return { prompts, defaultPromptName: defaultName };
}

/** tokenizer_config.json's model_max_length where it is a real limit (≥ 2, below 1e9), else undefined. */
export function tokenizerLengthLimit(modelDir: string): number | undefined {
  const file = join(modelDir, 'tokenizer_config.json');
  if (!existsSync(file)) return undefined;
  const limit = readConfigFile(file)['model_max_length'];
  return typeof limit === 'number' && Number.isSafeInteger(limit) && limit >= 2 && limit < REAL_LENGTH_LIMIT ? limit : undefined;
}

/** A Dense module's directory: config.json (in / out features, bias, activation) and its linear layer's weights. */
function denseOf(dir: string, inputWidth: number | undefined): DenseModule {
  const configFile = join(dir, 'config.json');
  const config = readConfigFile(configFile);
  const count = (field: string): number => {
    const value = config[field];
    if (!(Number.isSafeInteger(value) && (value as number) >= 1)) throw new ArgumentError(`${configFile}: field "${field}" is ${describeValue(value)}; expected a positive integer`);
    return value as number;
  };
  const inFeatures = count('in_features'), outFeatures = count('out_features');
  if (inputWidth !== undefined && inFeatures !== inputWidth) throw new ArgumentError(`${configFile}: in_features ${inFeatures}, but the module before it gives ${inputWidth} values`);
  const activationName = config['activation_function'] ?? 'torch.nn.modules.activation.Tanh';
  const activation = typeof activationName === 'string' ? DENSE_ACTIVATIONS[activationName] : undefined;
  if (activation === undefined) throw new ArgumentError(`${configFile}: activation_function ${describeValue(activationName)} is not implemented (fuseformer embed runs ${Object.keys(DENSE_ACTIVATIONS).join(' and ')}); its vectors would differ from sentence-transformers'`);
  for (const field of ['use_residual']) {
    if (config[field] === true) throw new ArgumentError(`${configFile}: "${field}": true is not implemented (fuseformer embed runs the plain Dense layer)`);
  }
  const hasBias = config['bias'] ?? true;
  if (typeof hasBias !== 'boolean') throw new ArgumentError(`${configFile}: field "bias" is ${describeValue(hasBias)}; expected true or false`);
  const read = (name: string, shape: readonly number[]): Float32Array => {
    const values = withTensor(dir, [name], (file) => {
      const info = file.info(name);
      if (formatShape(info.shape) !== formatShape(shape)) throw new ArgumentError(`${file.path}: tensor '${name}' has shape ${formatShape(info.shape)}; ${configFile} implies ${formatShape(shape)}`);
      return file.readFloats(name);
    });
    if (values === undefined) throw new ArgumentError(`${dir}: no tensor '${name}' in ${shardFiles(dir).join(', ')}`);
    return values;
  };
  const weight = read('linear.weight', [outFeatures, inFeatures]);
  return { source: dir, inFeatures, outFeatures, weight, ...(hasBias ? { bias: read('linear.bias', [outFeatures]) } : {}), activation };
}

/** The one pooling mode 1_Pooling/config.json turns on (pooling_mode_* flags, or sentence-transformers 6's pooling_mode), where fuseformer runs it. */
function poolingOf(file: string): Pooling {
  const config = readConfigFile(file);
  // Instructor-style models pool without the prompt's tokens; fuseformer pools every token of the text it encodes.
  if (config['include_prompt'] === false) throw new ArgumentError(`${file}: "include_prompt": false (pooling that leaves out the prompt's tokens) is not implemented; its vectors would differ from sentence-transformers'`);
  if (config['pooling_mode'] !== undefined) {
    const value = config['pooling_mode'];
    const modes = typeof value === 'string' ? [value] : Array.isArray(value) ? value : [];
    if (modes.length !== 1 || typeof modes[0] !== 'string' || !Object.hasOwn(POOLING_MODE_NAMES, modes[0])) {
      throw new ArgumentError(`${file}: pooling_mode ${describeValue(value)}; fuseformer embed runs one mode, "mean", "cls" or "lasttoken"${modes.length > 1 ? ' (several modes are concatenated)' : ''}`);
    }
    const pooling = POOLING_MODE_NAMES[modes[0]];
    if (pooling === undefined) throw new ArgumentError(`${file}: pooling_mode "${modes[0]}" is not implemented (fuseformer embed pools by mean, CLS or last token); its vectors would differ from sentence-transformers'`);
    return pooling;
  }
  const on = Object.keys(POOLING_MODES).filter((mode) => config[mode] === true);
  if (on.length !== 1) throw new ArgumentError(`${file}: ${on.length === 0 ? 'no pooling mode is on' : `pooling modes ${on.join(', ')} are on together (their vectors concatenated)`}; fuseformer embed runs one mode, mean, CLS or last token`);
  const pooling = POOLING_MODES[on[0]!];
  if (pooling === undefined) throw new ArgumentError(`${file}: ${on[0]} is not implemented (fuseformer embed pools by mean, CLS or last token); its vectors would differ from sentence-transformers'`);
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
