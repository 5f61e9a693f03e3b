// Tool calls in a chat answer, as vLLM's --tool-call-parser finds them: the model writes each call in its
// template's syntax, and the server returns it as message.tool_calls (delta.tool_calls when streaming) with
// finish_reason "tool_calls".
//
//   hermes       Qwen2.5, Qwen3, Hermes 2/3: each call a JSON object {"name", "arguments"} between <tool_call>
//                and </tool_call>; text outside the blocks is content (whitespace between calls dropped).
//   llama3_json  Llama 3.1 / 3.2 / 3.3: the whole answer a JSON object {"name", "parameters"} (or several
//                separated by ';'), after an optional <|python_tag|>; an answer that starts otherwise is content.
//
// A call is taken only when its JSON parses and names one of the request's tools; anything else stays in the
// content as the model wrote it, so nothing is lost. Streaming, text that may still become a call (a prefix of
// <tool_call> at the end of what has arrived, an open block, a llama3_json answer that began with '{') is held
// back until it is decided; whitespace before a call is held too, so a call does not leave a stray newline.

import { randomUUID } from 'node:crypto';
import { ArgumentError } from '../errors.js';
import { alternatives, objectOf, textLiteral } from '../infer/structured/json-schema.js';
import type { GrammarNode } from '../infer/structured/json-schema.js';

export const TOOL_CALL_PARSERS = ['hermes', 'llama3_json'] as const;
export type ToolCallParser = (typeof TOOL_CALL_PARSERS)[number];

export function toolCallParserFrom(name: string): ToolCallParser {
  if (!(TOOL_CALL_PARSERS as readonly string[]).includes(name)) throw new ArgumentError(`--tool-call-parser: '${name}' is not one of ${TOOL_CALL_PARSERS.join(', ')}`);
  return name as ToolCallParser;
}

/**
 * The parser a chat template's own instructions ask for: hermes where it tells the model to write <tool_call>
 * blocks, llama3_json where it speaks of <|python_tag|> or of {"name", "parameters"} objects; undefined otherwise.
 */
export function toolCallParserOfTemplate(template: string): ToolCallParser | undefined {
  if (template.includes('<tool_call>')) return 'hermes';
  if (template.includes('<|python_tag|>') || /"parameters": dictionary of argument name and its value/.test(template)) return 'llama3_json';
  return undefined;
}

/** One call, as the API returns it: `arguments` is JSON text. */
export interface ToolCall {
  /** Its place among the answer's calls (delta.tool_calls[].index). */
  readonly index: number;
  readonly id: string;
  readonly name: string;
  readonly arguments: string;
}

/** What a piece of content turned into: content to send, and calls completed by it. */
export interface ToolPiece {
  readonly content: string;
  readonly calls: readonly ToolCall[];
}

const OPEN = '<tool_call>', CLOSE = '</tool_call>', PYTHON_TAG = '<|python_tag|>';

export class ToolCallExtractor {
  private held = '';
  /** hermes: inside a <tool_call> block; llama3_json: 'start' until the first non-space, then 'json' or 'content'. */
  private state: 'text' | 'call' | 'start' | 'json' | 'content';
  private callCount = 0;
  /** hermes: a call just ended, so the whitespace that follows it is dropped. */
  private afterCall = false;
  /** hermes: the whitespace before the open block. */
  private gap = '';

  /** `tools`: the names of the request's functions (a call to another name stays content). */
  constructor(readonly parser: ToolCallParser, private readonly tools: ReadonlySet<string>, private readonly newId: () => string = () => `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`) {
    this.state = parser === 'hermes' ? 'text' : 'start';
  }

  push(piece: string): ToolPiece {
    return this.parser === 'hermes' ? this.pushHermes(piece, false) : this.pushLlama(piece, false);
  }

  /** The end of the answer: what is held is decided (an unclosed block is a call if its JSON is complete). */
  flush(): ToolPiece {
    return this.parser === 'hermes' ? this.pushHermes('', true) : this.pushLlama('', true);
  }

  private pushHermes(piece: string, last: boolean): ToolPiece {
    let text = this.held + piece, content = '';
    const calls: ToolCall[] = [];
    this.held = '';
    for (;;) {
      if (this.state === 'text') {
        if (this.afterCall) {
          text = text.replace(/^\s+/, '');  // the whitespace between and after calls is not content
          if (text === '') break;
          this.afterCall = false;
        }
        const at = text.indexOf(OPEN);
        if (at >= 0) {
          // Nor is the whitespace before a call (kept aside: the block may turn out not to be one).
          const before = text.slice(0, at), kept = before.trimEnd();
          content += kept;
          this.gap = before.slice(kept.length);
          text = text.slice(at + OPEN.length);
          this.state = 'call';
          continue;
        }
        if (last) {
          content += text;
          break;
        }
        // Hold what may still lead into a block: trailing whitespace, and a prefix of <tool_call> at the end.
        const keep = partialTagLength(text, OPEN);
        const visible = text.slice(0, text.length - keep).trimEnd();
        content += visible;
        this.held = text.slice(visible.length);
        break;
      }
      // Inside a block.
      const end = text.indexOf(CLOSE);
      if (end < 0 && !last) {
        this.held = text;
        break;
      }
      const body = end >= 0 ? text.slice(0, end) : text;
      const call = this.callFrom(body);
      if (call) calls.push(call);
      else content += `${this.gap}${OPEN}${body}${end >= 0 ? CLOSE : ''}`;
      this.gap = '';
      text = end >= 0 ? text.slice(end + CLOSE.length) : '';
      this.state = 'text';
      this.afterCall = call !== undefined;
    }
    return { content, calls };
  }

  private pushLlama(piece: string, last: boolean): ToolPiece {
    const text = this.held + piece;
    this.held = '';
    if (this.state === 'start') {
      const trimmed = text.trimStart();
      if (trimmed === '' || (PYTHON_TAG.startsWith(trimmed) && trimmed.length < PYTHON_TAG.length)) {
        if (!last) {
          this.held = text;
          return { content: '', calls: [] };
        }
        return { content: text, calls: [] };
      }
      this.state = trimmed.startsWith('{') || trimmed.startsWith(PYTHON_TAG) ? 'json' : 'content';
    }
    if (this.state === 'content') return { content: text, calls: [] };
    if (!last) {
      this.held = text;
      return { content: '', calls: [] };
    }
    // The whole answer: one call or several separated by ';', else all of it is content.
    const objects = jsonSequence(text.trimStart().replace(PYTHON_TAG, ''));
    const calls = objects?.map((o) => this.callFrom(o, 'parameters'));
    if (!calls || calls.length === 0 || calls.some((c) => c === undefined)) return { content: text, calls: [] };
    return { content: '', calls: calls as ToolCall[] };
  }

  /** A call from a block's JSON text: {"name", "arguments"} (llama3_json: "parameters"); undefined if it is not one. */
  private callFrom(json: string, argumentsKey = 'arguments'): ToolCall | undefined {
    let parsed: unknown;
    try { parsed = JSON.parse(json); } catch { return undefined; }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return undefined;
    const o = parsed as Record<string, unknown>;
    if (typeof o['name'] !== 'string' || !this.tools.has(o['name'])) return undefined;
    const args = o[argumentsKey] ?? o['arguments'] ?? {};
    // Arguments the model wrote as a JSON string are passed on as they are, when they parse.
    let text: string;
    if (typeof args === 'string') {
      try { JSON.parse(args); } catch { return undefined; }
      text = args;
    } else if (typeof args === 'object' && args !== null && !Array.isArray(args)) text = JSON.stringify(args);
    else return undefined;
    return { index: this.callCount++, id: this.newId(), name: o['name'], arguments: text };
  }
}

/** The length of the longest end of `text` that is a proper prefix of `tag`. */
function partialTagLength(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) if (text.endsWith(tag.slice(0, n))) return n;
  return 0;
}

/**
 * JSON objects separated by ';' (and whitespace), each as its text; undefined when the text is not that.
 * Top-level boundaries are found by bracket depth outside strings; each object is then parsed by the caller.
 */
function jsonSequence(text: string): string[] | undefined {
  const objects: string[] = [];
  let i = 0;
  const skipSpace = () => { while (i < text.length && /\s/.test(text[i]!)) i++; };
  for (;;) {
    skipSpace();
    if (text[i] !== '{') return undefined;
    const start = i;
    let depth = 0, inString = false;
    for (; i < text.length; i++) {
      const c = text[i]!;
      if (inString) {
        if (c === '\\') i++;
        else if (c === '"') inString = false;
      } else if (c === '"') inString = true;
      else if (c === '{' || c === '[') depth++;
      else if ((c === '}' || c === ']') && --depth === 0) { i++; break; }
    }
    if (depth !== 0) return undefined;
    objects.push(text.slice(start, i));
    skipSpace();
    if (i === text.length) return objects;
    if (text[i] !== ';') return undefined;
    i++;
  }
}

/**
 * The grammar of one call in the parser's syntax, to one of `functions` with its arguments held to that function's
 * parameters (tool_choice "required" or a named function): hermes `<tool_call>\n{"name": …, "arguments": …}\n
 * </tool_call>` as Qwen's and Hermes' templates show it, llama3_json the answer one `{"name": …, "parameters": …}`.
 */
export function forcedCallGrammar(parser: ToolCallParser, functions: readonly CallableFunction[]): GrammarNode {
  const call = callObject(parser, functions);
  return parser === 'hermes' ? { kind: 'sequence', parts: [textLiteral(`${OPEN}\n`), call, textLiteral(`\n${CLOSE}`)] } : call;
}

/** Where a hermes call begins, and the grammar of what follows it up to its end (`strictCallGrammar`). */
export const CALL_TRIGGER = OPEN;

/**
 * tool_choice "auto" with strict functions (hermes syntax): the grammar of a call after its `<tool_call>`, up to
 * `</tool_call>` (infer/structured/triggered.ts holds the text to it once the model opens a block).
 */
export function strictCallGrammar(functions: readonly CallableFunction[]): GrammarNode {
  return { kind: 'sequence', parts: [textLiteral('\n'), callObject('hermes', functions), textLiteral(`\n${CLOSE}`)] };
}

/** A function as a constrained call sees it: its name and its arguments' grammar. */
export interface CallableFunction {
  readonly name: string;
  readonly parameters: GrammarNode;
}

function callObject(parser: ToolCallParser, functions: readonly CallableFunction[]): GrammarNode {
  const argumentsKey = parser === 'hermes' ? 'arguments' : 'parameters';
  return alternatives(functions.map((f) => objectOf([['name', textLiteral(JSON.stringify(f.name))], [argumentsKey, f.parameters]])));
}
