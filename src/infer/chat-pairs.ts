// A (query, document) pair as a causal-LM reranker reads it (sentence-transformers 6's CrossEncoder over a
// text-generation model, Qwen3-Reranker's format): the pair becomes chat messages with the roles "query" and
// "document" — after a "system" message holding the prompt (the reranker's instruction), where there is one —
// rendered by the model's chat template and tokenized without adding special tokens (the template has them).
// Past the length limit the tokens are cut at the end and the template's tail written back over the last ones:
// the tail is where the model gives its answer, and a cut that lost it would score another question. The tail
// is found as sentence-transformers finds it: the longest common token suffix of two renders whose query and
// document are different fillers ("0" and "1 2 3 4"), the system message kept — and written, as there, over every
// pair that reaches the limit, cut or not (a no-op unless the fillers' last tokens agree and the found tail holds
// one of the document's tokens: a vocabulary where both are unknown, bench:rerank's, session 54).

import { Template } from '@huggingface/jinja';
import { ArgumentError } from '../errors.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { chatTemplateVariables } from '../io/tokenizer.js';

/** How a template reads a message's content: a string ("flat"), or a list of {type: "text", text} parts ("structured"). */
export type MessageFormat = 'flat' | 'structured';

/** The chat template's text and where it came from (for error messages). */
export interface PairTemplate {
  readonly text: string;
  readonly source: string;
}

/** One pair's tokens, and whether they were cut to the limit. */
export interface EncodedPair {
  readonly ids: number[];
  /** Token types (BERT's second segment 1); absent where the model takes none. */
  readonly typeIds?: number[];
  readonly truncated: boolean;
}

/** A sentence-transformers pair as messages: (query, document) under the roles it maps them to. */
type Message = { role: string; content: string | { type: 'text'; text: string }[] };

/** Fillers that differ in first character and length: a render that rendered a role's content moves with them. */
const ROLE_PROBES = [['alpha', 'bravo'], ['charlie', 'bravo'], ['alpha', 'foxtrot']] as const;
/** Prompts whose template tails are kept (a caller's own prompts may be any text; the oldest goes first). */
const SUFFIX_CACHE_SIZE = 64;
/** A template reading any of these expects structured content (sentence-transformers' own test). */
const STRUCTURED_PATTERNS = ['content[0]', '.type', "'type'", '"type"', 'item.type', 'message.content['];

export class ChatPairEncoder {
  readonly format: MessageFormat;
  private readonly template: Template;
  private readonly restoreSuffix: boolean;
  private readonly variables: Record<string, unknown>;
  private readonly suffixes = new Map<string, number[]>();

  /**
   * `kwargs`: what the model's sentence-transformers config passes to the template (processing_kwargs'
   * chat_template: add_generation_prompt and the like); `restoreSuffix` false there turns the tail's restore off.
   */
  constructor(private readonly tokenizer: Tokenizer, private readonly source: PairTemplate, kwargs: Readonly<Record<string, unknown>> = {}) {
    try {
      this.template = new Template(source.text);
    } catch (error) {
      throw new ArgumentError(`${source.source}: the chat template does not parse: ${(error as Error).message}`);
    }
    this.format = STRUCTURED_PATTERNS.some((p) => source.text.includes(p)) ? 'structured' : 'flat';
    const { restore_suffix: restore, ...variables } = kwargs;
    if (restore !== undefined && typeof restore !== 'boolean') throw new ArgumentError(`${source.source}: restore_suffix is ${JSON.stringify(restore)}; expected true or false`);
    this.restoreSuffix = restore ?? true;
    this.variables = { add_generation_prompt: false, ...chatTemplateVariables(tokenizer), ...variables };
    this.checkRoles();
  }

  /** The pair's tokens, at most `maxTokens` (the tail restored where they reach it); `prompt` as a system message. */
  encode(query: string, document: string, maxTokens: number, prompt?: string): EncodedPair {
    const ids = this.tokens(this.messages(query, document, prompt));
    if (ids.length < maxTokens) return { ids, truncated: false };
    const cut = ids.slice(0, maxTokens);
    if (this.restoreSuffix) {
      const suffix = this.suffix(prompt);
      const keep = Math.min(suffix.length, cut.length);
      cut.splice(cut.length - keep, keep, ...suffix.slice(suffix.length - keep));
    }
    return { ids: cut, truncated: ids.length > maxTokens };
  }

  private messages(query: string, document: string, prompt: string | undefined): Message[] {
    const content = (text: string): Message['content'] => (this.format === 'flat' ? text : [{ type: 'text', text }]);
    return [...(prompt ? [{ role: 'system', content: content(prompt) }] : []), { role: 'query', content: content(query) }, { role: 'document', content: content(document) }];
  }

  private render(messages: Message[]): string {
    try {
      return this.template.render({ ...this.variables, messages });
    } catch (error) {
      throw new ArgumentError(`${this.source.source}: the chat template failed on a query / document pair: ${(error as Error).message}`);
    }
  }

  private tokens(messages: Message[]): number[] {
    return this.tokenizer.encode(this.render(messages), { addSpecialTokens: false });
  }

  /** The template's tail after the document (cached by prompt): the common token suffix of two filler renders. */
  private suffix(prompt: string | undefined): number[] {
    const key = prompt ?? '';
    let suffix = this.suffixes.get(key);
    if (suffix === undefined) {
      const first = this.tokens(this.messages('0', '0', prompt)), second = this.tokens(this.messages('1 2 3 4', '1 2 3 4', prompt));
      let count = 0;
      while (count < first.length && count < second.length && first[first.length - 1 - count] === second[second.length - 1 - count]) count++;
      // Renders that never diverge have no content in them: no tail to trust.
      suffix = count > 0 && count < Math.min(first.length, second.length) ? first.slice(first.length - count) : [];
      if (this.suffixes.size >= SUFFIX_CACHE_SIZE) this.suffixes.delete(this.suffixes.keys().next().value!);
      this.suffixes.set(key, suffix);
    }
    return suffix;
  }

  /** A template that ignores the query or the document role would score every pair alike: refused, with the fix. */
  private checkRoles(): void {
    const [base, query, document] = ROLE_PROBES.map(([q, d]) => this.render(this.messages(q, d, undefined)));
    const lost = [base === query ? 'query' : undefined, base === document ? 'document' : undefined].filter((r) => r !== undefined);
    if (lost.length === 0) return;
    const read = (role: string) => (this.format === 'flat'
      ? `{{ messages | selectattr("role", "eq", "${role}") | map(attribute="content") | first }}`
      : `{{ (messages | selectattr("role", "eq", "${role}") | first).content[0].text }}`);
    throw new ArgumentError(`${this.source.source}: the chat template does not render the pair's ${lost.join(' and ')} role${lost.length > 1 ? 's' : ''} ` +
      `(a reranker's pair is the messages {role: "query"} and {role: "document"}, as sentence-transformers passes them); give one that does ` +
      `(--chat-template FILE), e.g. with <Query>: ${read('query')} and <Document>: ${read('document')}`);
  }
}
