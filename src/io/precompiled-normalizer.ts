// tokenizer.json's "Precompiled" normalizer (XLM-RoBERTa, mBART, T5 and other SentencePiece conversions), exact.
// The library we run tokenizer.json with approximates it by NFKC and a few replacements; the Rust library
// (and so transformers) applies the SentencePiece character map itself, and the two differ — e.g. a zero-width
// joiner becomes a space in the approximation, so a joined emoji turns into several tokens. This applies the
// map as Hugging Face's spm_precompiled does: text cut into extended grapheme clusters; a cluster of fewer
// than 6 UTF-8 bytes with a rule matching its start is replaced whole by that rule's output (the shortest
// match, even where it covers only part of the cluster — the Rust code's own comment calls this odd but
// required for parity); otherwise each character is replaced by its rule, or kept.

import { CharsMapNormalizer } from './sentencepiece.js';

const UTF8 = new TextEncoder();
const GRAPHEMES = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/** The Precompiled normalizer's output for `text` under `charsmap`. */
export function precompiledNormalize(charsmap: CharsMapNormalizer, text: string): string {
  let out = '';
  for (const { segment } of GRAPHEMES.segment(text)) {
    const bytes = UTF8.encode(segment);
    if (bytes.length < 6) {
      const whole = charsmap.shortestMatch(bytes);
      if (whole !== undefined) { out += whole; continue; }
    }
    for (const character of segment) out += charsmap.shortestMatch(UTF8.encode(character)) ?? character;
  }
  return out;
}

/** A normalizer object of the tokenizers library: its config, and children where it is a Sequence. */
interface LibraryNormalizer {
  config?: { type?: unknown; precompiled_charsmap?: unknown };
  normalizers?: (LibraryNormalizer | null)[];
  normalize: (text: string) => string;
}

/**
 * Replaces the approximate normalize() of every Precompiled normalizer in `normalizer` (top level or inside
 * a Sequence) by the exact one; `source` names the file in errors.
 */
export function useExactPrecompiled(normalizer: unknown, source: string): void {
  if (normalizer === null || normalizer === undefined) return;
  const n = normalizer as LibraryNormalizer;
  for (const child of n.normalizers ?? []) useExactPrecompiled(child, source);
  if (n.config?.type !== 'Precompiled') return;
  const encoded = n.config.precompiled_charsmap;
  if (encoded === null || encoded === undefined || encoded === '') return;  // no map: the identity, as in Rust
  if (typeof encoded !== 'string') throw new Error(`${source}: a Precompiled normalizer's precompiled_charsmap is not a base64 string`);
  const charsmap = new CharsMapNormalizer(new Uint8Array(Buffer.from(encoded, 'base64')), `${source}: the Precompiled normalizer`);
  n.normalize = (text: string) => precompiledNormalize(charsmap, text);
}
