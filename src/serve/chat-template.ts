// Chat messages → prompt text with the model's own Jinja chat template (chat_template.jinja, or
// tokenizer_config.json's chat_template; io/tokenizer.ts reads both), rendered by @huggingface/jinja as
// transformers' apply_chat_template does: messages, add_generation_prompt = true, and the special tokens'
// strings (bos_token, eos_token, unk_token, pad_token, sep_token, cls_token, mask_token,
// additional_special_tokens) as variables, with a request's chat_template_kwargs over them (Qwen3's
// enable_thinking: false closes an empty <think> block, as vLLM and SGLang take it), and a request's tools
// as `tools` (OpenAI's {type: "function", function} objects, as transformers passes them). The result is encoded without adding special tokens again
// (server.ts, through its PromptEncoder).

import { existsSync, readFileSync } from 'node:fs';
import { Template } from '@huggingface/jinja';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { chatTemplateVariables } from '../io/tokenizer.js';
import { ApiError } from './validation.js';
import type { ChatMessage, ToolDefinition } from './validation.js';
import { toolCallParserOfTemplate } from './tool-calls.js';
import type { ToolCallParser } from './tool-calls.js';

/** A chat template's text and where it came from (for error messages). */
export interface ChatTemplateText {
  readonly text: string;
  readonly source: string;
}

/**
 * `--chat-template`'s value: a file's path, or (as vLLM takes it) the template itself, written in one line; a value
 * that is neither is an error naming it.
 */
export function chatTemplateOption(value: string, option = '--chat-template'): ChatTemplateText {
  let given: ChatTemplateText;
  if (existsSync(value)) {
    try {
      given = { text: readFileSync(value, 'utf8'), source: value };
    } catch (error) {
      throw new ArgumentError(`${option}: cannot read '${value}': ${(error as Error).message}`);
    }
  } else if (value.includes('{{') || value.includes('{%')) given = { text: value, source: `${option} (inline)` };
  else throw new ArgumentError(`${option}: '${value}' is no file, nor a template (one with {{ … }} or {% … %})`);
  // Asked for by name, so a template that does not parse stops the command (the model's own only fails its chats).
  try {
    new Template(given.text);
  } catch (error) {
    throw new ArgumentError(`${option}: ${given.source}: the chat template does not parse: ${(error as Error).message}`);
  }
  return given;
}

export class ChatTemplate {
  private readonly template?: Template;
  /** Where the template came from (chat_template.jinja or tokenizer_config.json), for error messages. */
  private readonly source: string;
  private readonly specials: Record<string, string | readonly string[]>;
  private readonly text?: string;
  /**
   * Why the model's template cannot be used (it does not parse, or a list names no default); undefined when it
   * can or there is none. Not fatal: the server still answers /v1/completions; chat requests get this reason.
   */
  readonly problem?: string;

  /** `override`: a template given by the user (`--chat-template`) in place of the model's own. */
  constructor(tokenizer: Tokenizer, override?: ChatTemplateText) {
    this.source = override?.source ?? tokenizer.chatTemplateSource ?? tokenizer.source;
    const text = override?.text ?? tokenizer.chatTemplate;
    if (text !== undefined) {
      this.text = text;
      try {
        this.template = new Template(text);
      } catch (error) {
        this.problem = `${this.source}: the chat template does not parse: ${(error as Error).message}`;
      }
    }
    if (override === undefined && tokenizer.chatTemplateUnavailable !== undefined) this.problem = tokenizer.chatTemplateUnavailable;
    this.specials = chatTemplateVariables(tokenizer);
  }

  get available(): boolean { return this.template !== undefined; }

  /** Whether the template reads a `tools` variable at all (one that does not would silently drop a request's tools). */
  get takesTools(): boolean { return this.text !== undefined && /\btools\b/.test(this.text); }

  /** The tool-call syntax the template teaches the model (tool-calls.ts), if it names one. */
  get toolCallParser(): ToolCallParser | undefined { return this.text === undefined ? undefined : toolCallParserOfTemplate(this.text); }

  /**
   * The prompt text for these messages (encode it without adding special tokens: the template has them).
   * `variables` (a request's chat_template_kwargs) are passed to the template too, over the special tokens';
   * `tools` as the variable `tools` where there are any (transformers passes None otherwise).
   */
  render(messages: readonly ChatMessage[], variables: Readonly<Record<string, unknown>> = {}, tools: readonly ToolDefinition[] = [], addGenerationPrompt = true): string {
    if (!this.template) throw new ApiError(400, `${this.problem ?? 'this model has no chat template (tokenizer_config.json "chat_template" or chat_template.jinja in the model directory)'}; use /v1/completions`, 'invalid_request_error', 'messages');
    let text: string;
    try {
      text = this.template.render({ ...this.specials, ...variables, ...(tools.length > 0 ? { tools } : {}), messages, add_generation_prompt: addGenerationPrompt });
    } catch (error) {
      throw new ApiError(400, `the chat template (${this.source}) failed on these messages: ${(error as Error).message}`, 'invalid_request_error', 'messages');
    }
    return text;
  }
}
