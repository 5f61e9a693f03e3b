// `npm run check:tokenizer`: fuseformer's tokenizer (src/io/tokenizer.ts, @huggingface/tokenizers)
// against Hugging Face's Rust `tokenizers` library — the one that defines tokenizer.json — on the same
// files (issue #5: "the tokenizer round-trips text exactly as the Python tokenizers library does").
//
// bench/hf_tokenizers.py trains a tokenizer of each family fuseformer's models use (GPT-2's byte-level
// BPE, BERT's WordPiece, Llama's SentencePiece BPE with byte fallback, Marian's SentencePiece unigram,
// Llama 3's Split regex with case-insensitive contractions)
// on the first half of Moby-Dick, then encodes the check's texts: held-out sentences of the book, and
// the cases tokenizers get wrong — whitespace runs, newlines and tabs, accents and combining marks, CJK,
// emoji with joiners, right-to-left text, characters outside the vocabulary, special-token strings in
// the text, long words, the empty string. For every text and family the check compares, exactly:
//   ids with the post-processor's special tokens, ids without, decode(ids) keeping them, and skipping them.
// Then the files beside tokenizer.json, against transformers' AutoTokenizer on the same model directories:
// tokenizer_config.json's special tokens and a Llama class's add_bos_token / add_eos_token,
// special_tokens_map.json laid over the config, chat_template.jinja over the config's template
// (checkModelDirectories below); and Marian's tokenizer from an opus-mt style directory (source.spm,
// target.spm, vocab.json) against transformers' MarianTokenizer (checkMarian).
// Exits 1 on any difference (the first ones are printed), 2 when Python or `tokenizers` is missing.
//
// Usage: node dist/bench/tokenizer-parity.js [--json bench/results/tokenizer-parity.json] [--python python3]

import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadMarianTokenizer } from '../src/io/marian-tokenizer.js';
import { loadTokenizer } from '../src/io/tokenizer.js';
import { ChatTemplate } from '../src/serve/chat-template.js';
import { mobyDickText } from '../src/train/corpus.js';

const { values: cli } = parseArgs({
  options: { json: { type: 'string', default: 'bench/results/tokenizer-parity.json' }, python: { type: 'string', default: 'python3' } },
});

const FAMILIES = ['byte-level-bpe', 'wordpiece', 'bpe-byte-fallback', 'unigram-metaspace', 'llama3-split-bpe', 'xlm-r-precompiled'] as const;

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
  ' Ahab', 'Ahab ', '...', '\n', "I'M SURE WE'LL GO, DON'T YOU? She'S", 'digits 1234567 12,345.678 0001', 'a\r\n\r\n  b \n',
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
    // xlm-r-precompiled is built only where Python has sentencepiece and transformers.
    if (!reference[family]) {
      table.push(`| ${family} | skipped (Python lacks sentencepiece or transformers) | | | | | |`);
      report[family] = { skipped: true };
      continue;
    }
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
  failures += checkModelDirectories();
  failures += checkMarian();
  failures += checkLlamaSentencePiece();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
/**
 * The files beside tokenizer.json, against transformers' AutoTokenizer on the same directories (Llama 2's
 * layout: the bpe-byte-fallback tokenizer): tokenizer_config.json's special tokens and a Llama class's
 * add_bos_token / add_eos_token, special_tokens_map.json laid over the config, chat_template.jinja over the
 * config's template. Compared: the special tokens' strings, bos / eos ids, the ids of a text, the chat
 * template's rendering. Returns the number of differences (a directory transformers refuses counts as one).
 */
function checkModelDirectories(): number {
  const template = "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}";
  // The constructs instruct models' templates use (Llama 3's strftime_now and trim, Mistral's alternation check
  // with raise_exception, namespace counters, loop.last, tojson, string methods), rendered by @huggingface/jinja
  // here and by transformers' Jinja there.
  const rich = [
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] | trim %}{%- set rest = messages[1:] %}",
    "{%- else %}{%- set system = 'Be brief. Today: ' + strftime_now('%d %b %Y') %}{%- set rest = messages %}{%- endif %}",
    '{{- bos_token }}<<SYS>>{{ system }}<</SYS>>\n',
    "{%- for message in rest %}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{%- endif %}",
    "{{- '[' + message['role'] | upper + '] ' + message['content'].strip() }}{%- if loop.last and message.role == 'assistant' %}{{ eos_token }}{%- endif %}\n",
    '{%- endfor %}{%- set ns = namespace(users=0) %}{%- for m in messages %}{%- if m.role == "user" %}{%- set ns.users = ns.users + 1 %}{%- endif %}{%- endfor %}',
    "{{- 'users=' ~ ns.users ~ ' of ' ~ (messages | length) ~ ' ' }}{{ {'k': [1, 'two']} | tojson }}{%- if add_generation_prompt %}[ASSISTANT]{%- endif %}",
  ].join('');
  const llama = { tokenizer_class: 'LlamaTokenizerFast', bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', chat_template: rich };
  const cases: Record<string, Record<string, object | string>> = {
    'llama-bos': { 'tokenizer_config.json': { ...llama, add_bos_token: true, add_eos_token: false } },
    'llama-eos-not-bos': { 'tokenizer_config.json': { ...llama, add_bos_token: false, add_eos_token: true } },
    'map-over-config': {
      'tokenizer_config.json': { tokenizer_class: 'PreTrainedTokenizerFast', bos_token: '<unk>', eos_token: '</s>', additional_special_tokens: ['<s>'], chat_template: template },
      'special_tokens_map.json': { bos_token: '<s>', eos_token: { content: '</s>', lstrip: false, rstrip: false, normalized: false, single_word: false }, pad_token: '<unk>', additional_special_tokens: ['</s>'] },
    },
    'map-only': { 'tokenizer_config.json': { tokenizer_class: 'PreTrainedTokenizerFast' }, 'special_tokens_map.json': { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>' } },
    'jinja-over-config': { 'tokenizer_config.json': { ...llama, chat_template: 'config template' }, 'chat_template.jinja': `jinja: ${template}` },
  };
  const tokenizerJson = readFileSync(join(dir, 'bpe-byte-fallback', 'tokenizer.json'), 'utf8');
  for (const [name, files] of Object.entries(cases)) {
    mkdirSync(join(dir, 'files', name), { recursive: true });
    writeFileSync(join(dir, 'files', name, 'tokenizer.json'), tokenizerJson);
    for (const [file, contents] of Object.entries(files)) writeFileSync(join(dir, 'files', name, file), typeof contents === 'string' ? contents : JSON.stringify(contents));
  }
  writeFileSync(join(dir, 'names.json'), JSON.stringify(Object.keys(cases)));
  const reference = JSON.parse(python(['files', join(dir, 'files'), join(dir, 'names.json')])) as Record<string, DirectoryRow & { error?: string }> & { transformers: string; skipped?: string };
  if (reference.skipped !== undefined) {
    console.log(`\nmodel-directory files against transformers: skipped — ${reference.skipped}`);
    report.files = { skipped: reference.skipped };
    return 0;
  }
  const messages = [{ role: 'user', content: 'Hello' }, { role: 'assistant', content: 'Hi there' }, { role: 'user', content: 'Bye' }] as const;
  const fields = ['specials', 'additional', 'bos/eos ids', 'ids', 'chat'] as const;
  const table = [`| directory (transformers ${reference.transformers}) | ${fields.join(' | ')} |`, `|---|${fields.map(() => '---').join('|')}|`];
  let differences = 0;
  const rows: Record<string, unknown> = {};
  for (const name of Object.keys(cases)) {
    const want = reference[name]!;
    if (want.error !== undefined) {
      differences++;
      table.push(`| ${name} | transformers refused it: ${want.error.slice(0, 200)} |`);
      rows[name] = { error: want.error };
      continue;
    }
    const ours = loadTokenizer(join(dir, 'files', name));
    const map = ours.specialTokensMap ?? {};
    const got: DirectoryRow = {
      specials: Object.fromEntries(Object.entries(map).filter(([, v]) => typeof v === 'string')) as Record<string, string>,
      additional: [...((map['additional_special_tokens'] as readonly string[] | undefined) ?? [])],
      bos_token_id: ours.bosTokenId ?? null, eos_token_id: ours.eosTokenId ?? null,
      ids: ours.encode('Call me Ishmael.'),
      ...(want.chat !== undefined || ours.chatTemplate !== undefined ? { chat: new ChatTemplate(ours).render(messages) } : {}),
    };
    const same = (a: unknown, b: unknown) => JSON.stringify(sortedKeys(a)) === JSON.stringify(sortedKeys(b));
    const verdict = {
      specials: same(got.specials, want.specials), additional: same(got.additional, want.additional),
      'bos/eos ids': got.bos_token_id === want.bos_token_id && got.eos_token_id === want.eos_token_id,
      ids: same(got.ids, want.ids), chat: got.chat === want.chat,
    };
    const bad = fields.filter((f) => !verdict[f]);
    differences += bad.length;
    rows[name] = { ours: got, transformers: want, differ: bad };
    table.push(`| ${name} | ${fields.map((f) => (verdict[f] ? 'same' : '**differs**')).join(' | ')} |`);
    if (bad.length > 0) console.log(`files/${name} MISMATCH ${JSON.stringify({ ours: got, transformers: want }).slice(0, 800)}`);
  }
  report.files = { transformers: reference.transformers, directories: rows, differences };
  console.log(`\nmodel-directory files against transformers' AutoTokenizer\n${table.join('\n')}`);
  return differences;
}

/**
 * An opus-mt style directory (source.spm, target.spm, vocab.json: SentencePiece models trained on the corpus
 * by the Python library) through our MarianTokenizer against transformers' on every text: ids (with </s>),
 * and those ids decoded on the target side, skipping special tokens and keeping them. Skipped, and said so,
 * where Python lacks sentencepiece.
 */
function checkMarian(): number {
  const marianTexts = [...texts, '>>de<< Call me Ishmael.', 'Call</s>me <unk> maybe<pad>'];
  writeFileSync(join(dir, 'marian-texts.json'), JSON.stringify(marianTexts));
  const reference = JSON.parse(python(['marian', dir, join(dir, 'marian-texts.json')])) as { skipped?: string; transformers?: string; sentencepiece?: string; rows?: { ids: number[]; bare: string; text: string }[] };
  if (reference.skipped !== undefined) {
    console.log(`\nMarian (source.spm / target.spm / vocab.json): skipped — ${reference.skipped}`);
    report.marian = { skipped: reference.skipped };
    return 0;
  }
  const ours = loadMarianTokenizer(join(dir, 'marian'));
  const counts = { ids: 0, bare: 0, text: 0 };
  const mismatches: unknown[] = [];
  marianTexts.forEach((text, i) => {
    const want = reference.rows![i]!;
    const got = { ids: ours.encode(text), bare: ours.decode(want.ids, { skipSpecialTokens: true }), text: ours.decode(want.ids) };
    const same = { ids: JSON.stringify(got.ids) === JSON.stringify(want.ids), bare: got.bare === want.bare, text: got.text === want.text };
    for (const k of ['ids', 'bare', 'text'] as const) if (same[k]) counts[k]++;
    if (!(same.ids && same.bare && same.text) && mismatches.length < 5) {
      mismatches.push({ text, ...Object.fromEntries((['ids', 'bare', 'text'] as const).filter((k) => !same[k]).map((k) => [k, { ours: got[k], hf: want[k] }])) });
    }
  });
  for (const m of mismatches) console.log(`marian MISMATCH ${JSON.stringify(m).slice(0, 600)}`);
  const n = marianTexts.length;
  console.log(`\nMarian against transformers ${reference.transformers}'s MarianTokenizer (sentencepiece ${reference.sentencepiece})\n| texts | ids | decode (skip specials) | decode |\n|---:|---:|---:|---:|\n| ${n} | ${counts.ids} | ${counts.bare} | ${counts.text} |`);
  report.marian = { transformers: reference.transformers, sentencepiece: reference.sentencepiece, texts: n, ...counts, mismatches };
  return n * 3 - counts.ids - counts.bare - counts.text;
}

/**
 * Llama-family directories with tokenizer.model and tokenizer_config.json but no tokenizer.json (a SentencePiece
 * BPE model with byte fallback trained on the corpus; the defaults, legacy, bos + eos, a <pad> past the
 * vocabulary) through loadTokenizer against transformers' AutoTokenizer on every text: ids with and without
 * special tokens, decodings keeping and skipping them.
 */
function checkLlamaSentencePiece(): number {
  const spmTexts = [...texts, '<s>inline special</s> text <unk> <pad>', '  leading and trailing  '];
  writeFileSync(join(dir, 'llama-spm-texts.json'), JSON.stringify(spmTexts));
  const reference = JSON.parse(python(['llama-spm', dir, join(dir, 'llama-spm-texts.json')])) as {
    skipped?: string; transformers?: string; sentencepiece?: string; directories?: Record<string, { class: string; rows: { ids: number[]; plain: number[]; bare: string; text: string }[] }>;
  };
  if (reference.skipped !== undefined) {
    console.log(`
Llama tokenizer.model without tokenizer.json: skipped — ${reference.skipped}`);
    report.llamaSpm = { skipped: reference.skipped };
    return 0;
  }
  const table = ['| directory | transformers class | texts | ids | ids (no specials) | decode (skip specials) | decode |', '|---|---|---:|---:|---:|---:|---:|'];
  const results: Record<string, unknown> = {};
  let bad = 0;
  for (const [name, want] of Object.entries(reference.directories!)) {
    const ours = loadTokenizer(join(dir, name));
    const counts = { ids: 0, plain: 0, bare: 0, text: 0 };
    const mismatches: unknown[] = [];
    spmTexts.forEach((text, i) => {
      const w = want.rows[i]!;
      const got = { ids: ours.encode(text), plain: ours.encode(text, { addSpecialTokens: false }), bare: ours.decode(w.ids, { skipSpecialTokens: true }), text: ours.decode(w.ids) };
      const same = { ids: JSON.stringify(got.ids) === JSON.stringify(w.ids), plain: JSON.stringify(got.plain) === JSON.stringify(w.plain), bare: got.bare === w.bare, text: got.text === w.text };
      for (const k of ['ids', 'plain', 'bare', 'text'] as const) if (same[k]) counts[k]++;
      if (!Object.values(same).every(Boolean) && mismatches.length < 5) {
        mismatches.push({ text, ...Object.fromEntries((['ids', 'plain', 'bare', 'text'] as const).filter((k) => !same[k]).map((k) => [k, { ours: got[k], hf: w[k] }])) });
      }
    });
    for (const m of mismatches) console.log(`${name} MISMATCH ${JSON.stringify(m).slice(0, 600)}`);
    const n = spmTexts.length;
    bad += n * 4 - counts.ids - counts.plain - counts.bare - counts.text;
    table.push(`| ${name} | ${want.class} | ${n} | ${counts.ids} | ${counts.plain} | ${counts.bare} | ${counts.text} |`);
    results[name] = { class: want.class, texts: n, ...counts, mismatches };
  }
  console.log(`
Llama tokenizer.model without tokenizer.json, against transformers ${reference.transformers}'s AutoTokenizer (sentencepiece ${reference.sentencepiece})
${table.join('\n')}`);
  report.llamaSpm = { transformers: reference.transformers, sentencepiece: reference.sentencepiece, directories: results };
  return bad;
}

interface DirectoryRow { specials: Record<string, string>; additional: string[]; bos_token_id: number | null; eos_token_id: number | null; ids: number[]; chat?: string }

function sortedKeys(value: unknown): unknown {
  if (Array.isArray(value) || value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.entries(value as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b)));
}

report.failures = failures;
mkdirSync(dirname(cli.json!), { recursive: true });
writeFileSync(cli.json!, `${JSON.stringify(report, null, 1)}\n`);
console.log(failures === 0 ? 'check:tokenizer: every encoding and decoding equals Hugging Face\'s (the Rust tokenizers library; transformers\' AutoTokenizer and MarianTokenizer; Llama tokenizer.model directories)' : `check:tokenizer: ${failures} differences`);
process.exitCode = failures === 0 ? 0 : 1;
