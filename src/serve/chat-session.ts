// A multi-turn conversation with one model (`fuseformer chat`): each turn renders the whole conversation with the
// model's chat template and runs it through a ServingEngine, whose prefix cache holds the blocks of the turns
// before — so a turn computes only its own positions (the new user message and the answer), not the history
// again. The answer streams piece by piece and joins the history as the model wrote it (templates such as
// Qwen3's cut an earlier turn's reasoning themselves). When the conversation outgrows the context window, its
// oldest turns are dropped (the system message stays).

import type { TokenConstraint } from '../infer/structured/token-mask.js';
import { ArgumentError } from '../errors.js';
import { defaultStopTokenIds } from '../infer/generate.js';
import { resolveSampling } from '../infer/sampling.js';
import type { SamplingOptions } from '../infer/sampling.js';
import type { Tokenizer } from '../io/tokenizer.js';
import { TokenStreamDecoder } from '../io/token-stream-decoder.js';
import { ChatTemplate } from './chat-template.js';
import type { ChatTemplateText } from './chat-template.js';
import type { FinishReason, ServingEngine } from './engine.js';
import type { ChatMessage } from './validation.js';

export interface ChatSessionOptions {
  readonly system?: string;
  /** A chat template in place of the model's own. */
  readonly chatTemplate?: ChatTemplateText;
  /** Template variables of every turn (e.g. Qwen3's enable_thinking: false). */
  readonly templateVariables?: Readonly<Record<string, unknown>>;
  /** New tokens an answer may take at most (default: the rest of the context window). */
  readonly maxTokens?: number;
  /** Sampling over generation_config.json's defaults; the seed of turn i is seed + i, so a conversation replays. */
  readonly sampling?: Omit<SamplingOptions, 'seed'>;
  readonly seed?: bigint;
  /** Each answer held to a grammar (`fuseformer chat --json`): a new constraint a turn. */
  readonly constraint?: () => TokenConstraint;
}

export interface ChatTurn {
  readonly text: string;
  readonly tokens: number;
  readonly finish: FinishReason;
  /** The prompt's positions, and how many of them came from the prefix cache (earlier turns' blocks). */
  readonly promptTokens: number;
  readonly cachedTokens: number;
  /** Earlier turns left out to fit the context window. */
  readonly droppedTurns: number;
}

export class ChatSession {
  private readonly template: ChatTemplate;
  private readonly stopTokenIds: readonly number[];
  private history: ChatMessage[] = [];
  private system: string | undefined;
  private turn = 0;
  private current: string | undefined;

  constructor(readonly engine: ServingEngine, readonly tokenizer: Tokenizer, private readonly options: ChatSessionOptions = {}) {
    this.template = new ChatTemplate(tokenizer, options.chatTemplate);
    if (!this.template.available) throw new ArgumentError(`chat: ${this.template.problem ?? 'the model has no chat template (tokenizer_config.json "chat_template" or chat_template.jinja)'}; \`fuseformer generate\` continues text without one`);
    this.system = options.system;
    this.stopTokenIds = defaultStopTokenIds(engine.model);
  }

  /** The conversation so far (system message first, if any). */
  get messages(): readonly ChatMessage[] {
    return this.withSystem(this.history);
  }

  /** Forgets the turns (the system message stays; `system` replaces it). */
  reset(system?: string): void {
    this.history = [];
    if (system !== undefined) this.system = system === '' ? undefined : system;
  }

  /** Stops the answer being generated (its text so far joins the history). */
  interrupt(): void {
    if (this.current !== undefined) this.engine.cancel(this.current);
  }

  /** The model's answer to `user`, streamed to `onText` as it comes; the engine is stepped here, yielding between steps. */
  async reply(user: string, onText: (piece: string) => void): Promise<ChatTurn> {
    const window = this.engine.maxLen;
    let kept = this.history, prompt = this.encode([...kept, { role: 'user', content: user }]), droppedTurns = 0;
    // The oldest turns go first, a user message with what follows it up to the next user message.
    while (prompt.length >= window && kept.length > 0) {
      const next = kept.findIndex((m, i) => i > 0 && m.role === 'user');
      kept = next < 0 ? [] : kept.slice(next);
      droppedTurns++;
      prompt = this.encode([...kept, { role: 'user', content: user }]);
    }
    if (prompt.length >= window) throw new ArgumentError(`chat: this message needs ${prompt.length} positions with the template; the context holds ${window}, and an answer needs one more`);
    const maxTokens = Math.min(this.options.maxTokens ?? Infinity, window - prompt.length);
    const sampling = resolveSampling({ ...this.options.sampling, seed: (this.options.seed ?? 0n) + BigInt(this.turn++) }, this.engine.model.generation);
    const decoder = new TokenStreamDecoder(this.tokenizer, { skipSpecialTokens: true, context: prompt });
    const hitsBefore = this.engine.stats().prefixHits;
    let text = '', tokens = 0, finish: FinishReason | undefined;
    const emit = (piece: string) => {
      if (piece === '') return;
      text += piece;
      onText(piece);
    };
    this.current = this.engine.submit({
      prompt, maxTokens, sampling, stopTokenIds: this.stopTokenIds,
      ...(this.options.constraint ? { constraint: this.options.constraint() } : {}),
      onToken: (e) => {
        tokens++;
        if (!this.stopTokenIds.includes(e.token) && e.token < this.tokenizer.vocabSize) emit(decoder.push(e.token));
      },
      onFinish: (reason) => { finish = reason; },
    });
    try {
      // A Ctrl-C (interrupt()) arrives between steps.
      while (finish === undefined) {
        this.engine.step();
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      // A pipelined engine (CUDA's default) may still hold the step launched last: read it now, not at the next turn.
      while (this.engine.hasWork) this.engine.step();
    } finally {
      if (finish === undefined) this.engine.cancel(this.current);
      this.current = undefined;
    }
    emit(decoder.flush());
    this.history = [...kept, { role: 'user', content: user }, { role: 'assistant', content: text }];
    const cachedTokens = (this.engine.stats().prefixHits - hitsBefore) * this.engine.blockSize;
    return { text, tokens, finish, promptTokens: prompt.length, cachedTokens, droppedTurns };
  }

  private withSystem(messages: readonly ChatMessage[]): ChatMessage[] {
    return [...(this.system !== undefined ? [{ role: 'system', content: this.system }] : []), ...messages];
  }

  private encode(messages: readonly ChatMessage[]): number[] {
    return this.tokenizer.encode(this.template.render(this.withSystem(messages), this.options.templateVariables ?? {}), { addSpecialTokens: false });
  }
}
