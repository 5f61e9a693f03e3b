// Chat messages → prompt text with the model's own Jinja chat template (tokenizer_config.json's
// chat_template, or chat_template.jinja; io/tokenizer.ts reads both), rendered by @huggingface/jinja as
// transformers' apply_chat_template does: messages, add_generation_prompt = true, and the special tokens'
// strings (bos_token, eos_token) as variables. The result is encoded without adding special tokens again
// (server.ts, through its PromptEncoder).

import { Template } from '@huggingface/jinja';
import type { Tokenizer } from '../io/tokenizer.js';
import { ApiError } from './validation.js';
import type { ChatMessage } from './validation.js';

export class ChatTemplate {
  private readonly template?: Template;
  private readonly specials: Record<string, string>;

  constructor(tokenizer: Tokenizer) {
    if (tokenizer.chatTemplate !== undefined) {
      try {
        this.template = new Template(tokenizer.chatTemplate);
      } catch (error) {
        throw new ApiError(500, `${tokenizer.source}: the chat template does not parse: ${(error as Error).message}`, 'server_error');
      }
    }
    const name = (id: number | undefined) => (id === undefined ? undefined : tokenizer.idToToken(id));
    this.specials = {};
    const bos = name(tokenizer.bosTokenId), eos = name(tokenizer.eosTokenId);
    if (bos !== undefined) this.specials['bos_token'] = bos;
    if (eos !== undefined) this.specials['eos_token'] = eos;
  }

  get available(): boolean { return this.template !== undefined; }

  /** The prompt text for these messages (encode it without adding special tokens: the template has them). */
  render(messages: readonly ChatMessage[]): string {
    if (!this.template) throw new ApiError(400, `this model has no chat template (tokenizer_config.json "chat_template" or chat_template.jinja in the model directory); use /v1/completions`, 'invalid_request_error', 'messages');
    let text: string;
    try {
      text = this.template.render({ messages, add_generation_prompt: true, ...this.specials });
    } catch (error) {
      throw new ApiError(400, `the chat template failed on these messages: ${(error as Error).message}`, 'invalid_request_error', 'messages');
    }
    return text;
  }
}
