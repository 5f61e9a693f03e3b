// A training progress line: step/total, loss, tokens/s, elapsed, ETA.
//
// On a terminal it redraws one line in place ('\r' and erase-to-end-of-line), at most every
// `redrawMs`; log() prints a message above it. Off a terminal (CI logs, a file, a pipe), carriage
// returns would pile up into one endless line, so it prints a plain line every `everySteps` steps or
// every `everyMs`, whichever comes first, and always the last step.
//
// Rates are measured from the first update on: the first step includes one-time work (kernel
// compilation, allocation, graph capture) that would make the early ETA far too long.

import { ArgumentError } from '../errors.js';

export interface ProgressUpdate {
  /** Steps completed so far (1 after the first). */
  readonly step: number;
  readonly loss?: number;
  /** Tokens processed in total so far (for tokens/s). */
  readonly tokens?: number;
  /** More fields for the line, e.g. { lr: '3.0e-4', scale: '65536' }. */
  readonly extra?: Readonly<Record<string, string>>;
}

export interface ProgressOptions {
  readonly total: number;
  /** Default process.stderr. */
  readonly stream?: { write(text: string): unknown; isTTY?: boolean; columns?: number };
  /** Default: stream.isTTY. */
  readonly tty?: boolean;
  readonly redrawMs?: number;
  readonly everySteps?: number;
  readonly everyMs?: number;
  /** Milliseconds clock, for tests. Default performance.now. */
  readonly now?: () => number;
  readonly label?: string;
}

export class ProgressBar {
  private readonly stream: NonNullable<ProgressOptions['stream']>;
  private readonly tty: boolean;
  private readonly now: () => number;
  private readonly startedAt: number;
  private first: { at: number; step: number; tokens: number } | undefined;
  private lastDrawAt = -Infinity;
  private lastLineStep = 0;
  private lastLineAt: number;
  private lastText = '';
  /** An update arrived that is not on screen yet (TTY). */
  private dirty = false;
  private latest: ProgressUpdate | undefined;
  private finished = false;

  constructor(private readonly options: ProgressOptions) {
    if (!Number.isSafeInteger(options.total) || options.total < 1) throw new ArgumentError(`progress: total must be an integer >= 1, got ${options.total}`);
    this.stream = options.stream ?? process.stderr;
    this.tty = options.tty ?? Boolean(this.stream.isTTY);
    this.now = options.now ?? (() => performance.now());
    this.startedAt = this.now();
    this.lastLineAt = this.startedAt;
  }

  update(update: ProgressUpdate): void {
    const at = this.now();
    this.latest = update;
    if (!this.first) this.first = { at, step: update.step, tokens: update.tokens ?? 0 };
    const last = update.step >= this.options.total;
    if (this.tty) {
      this.dirty = true;
      if (last || at - this.lastDrawAt >= (this.options.redrawMs ?? 100)) this.draw(at);
    } else if (last || update.step - this.lastLineStep >= (this.options.everySteps ?? 100) || at - this.lastLineAt >= (this.options.everyMs ?? 30_000)) {
      this.stream.write(`${this.line(at)}\n`);
      this.lastLineStep = update.step;
      this.lastLineAt = at;
    }
  }

  /** A message on its own line (eval results, checkpoint saved), keeping the bar below it. */
  log(message: string): void {
    if (this.tty && this.lastText) {
      this.stream.write(`\r\x1b[K${message}\n`);
      this.draw(this.now());
    } else {
      this.stream.write(`${message}\n`);
    }
  }

  /** Draws the final state and ends the line. */
  finish(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.tty) {
      if (this.dirty) this.draw(this.now());
      if (this.lastText) this.stream.write('\n');
    } else if (this.latest && this.latest.step !== this.lastLineStep) {
      this.stream.write(`${this.line(this.now())}\n`);
    }
  }

  /** The text of the progress line at time `at` (exposed for tests). */
  line(at = this.now()): string {
    const u = this.latest;
    const total = this.options.total;
    const step = u?.step ?? 0;
    const parts: string[] = [];
    const width = String(total).length;
    let head = `${this.options.label ? `${this.options.label} ` : ''}${String(step).padStart(width)}/${total}`;
    if (this.tty) head += ` ${bar(step / total, 20)}`;
    parts.push(`${head} ${String(Math.floor((100 * step) / total)).padStart(3)}%`);
    if (u?.loss !== undefined) parts.push(`loss ${Number.isFinite(u.loss) ? u.loss.toFixed(4) : String(u.loss)}`);
    const f = this.first;
    const since = f ? (at - f.at) / 1000 : 0;
    if (f && u?.tokens !== undefined && since > 0) parts.push(`${formatRate((u.tokens - f.tokens) / since)} tok/s`);
    for (const [key, value] of Object.entries(u?.extra ?? {})) parts.push(`${key} ${value}`);
    parts.push(`${formatDuration((at - this.startedAt) / 1000)} elapsed`);
    if (f && step > f.step && step < total) {
      parts.push(`ETA ${formatDuration(((total - step) * since) / (step - f.step))}`);
    }
    return parts.join(' | ');
  }

  private draw(at: number): void {
    let text = this.line(at);
    const columns = this.stream.columns;
    if (columns && text.length > columns - 1) text = text.slice(0, columns - 1); // a wrapped line cannot be redrawn
    this.stream.write(`\r\x1b[K${text}`);
    this.lastText = text;
    this.lastDrawAt = at;
    this.dirty = false;
  }
}

function bar(fraction: number, width: number): string {
  const filled = Math.round(Math.min(1, Math.max(0, fraction)) * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

/** 5.2s, 4m05s, 2h03m, 3d04h. */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?';
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const s = Math.round(seconds);
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${pad(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86400)}d${pad(Math.floor((s % 86400) / 3600))}h`;
}

/** 950, 12.3k, 1.25M: three significant digits. */
export function formatRate(perSecond: number): string {
  if (!Number.isFinite(perSecond) || perSecond < 0) return '?';
  const [value, unit] = perSecond >= 1e9 ? [perSecond / 1e9, 'G'] : perSecond >= 1e6 ? [perSecond / 1e6, 'M'] : perSecond >= 1e3 ? [perSecond / 1e3, 'k'] : [perSecond, ''];
  return `${value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2)}${unit}`;
}
