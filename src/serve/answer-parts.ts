// A chat answer's text, piece by piece, into what the API sends apart: reasoning (reasoning.ts, before the
// answer proper), content, and tool calls found in the content (tool-calls.ts). Either stage may be absent.

import type { ReasoningSplitter, SplitPiece } from './reasoning.js';
import type { ToolCall, ToolCallExtractor } from './tool-calls.js';

export interface AnswerPiece extends SplitPiece {
  readonly calls: readonly ToolCall[];
}

export class AnswerParts {
  constructor(private readonly reasoning?: ReasoningSplitter, private readonly tools?: ToolCallExtractor) {}

  /** The next piece of text; `last` releases whatever the stages hold back. */
  push(piece: string, last = false): AnswerPiece {
    let reasoning = '', content = piece;
    if (this.reasoning) {
      const now = this.reasoning.push(piece), rest = last ? this.reasoning.flush() : { reasoning: '', content: '' };
      reasoning = now.reasoning + rest.reasoning;
      content = now.content + rest.content;
    }
    if (!this.tools) return { reasoning, content, calls: [] };
    const now = this.tools.push(content), rest = last ? this.tools.flush() : { content: '', calls: [] };
    return { reasoning, content: now.content + rest.content, calls: [...now.calls, ...rest.calls] };
  }
}
