// A chat answer split into its reasoning and its content, as vLLM's --reasoning-parser does for models that
// think between <think> and </think> (Qwen3, DeepSeek-R1): the reasoning goes out as message.reasoning_content
// (delta.reasoning_content when streaming), the rest as content.
//
//   qwen3        the model opens the block itself: text that starts with <think> (after any whitespace) is
//                reasoning up to </think>; text that does not (thinking switched off, enable_thinking: false,
//                whose template closed an empty block in the prompt) is all content.
//   deepseek-r1  the template opens the block in the prompt: the text is reasoning up to </think> (a <think>
//                the model repeats at its start is dropped), then content; no </think> at all, all reasoning.
// The newlines the models put after </think> are not part of the content. Text that may still turn out to be
// a tag (a prefix of <think> or </think> at the end of what has arrived) is held back until the next piece
// decides it, as stop strings are (infer/stop-strings.ts); flush() releases it at the end.

import { ArgumentError } from '../errors.js';

export const REASONING_PARSERS = ['qwen3', 'deepseek-r1'] as const;
export type ReasoningParser = (typeof REASONING_PARSERS)[number];

const OPEN = '<think>', CLOSE = '</think>';

export function reasoningParserFrom(name: string): ReasoningParser {
  if (!(REASONING_PARSERS as readonly string[]).includes(name)) throw new ArgumentError(`--reasoning-parser: '${name}' is not one of ${REASONING_PARSERS.join(', ')}`);
  return name as ReasoningParser;
}

/** Pieces of text to send: what is reasoning and what is content (either may be empty). */
export interface SplitPiece {
  readonly reasoning: string;
  readonly content: string;
}

type State = 'start' | 'reasoning' | 'after' | 'content';

export class ReasoningSplitter {
  private state: State = 'start';
  private held = '';

  constructor(readonly parser: ReasoningParser) {}

  push(piece: string): SplitPiece {
    let text = this.held + piece, reasoning = '', content = '';
    this.held = '';
    for (;;) {
      if (this.state === 'start') {
        const trimmed = text.trimStart();
        if (trimmed === '' || (OPEN.startsWith(trimmed) && trimmed.length < OPEN.length)) {
          this.held = text;  // whitespace, or what may still become <think>: wait
          break;
        }
        if (trimmed.startsWith(OPEN)) {
          text = trimmed.slice(OPEN.length);
          this.state = 'reasoning';
        } else {
          this.state = this.parser === 'qwen3' ? 'content' : 'reasoning';
        }
        continue;
      }
      if (this.state === 'reasoning') {
        const at = text.indexOf(CLOSE);
        if (at >= 0) {
          reasoning += text.slice(0, at);
          text = text.slice(at + CLOSE.length);
          this.state = 'after';
          continue;
        }
        const keep = partialTagLength(text, CLOSE);
        reasoning += text.slice(0, text.length - keep);
        this.held = text.slice(text.length - keep);
        break;
      }
      if (this.state === 'after') {
        // The newlines between </think> and the answer.
        const answer = text.replace(/^\n+/, '');
        if (answer === '') break;
        text = answer;
        this.state = 'content';
        continue;
      }
      content += text;
      break;
    }
    return { reasoning, content };
  }

  /** What is still held back, at the end of the text: a lone prefix of a tag is text of the part it is in. */
  flush(): SplitPiece {
    const text = this.held;
    this.held = '';
    if (this.state === 'reasoning') return { reasoning: text, content: '' };
    // At the start: whitespace or the beginning of <think> that never finished — content for qwen3, reasoning for deepseek-r1.
    if (this.state === 'start') return this.parser === 'qwen3' ? { reasoning: '', content: text } : { reasoning: text, content: '' };
    return { reasoning: '', content: this.state === 'content' ? text : '' };
  }
}

/** The length of the longest end of `text` that is a proper prefix of `tag`. */
function partialTagLength(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) if (text.endsWith(tag.slice(0, n))) return n;
  return 0;
}
