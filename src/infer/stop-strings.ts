// Stop strings over streamed text: text is passed on as soon as it cannot be the start of a stop string;
// a possible start is held back until the next piece decides it. When a stop string appears, the text
// before it is the last to be passed on (the stop string itself is not: OpenAI's `stop` semantics).

import { ArgumentError } from '../errors.js';

export class StopStringMatcher {
  private held = '';
  private stopped = false;

  constructor(private readonly stops: readonly string[]) {
    for (const s of stops) if (typeof s !== 'string' || s.length === 0) throw new ArgumentError(`stop strings must be non-empty strings, got ${JSON.stringify(s)}`);
  }

  get done(): boolean { return this.stopped; }

  /** Adds a piece of text; returns what can be shown now and whether a stop string ended the text. */
  push(piece: string): { text: string; stopped: boolean } {
    if (this.stopped) return { text: '', stopped: true };
    const text = this.held + piece;
    let cut = -1;
    for (const s of this.stops) {
      const at = text.indexOf(s);
      if (at >= 0 && (cut < 0 || at < cut)) cut = at;
    }
    if (cut >= 0) {
      this.stopped = true;
      this.held = '';
      return { text: text.slice(0, cut), stopped: true };
    }
    const keep = this.partialMatchLength(text);
    this.held = text.slice(text.length - keep);
    return { text: text.slice(0, text.length - keep), stopped: false };
  }

  /** The text still held back (generation ended without a stop string). */
  flush(): string {
    const text = this.stopped ? '' : this.held;
    this.held = '';
    return text;
  }

  /** The longest suffix of `text` that is a proper prefix of some stop string. */
  private partialMatchLength(text: string): number {
    let longest = 0;
    for (const s of this.stops) {
      for (let n = Math.min(s.length - 1, text.length); n > longest; n--) {
        if (text.endsWith(s.slice(0, n))) { longest = n; break; }
      }
    }
    return longest;
  }
}
