"""The reference side of `npm run check:tokenizer` (bench/tokenizer-parity.ts): Hugging Face's Rust
`tokenizers` library (the one that defines tokenizer.json) trains small tokenizers of the four families
fuseformer's models use on a corpus, and encodes and decodes the check's texts with them.

  python3 bench/hf_tokenizers.py build DIR CORPUS      writes DIR/<family>/tokenizer.json
  python3 bench/hf_tokenizers.py encode DIR TEXTS      prints JSON: {family: [{ids, plain, text, bare}]} per text
  python3 bench/hf_tokenizers.py files DIR NAMES       prints JSON: {name: what transformers' AutoTokenizer makes of
                                                       the model directory DIR/<name>} (special tokens, ids, chat)
  python3 bench/hf_tokenizers.py marian DIR TEXTS      trains source / target SentencePiece models on DIR/corpus.txt,
                                                       writes an opus-mt style DIR/marian, prints MarianTokenizer's
                                                       ids and decodings of the texts ({"skipped": why} without
                                                       sentencepiece)
  python3 bench/hf_tokenizers.py llama-spm DIR TEXTS   trains a Llama-style SentencePiece BPE model (byte fallback,
                                                       digits split) on DIR/corpus.txt and writes directories that
                                                       hold tokenizer.model and tokenizer_config.json but no
                                                       tokenizer.json (the defaults; legacy; bos + eos; a <pad>
                                                       added past the vocabulary), prints what transformers'
                                                       AutoTokenizer makes of the texts in each

Families (vocabulary 2000 each, trained on CORPUS):
  byte-level-bpe   GPT-2's: byte-level pre-tokenizer and decoder, <|endoftext|>
  wordpiece        BERT's: BertNormalizer (lowercase, accents stripped), BertPreTokenizer, [CLS] $A [SEP]
  bpe-byte-fallback  Llama 2's SentencePiece-as-BPE: "▁" for spaces, <0xXX> byte fallback, <s> $A
  unigram-metaspace  Marian / T5's SentencePiece unigram: Metaspace pre-tokenizer and decoder
  llama3-split-bpe   Llama 3's: the Split regex with (?i:) contractions and 3-digit groups, then byte-level
  xlm-r-precompiled  XLM-RoBERTa's (multilingual-e5, bge-m3): a SentencePiece unigram model with its nmt_nfkc
                     character map, converted to tokenizer.json by transformers (the Precompiled normalizer,
                     WhitespaceSplit + Metaspace, <s> $A </s>); built only where sentencepiece and transformers
                     are installed
For each text: ids with the post-processor's special tokens and without (plain), and the decoding of
ids keeping (text) and skipping (bare) special tokens.
"""

import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

VOCAB = 2000


def byte_level_bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tok, trainer, None


def wordpiece():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])

    def finish(t):
        t.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])
        return t
    return tok, trainer, finish


def bpe_byte_fallback():
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"])

    def finish(t):
        # Llama's layout: the 256 byte tokens <0x00>..<0xFF> are ordinary vocabulary entries after the
        # specials, and byte_fallback spells any character the vocabulary lacks through them.
        spec = json.loads(t.to_str())
        vocab = spec["model"]["vocab"]
        shifted = {token: (i if i < 3 else i + 256) for token, i in vocab.items()}
        for b in range(256):
            shifted[f"<0x{b:02X}>"] = 3 + b
        spec["model"]["vocab"] = shifted
        spec["model"]["byte_fallback"] = True
        for added in spec["added_tokens"]:
            added["id"] = shifted[added["content"]]
        t = Tokenizer.from_str(json.dumps(spec))
        t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", t.token_to_id("<s>"))])
        return t
    return tok, trainer, finish


LLAMA3_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def llama3_split_bpe():
    # Llama 3's (and Qwen2's, with single digits) pre-tokenizer: a case-insensitive contraction group, digits in
    # threes, then byte-level without its own regex.
    from tokenizers import Regex
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())

    def finish(t):
        t.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                                         special_tokens=[("<|begin_of_text|>", t.token_to_id("<|begin_of_text|>"))])
        return t
    return tok, trainer, finish


def unigram_metaspace():
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    return tok, trainer, None


FAMILIES = {"byte-level-bpe": byte_level_bpe, "wordpiece": wordpiece, "bpe-byte-fallback": bpe_byte_fallback, "unigram-metaspace": unigram_metaspace,
            "llama3-split-bpe": llama3_split_bpe}


def build(out_dir, corpus):
    with open(corpus, encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line.strip()]
    for name, make in FAMILIES.items():
        tok, trainer, finish = make()
        tok.train_from_iterator(lines, trainer=trainer)
        if finish:
            tok = finish(tok)
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        tok.save(os.path.join(out_dir, name, "tokenizer.json"))
        print(f"{name}: {tok.get_vocab_size()} tokens", file=sys.stderr)
    build_xlm_r(out_dir, corpus)


def build_xlm_r(out_dir, corpus):
    """xlm-r-precompiled/tokenizer.json: transformers' conversion of a SentencePiece unigram model (nmt_nfkc)."""
    try:
        import sentencepiece as spm
        from transformers import AutoTokenizer
    except ImportError as e:
        print(f"xlm-r-precompiled: skipped ({type(e).__name__}: {e})", file=sys.stderr)
        return
    source = os.path.join(out_dir, "xlm-r-source")
    os.makedirs(source, exist_ok=True)
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(source, "sentencepiece.bpe"), vocab_size=VOCAB,
                                   model_type="unigram", minloglevel=2)
    with open(os.path.join(source, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "XLMRobertaTokenizer"}, f)
    tok = AutoTokenizer.from_pretrained(source)
    os.makedirs(os.path.join(out_dir, "xlm-r-precompiled"), exist_ok=True)
    tok.backend_tokenizer.save(os.path.join(out_dir, "xlm-r-precompiled", "tokenizer.json"))
    print(f"xlm-r-precompiled: {tok.backend_tokenizer.get_vocab_size()} tokens", file=sys.stderr)


def encode(out_dir, texts_file):
    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    result = {}
    for name in [*FAMILIES, "xlm-r-precompiled"]:
        path = os.path.join(out_dir, name, "tokenizer.json")
        if not os.path.exists(path):
            continue
        tok = Tokenizer.from_file(path)
        rows = []
        for text in texts:
            ids = tok.encode(text).ids
            plain = tok.encode(text, add_special_tokens=False).ids
            rows.append({"ids": ids, "plain": plain, "text": tok.decode(ids, skip_special_tokens=False), "bare": tok.decode(ids, skip_special_tokens=True)})
        result[name] = rows
    print(json.dumps(result))


CHAT = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "Bye"}]


def files(out_dir, names_file):
    """transformers' reading of each model directory: tokenizer_config.json, special_tokens_map.json,
    chat_template.jinja and the tokenizer class's add_bos_token / add_eos_token, beside tokenizer.json."""
    try:
        import jinja2  # noqa: F401  (apply_chat_template needs it)
        import transformers
        from transformers import AutoTokenizer
    except ImportError as e:
        print(json.dumps({"skipped": f"{type(e).__name__}: {e}"}))
        return
    with open(names_file, encoding="utf-8") as f:
        names = json.load(f)
    result = {"transformers": transformers.__version__}
    for name in names:
        try:
            tok = AutoTokenizer.from_pretrained(os.path.join(out_dir, name))
        except Exception as e:  # reported, not fatal: the check says which directory transformers refused
            result[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        specials = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
        # transformers 5 calls the list extra_special_tokens (4.x: additional_special_tokens).
        extra = getattr(tok, "extra_special_tokens", None) or getattr(tok, "additional_special_tokens", None) or []
        extra = list(extra) if isinstance(extra, (list, tuple)) else []
        row = {"class": type(tok).__name__, "specials": specials, "additional": [str(t) for t in extra],
               "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
               "ids": tok("Call me Ishmael.")["input_ids"]}
        if tok.chat_template:
            row["chat"] = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
        result[name] = row
    print(json.dumps(result))


def marian(out_dir, texts_file):
    """An opus-mt style directory (source.spm, target.spm, a joint vocab.json; no tokenizer.json) and what
    transformers' MarianTokenizer makes of the texts: ids with </s>, and the ids decoded on the target side."""
    try:
        import sentencepiece as spm
        from transformers import MarianTokenizer
    except ImportError as e:
        print(json.dumps({"skipped": f"{type(e).__name__}: {e}"}))
        return
    d = os.path.join(out_dir, "marian")
    os.makedirs(d, exist_ok=True)
    corpus = os.path.join(out_dir, "corpus.txt")
    for side, size in (("source", 800), ("target", 700)):
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, side), vocab_size=size, model_type="unigram",
                                       character_coverage=0.9995 if side == "source" else 0.98, minloglevel=2)
        os.replace(os.path.join(d, f"{side}.model"), os.path.join(d, f"{side}.spm"))
        os.remove(os.path.join(d, f"{side}.vocab"))
    vocab = {"</s>": 0, "<unk>": 1}
    for side in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=os.path.join(d, f"{side}.spm"))
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if p not in vocab and not (sp.is_control(i) or sp.is_unknown(i)):
                vocab[p] = len(vocab)
    vocab[">>de<<"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"source_lang": "en", "target_lang": "de"}, f)
    tok = MarianTokenizer.from_pretrained(d)
    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    rows = []
    for text in texts:
        ids = tok(text)["input_ids"]
        rows.append({"ids": ids, "bare": tok.decode(ids, skip_special_tokens=True), "text": tok.decode(ids, skip_special_tokens=False)})
    import transformers
    print(json.dumps({"transformers": transformers.__version__, "sentencepiece": spm.__version__, "rows": rows}))


LLAMA_SPM_CONFIGS = {
    "llama-spm": {"tokenizer_class": "LlamaTokenizer"},
    "llama-spm-legacy": {"tokenizer_class": "LlamaTokenizer", "legacy": True},
    "llama-spm-eos": {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "add_eos_token": True, "legacy": False},
    "llama-spm-pad": {"tokenizer_class": "LlamaTokenizer", "legacy": False, "pad_token": "<pad>",
                      "added_tokens_decoder": {"1000": {"content": "<pad>", "lstrip": False, "normalized": False, "rstrip": False,
                                                        "single_word": False, "special": True}}},
}


def llama_spm_directory(directory, model_file, config, texts):
    """Writes a directory of tokenizer.model (a copy of model_file) and tokenizer_config.json (config), and
    returns AutoTokenizer's class and, per text, ids with and without special tokens and both decodings."""
    from transformers import AutoTokenizer
    os.makedirs(directory, exist_ok=True)
    with open(model_file, "rb") as src, open(os.path.join(directory, "tokenizer.model"), "wb") as dst:
        dst.write(src.read())
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    tok = AutoTokenizer.from_pretrained(directory)
    rows = []
    for text in texts:
        ids = tok(text)["input_ids"]
        rows.append({"ids": ids, "plain": tok(text, add_special_tokens=False)["input_ids"],
                     "bare": tok.decode(ids, skip_special_tokens=True), "text": tok.decode(ids, skip_special_tokens=False)})
    return {"class": type(tok).__name__, "rows": rows}


def llama_spm(out_dir, texts_file):
    """Llama-family directories with tokenizer.model only, and AutoTokenizer's ids and decodings of the texts."""
    try:
        import sentencepiece as spm
        import transformers  # noqa: F401 (llama_spm_directory's)
    except ImportError as e:
        print(json.dumps({"skipped": f"{type(e).__name__}: {e}"}))
        return
    model_dir = os.path.join(out_dir, "llama-spm-model")
    os.makedirs(model_dir, exist_ok=True)
    # Llama 2's trainer settings where they matter to encoding: BPE, byte fallback, digits split, whitespace
    # kept as it is (no normalization rule, no removal of extra spaces), a dummy prefix.
    spm.SentencePieceTrainer.train(input=os.path.join(out_dir, "corpus.txt"), model_prefix=os.path.join(model_dir, "tokenizer"),
                                   vocab_size=1000, model_type="bpe", byte_fallback=True, split_digits=True,
                                   allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
                                   normalization_rule_name="identity", character_coverage=0.9995, minloglevel=2)
    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    model_file = os.path.join(model_dir, "tokenizer.model")
    out = {name: llama_spm_directory(os.path.join(out_dir, name), model_file, config, texts) for name, config in LLAMA_SPM_CONFIGS.items()}
    import transformers
    print(json.dumps({"transformers": transformers.__version__, "sentencepiece": spm.__version__, "directories": out}))


if __name__ == "__main__":
    command, out_dir, path = sys.argv[1], sys.argv[2], sys.argv[3]
    if command == "build":
        build(out_dir, path)
    elif command == "encode":
        encode(out_dir, path)
    elif command == "files":
        files(out_dir, path)
    elif command == "marian":
        marian(out_dir, path)
    elif command == "llama-spm":
        llama_spm(out_dir, path)
    else:
        sys.exit(f"unknown command {command!r} (build, encode, files, marian, llama-spm)")
