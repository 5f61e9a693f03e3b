// `npm run check:tokenizer`: fuseformer's tokenizer (src/io/tokenizer.ts, @huggingface/tokenizers)
// against Hugging Face's Rust `tokenizers` library — the one that defines tokenizer.json — on the same
// files (issue #5: "the tokenizer round-trips text exactly as the Python tokenizers library does").
//
// bench/hf_tokenizers.py trains a tokenizer of each family fuseformer's models use (GPT-2's byte-level
// BPE, BERT's WordPiece, Llama's SentencePiece BPE with byte fallback, Marian's SentencePiece unigram)
// on the first half of Moby-Dick, then encodes the check's texts: held-out sentences of the book, and
// the cases tokenizers get wrong — whitespace runs, newlines and tabs, accents and combining marks, CJK,
// emoji with joiners, right-to-left text, characters outside the vocabulary, special-token strings in
// the text, long words, the empty string. For every text and family the check compares, exactly:
//   ids with the post-processor's special tokens, ids without, decode(ids) keeping them, and skipping them.
// Exits 1 on any difference (the first ones are printed), 2 when Python or `tokenizers` is missing.
//
// Usage: node dist/bench/tokenizer-parity.js [--json bench/results/tokenizer-parity.json] [--python python3]

import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadTokenizer } from '../src/io/tokenizer.js';
import { mobyDickText } from '../src/train/corpus.js';

const { values: cli } = parseArgs({
  options: { json: { type: 'string', default: 'bench/results/tokenizer-parity.json' }, python: { type: 'string', default: 'python3' } },
});

const FAMILIES = ['byte-level-bpe', 'wordpiece', 'bpe-byte-fallback', 'unigram-metaspace'] as const;

/** The texts beyond the book's sentences: each a way tokenizers go wrong. */
const EDGE_CASES = [
  '', ' ', '   leading and trailing   ', 'a  b   c    d', 'tabs\tand\nnewlines\r\nand\n\n\nblank lines',
  'Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse,',
  'café naïve Ångström façade — déjà vu', 'e\u0301 (e + combining acute) vs é', 'ﬁ ligature, ２ fullwidth, ½ ⅓',
  '日本語のテキストと中文文本', '한국어 텍스트', 'emoji 🐋🐳 and joined 👨‍👩‍👧‍👦 and flags 🇳🇴', 'עברית ومعها العربية',
  'special strings in text: <|endoftext|> [CLS] [SEP] <s> </s> <unk> <pad> [MASK]',
  'numbers 3.14159 1,000,000 0x1F 2026-12-01 and symbols @#$%^&*()_+{}|:"<>?',
  'supercalifragilisticexpialidocious'.repeat(4), 'ALL CAPS SHOUTING and MiXeD cAsE', "apostrophes don't won't it's 'quoted'",
  '\u0000 nul and \u0007 bell and \u00ad soft hyphen and \u200b zero width',
  ' Ahab', 'Ahab ', '...', '\n',
];

function python(args: string[]): string {
  const run = spawnSync(cli.python!, ['bench/hf_tokenizers.py', ...args], { encoding: 'utf8', maxBuffer: 256 << 20, timeout: 600_000, killSignal: 'SIGKILL' });
  if (run.error || run.status !== 0) throw new Error(`hf_tokenizers.py ${args[0]} failed: ${(run.stderr || String(run.error ?? '')).trim().split('\n').slice(-4).join(' | ')}`);
  return run.stdout;
}

const probe = spawnSync(cli.python!, ['-c', 'import tokenizers; print(tokenizers.__version__)'], { encoding: 'utf8' });
if (probe.status !== 0) {
  console.log(`check:tokenizer: skipped — ${cli.python} cannot import the tokenizers library (${(probe.stderr || String(probe.error)).trim().split('\n').at(-1)})`);
  process.exit(2);
}
const version = probe.stdout.trim();

// The first half of the book trains the tokenizers; sentences of the second half are the held-out texts.
const book = mobyDickText();
const half = Math.floor(book.length / 2);
const sentences = book.slice(half).split(/(?<=[.!?])\s+/).filter((s) => s.length > 20 && s.length < 400);
const texts = [...EDGE_CASES, ...Array.from({ length: 200 }, (_, i) => sentences[Math.floor((i * sentences.length) / 200)]!)];

const dir = mkdtempSync(join(tmpdir(), 'fuseformer-tokenizer-parity-'));
interface Row { ids: number[]; plain: number[]; text: string; bare: string }
const report: Record<string, unknown> = { date: new Date().toISOString().slice(0, 10), tokenizersVersion: version, texts: texts.length };
let failures = 0;
try {
  writeFileSync(join(dir, 'corpus.txt'), book.slice(0, half));
  writeFileSync(join(dir, 'texts.json'), JSON.stringify(texts));
  python(['build', dir, join(dir, 'corpus.txt')]);
  const reference = JSON.parse(python(['encode', dir, join(dir, 'texts.json')])) as Record<string, Row[]>;
  const table = ['| tokenizer | texts | ids | ids (no specials) | decode | decode (skip specials) | round trip = input |', '|---|---:|---:|---:|---:|---:|---:|'];
  for (const family of FAMILIES) {
    const ours = loadTokenizer(join(dir, family));
    const counts = { ids: 0, plain: 0, text: 0, bare: 0, identity: 0 };
    const mismatches: unknown[] = [];
    texts.forEach((text, i) => {
      const want = reference[family]![i]!;
      const got: Row = {
        ids: ours.encode(text), plain: ours.encode(text, { addSpecialTokens: false }),
        text: ours.decode(want.ids, { cleanUpTokenizationSpaces: false }), bare: ours.decode(want.ids, { skipSpecialTokens: true, cleanUpTokenizationSpaces: false }),
      };
      const same = {
        ids: JSON.stringify(got.ids) === JSON.stringify(want.ids), plain: JSON.stringify(got.plain) === JSON.stringify(want.plain),
        text: got.text === want.text, bare: got.bare === want.bare,
      };
      for (const k of ['ids', 'plain', 'text', 'bare'] as const) if (same[k]) counts[k]++;
      if (want.bare === text) counts.identity++;
      if (!(same.ids && same.plain && same.text && same.bare) && mismatches.length < 5) {
        mismatches.push({ text, ...Object.fromEntries((['ids', 'plain', 'text', 'bare'] as const).filter((k) => !same[k]).map((k) => [k, { ours: got[k], hf: want[k] }])) });
      }
    });
    const n = texts.length, bad = n * 4 - (counts.ids + counts.plain + counts.text + counts.bare);
    failures += bad;
    report[family] = { ...counts, mismatches };
    table.push(`| ${family} | ${n} | ${counts.ids} | ${counts.plain} | ${counts.text} | ${counts.bare} | ${counts.identity} (HF's own) |`);
    for (const m of mismatches) console.log(`${family} MISMATCH ${JSON.stringify(m).slice(0, 600)}`);
  }
  console.log(`tokenizers ${version}, ${texts.length} texts\n${table.join('\n')}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
report.failures = failures;
mkdirSync(dirname(cli.json!), { recursive: true });
writeFileSync(cli.json!, `${JSON.stringify(report, null, 1)}\n`);
console.log(failures === 0 ? 'check:tokenizer: every encoding and decoding equals the Rust tokenizers library\'s' : `check:tokenizer: ${failures} differences`);
process.exitCode = failures === 0 ? 0 : 1;
