// The messages rank 0 of a tensor-parallel server sends its followers before every engine step
// (replicated-engine.ts). A message is two broadcasts from rank 0:
//
//   header   i32 [HEADER_WORDS]: kind (0 = step, 1 = stop), payload bytes, sequence number, and the leader
//            engine's state once the payload's commands are applied: running / waiting / used-block counts
//            and a 32-bit fingerprint of the running requests' block tables
//   payload  i32 [⌈bytes / 4⌉], only when bytes > 0: the commands as UTF-8 JSON, zero-padded to whole words
//
// The header has a fixed size, so every rank knows how many elements the first broadcast carries; it tells
// the followers the size of the second. The state words let a follower check, for a few integers a step,
// that its engine is in the leader's state (ranks that diverge would otherwise issue collectives of
// different sizes and hang or compute garbage); the block tables catch a pool whose free queue went out of
// order, as soon as a block is handed out.
//
// A command carries only what the engine's scheduling and sampling read: the prompt, maxTokens, the
// resolved sampling parameters (the u64 seed as decimal text: JSON has no bigint) and the stop ids. Log
// probabilities are not sent: they are computed on the host from the logits after sampling and change
// nothing a later step does, so followers, which answer no client, skip them.

import { ArgumentError } from '../errors.js';
import type { ResolvedSampling } from '../infer/sampling.js';
import type { FinishReason } from './engine.js';

export type EngineCommand =
  | { readonly kind: 'submit'; readonly id: string; readonly prompt: readonly number[]; readonly maxTokens: number; readonly sampling: ResolvedSampling; readonly stopTokenIds: readonly number[] }
  | { readonly kind: 'cancel'; readonly id: string; readonly reason: FinishReason };

export type MessageKind = 'step' | 'stop';

export interface MessageHeader {
  readonly kind: MessageKind;
  /** UTF-8 bytes of the JSON payload (0: no commands, no second broadcast). */
  readonly payloadBytes: number;
  /** Messages the leader sent before this one (compared modulo 2³²). */
  readonly sequence: number;
  /** The leader engine's state after the payload's commands, before the step. */
  readonly running: number;
  readonly waiting: number;
  readonly blocksUsed: number;
  /** FNV-1a over the running requests' block tables and computed positions, in the scheduler's order. */
  readonly fingerprint: number;
}

export const HEADER_WORDS = 7;
const KINDS: readonly MessageKind[] = ['step', 'stop'];
const REASONS: readonly FinishReason[] = ['stop', 'length', 'cancelled'];

export function encodeHeader(h: MessageHeader): Int32Array {
  return Int32Array.of(KINDS.indexOf(h.kind), h.payloadBytes, h.sequence | 0, h.running, h.waiting, h.blocksUsed, h.fingerprint | 0);
}

export function decodeHeader(words: Int32Array): MessageHeader {
  if (words.length !== HEADER_WORDS) throw new ArgumentError(`replicated engine: a message header has ${HEADER_WORDS} words, got ${words.length}`);
  const [kind, payloadBytes, sequence, running, waiting, blocksUsed, fingerprint] = Array.from(words) as [number, number, number, number, number, number, number];
  if (KINDS[kind] === undefined) throw new ArgumentError(`replicated engine: message kind ${kind} is neither 0 (step) nor 1 (stop); the ranks are out of step`);
  if (payloadBytes < 0) throw new ArgumentError(`replicated engine: a message announces ${payloadBytes} payload bytes`);
  return { kind: KINDS[kind]!, payloadBytes, sequence, running, waiting, blocksUsed, fingerprint };
}

/** The commands as JSON in whole i32 words (zero padding) and the JSON's byte length. */
/** The header's fingerprint of a scheduler's running requests (their block tables and computed positions). */
export function blockTableFingerprint(running: readonly { readonly numComputed: number; readonly blockTable: readonly number[] }[]): number {
  let h = 0x811c9dc5;
  const mix = (x: number) => { h = Math.imul(h ^ x, 0x01000193); };
  for (const r of running) {
    mix(r.numComputed);
    for (const block of r.blockTable) mix(block);
    mix(-1);
  }
  return h | 0;
}

export function encodeCommands(commands: readonly EngineCommand[]): { words: Int32Array; bytes: number } {
  const json = JSON.stringify(commands.map((c) => c.kind === 'submit'
    ? { ...c, prompt: [...c.prompt], stopTokenIds: [...c.stopTokenIds], sampling: { ...c.sampling, seed: c.sampling.seed.toString() } }
    : c));
  const utf8 = new TextEncoder().encode(json);
  const padded = new Uint8Array(Math.ceil(utf8.length / 4) * 4);
  padded.set(utf8);
  return { words: new Int32Array(padded.buffer), bytes: utf8.length };
}

export function decodeCommands(words: Int32Array, bytes: number): EngineCommand[] {
  if (bytes > words.byteLength) throw new ArgumentError(`replicated engine: the header announces ${bytes} payload bytes but ${words.byteLength} arrived`);
  const text = new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array(words.buffer, words.byteOffset, bytes));
  const parsed: unknown = JSON.parse(text);
  if (!Array.isArray(parsed)) throw new ArgumentError('replicated engine: a message payload must be a JSON array of commands');
  return parsed.map((c: unknown, i) => decodeCommand(c, i));
}

function decodeCommand(c: unknown, index: number): EngineCommand {
  const bad = (what: string) => new ArgumentError(`replicated engine: command ${index} of the message ${what}`);
  if (typeof c !== 'object' || c === null) throw bad('is not an object');
  const o = c as Record<string, unknown>;
  if (typeof o['id'] !== 'string') throw bad('has no request id');
  const id = o['id'];
  if (o['kind'] === 'cancel') {
    const reason = o['reason'] as FinishReason;
    if (!REASONS.includes(reason)) throw bad(`has cancel reason ${JSON.stringify(o['reason'])}; expected one of ${REASONS.join(', ')}`);
    return { kind: 'cancel', id, reason };
  }
  if (o['kind'] !== 'submit') throw bad(`has kind ${JSON.stringify(o['kind'])}; expected submit or cancel`);
  const integers = (v: unknown) => Array.isArray(v) && v.every((x) => Number.isSafeInteger(x));
  if (!integers(o['prompt'])) throw bad('has a prompt that is not an array of integers');
  if (!integers(o['stopTokenIds'])) throw bad('has stop ids that are not an array of integers');
  if (!Number.isSafeInteger(o['maxTokens'])) throw bad('has no integer maxTokens');
  const s = o['sampling'] as Record<string, unknown> | null;
  if (typeof s !== 'object' || s === null || typeof s['seed'] !== 'string' || !/^\d+$/.test(s['seed'])) throw bad('has no sampling parameters with a decimal seed');
  for (const k of ['temperature', 'topK', 'topP', 'repetitionPenalty']) if (typeof s[k] !== 'number') throw bad(`has sampling.${k} that is not a number`);
  return {
    kind: 'submit', id, prompt: o['prompt'] as number[], maxTokens: o['maxTokens'] as number, stopTokenIds: o['stopTokenIds'] as number[],
    sampling: { temperature: s['temperature'] as number, topK: s['topK'] as number, topP: s['topP'] as number, repetitionPenalty: s['repetitionPenalty'] as number, seed: BigInt(s['seed']) },
  };
}
