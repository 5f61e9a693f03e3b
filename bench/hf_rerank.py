"""The Hugging Face side of `npm run bench:rerank` (bench/rerank.ts): a Qwen3-Reranker-0.6B-size Qwen3ForCausalLM
(random weights, seeded) scored as sentence-transformers 6's CrossEncoder scores a causal LM — each (query, document)
pair rendered by the chat template as the messages {role: "query"}, {role: "document"} (the instruction as the system
message), tokenized with left padding and truncation, the last position's logits (logits_to_keep=1), then
sigmoid(logit("yes") - logit("no")) — with the pairs sorted by length as CrossEncoder.predict sorts them.

  python3 bench/hf_rerank.py build DIR [--documents N] [--min-words A] [--max-words B]
      DIR/: config.json + model.safetensors (Qwen3ForCausalLM.save_pretrained, bf16), a WordPiece tokenizer.json whose
      words w<id> are token <id> (Qwen3's "yes" 9693 / "no" 2152 and its <|im_start|> / <|im_end|> ids kept), a chat
      template with the pair's roles; workload.json: one query, N documents of A..B words.
  python3 bench/hf_rerank.py run DIR --dtype bf16|f32 [--batch-size 32] [--reps 5] [--max-length 512] [--no-compile]
      DIR/hf-<dtype>.json: {"scores": fp32-math scores on the run's weights (the reference), "tokens": each pair's
      token count, "timings": {"eager": ms, "eager_sorted": ms, "compile_sorted": ms}}: the median over --reps of
      scoring every pair (rendering and tokenizing included, as CrossEncoder.predict does; CUDA-synchronised wall
      time after a warm-up pass), in the documents' order or sorted by length; torch.compile on the sorted batches.
"""
import argparse
import json
import os

import torch
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from hf_embed import timed  # the same CUDA-synchronised median

YES, NO, EOS, IM_START, IM_END = 9693, 2152, 151643, 151644, 151645
SPECIALS = {"<|endoftext|>": EOS, "<|im_start|>": IM_START, "<|im_end|>": IM_END, "<instruct>": 151646, "<query>": 151647, "<document>": 151648}
TEMPLATE = (
    "{%- set system = messages | selectattr('role', 'eq', 'system') | map(attribute='content') | first -%}"
    "<|im_start|> <instruct> {{ system if system else 'w11 w12 w13 w14 w15 w16 w17 w18 w19 w20' }} <|im_end|> <|im_start|> "
    "<query> {{ messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first }} "
    "<document> {{ messages | selectattr('role', 'eq', 'document') | map(attribute='content') | first }} <|im_end|> <|im_start|> w21 w22"
)


def build(args):
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(0)
    # Qwen3-Reranker-0.6B's shape (its config.json): 28 layers of 1024, 16 query / 8 key-value heads of 128, tied.
    config = Qwen3Config(vocab_size=151669, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                         num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
                         tie_word_embeddings=True, bos_token_id=EOS, eos_token_id=IM_END, pad_token_id=EOS)
    Qwen3ForCausalLM(config).to(torch.bfloat16).eval().save_pretrained(args.dir, safe_serialization=True)
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    vocab = {"[UNK]": 100, "yes": YES, "no": NO, **SPECIALS}
    taken = set(vocab.values()) | set(SPECIALS.values())
    vocab.update({f"w{i}": i for i in range(1000, EOS) if i not in taken})
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in sorted(SPECIALS, key=SPECIALS.get)])
    assert all(tokenizer.token_to_id(t) == i for t, i in SPECIALS.items()), "special token ids"
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="[UNK]",
                                   model_max_length=args.max_length)
    fast.chat_template = TEMPLATE
    fast.save_pretrained(args.dir)
    g = torch.Generator().manual_seed(1)
    words = lambda n: " ".join(f"w{i}" for i in torch.randint(1000, 150000, (n,), generator=g).tolist() if i not in taken)
    documents = [words(int(torch.randint(args.min_words, args.max_words + 1, (1,), generator=g))) for _ in range(args.documents)]
    with open(os.path.join(args.dir, "workload.json"), "w") as f:
        json.dump({"query": words(16), "documents": documents}, f)


def template_tail(tokenizer):
    """The chat template's tail as sentence-transformers finds it: the common token suffix of two filler renders."""
    render = lambda filler: tokenizer(tokenizer.apply_chat_template([{"role": "query", "content": filler}, {"role": "document", "content": filler}], tokenize=False),
                                      add_special_tokens=False)["input_ids"]
    first, second = render("0"), render("1 2 3 4")
    count = 0
    while count < min(len(first), len(second)) and first[-1 - count] == second[-1 - count]:
        count += 1
    return first[len(first) - count:]


def scores_of(model, tokenizer, query, documents, batches, device, max_length):
    out = {}
    for batch in batches:
        texts = [tokenizer.apply_chat_template([{"role": "query", "content": query}, {"role": "document", "content": documents[i]}], tokenize=False)
                 for i in batch]
        enc = tokenizer(texts, padding=True, truncation=True, max_length=max_length, add_special_tokens=False, return_tensors="pt")
        # sentence-transformers writes the template's tail back over a cut row's end (its _restore_chat_template_suffix)
        suffix = template_tail(tokenizer)
        for row in range(enc["input_ids"].shape[0]):
            if int(enc["attention_mask"][row].sum()) >= max_length:
                enc["input_ids"][row, -len(suffix):] = torch.tensor(suffix)
        enc = enc.to(device)
        with torch.no_grad():
            logits = model(**enc, logits_to_keep=1).logits[:, -1].float()
        for i, s in zip(batch, torch.sigmoid(logits[:, YES] - logits[:, NO]).tolist()):
            out[i] = s
    return [out[i] for i in range(len(documents))]


def run(args):
    device = args.device
    with open(os.path.join(args.dir, "workload.json")) as f:
        workload = json.load(f)
    query, documents = workload["query"], workload["documents"]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.dir)
    tokenizer.padding_side = "left"  # as sentence-transformers pads a text-generation model
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    model = Qwen3ForCausalLM.from_pretrained(args.dir).to(device=device, dtype=dtype).eval()
    reference = Qwen3ForCausalLM.from_pretrained(args.dir).to(device=device, dtype=dtype).float().eval()
    B = args.batch_size
    in_order = [list(range(i, min(i + B, len(documents)))) for i in range(0, len(documents), B)]
    render = lambda d: tokenizer.apply_chat_template([{"role": "query", "content": query}, {"role": "document", "content": d}], tokenize=False)
    lengths = [len(tokenizer(render(d), add_special_tokens=False)["input_ids"]) for d in documents]
    order = sorted(range(len(documents)), key=lambda i: -lengths[i])
    by_length = [order[k:k + B] for k in range(0, len(order), B)]
    reference_scores = scores_of(reference, tokenizer, query, documents, in_order, device, args.max_length)
    del reference
    torch.cuda.empty_cache()
    if device == "cpu":  # a check of the scores only (--device cpu), no timings
        with open(os.path.join(args.dir, f"hf-{args.dtype}.json"), "w") as f:
            json.dump({"scores": reference_scores, "tokens": [min(n, args.max_length) for n in lengths], "timings": {}}, f)
        return
    timings = {"eager": timed(lambda: scores_of(model, tokenizer, query, documents, in_order, device, args.max_length), args.reps),
               "eager_sorted": timed(lambda: scores_of(model, tokenizer, query, documents, by_length, device, args.max_length), args.reps)}
    if not args.no_compile:
        compiled = torch.compile(model, dynamic=True)
        scores_of(compiled, tokenizer, query, documents, by_length, device, args.max_length)  # compiles
        timings["compile_sorted"] = timed(lambda: scores_of(compiled, tokenizer, query, documents, by_length, device, args.max_length), args.reps)
    with open(os.path.join(args.dir, f"hf-{args.dtype}.json"), "w") as f:
        json.dump({"scores": reference_scores, "tokens": [min(n, args.max_length) for n in lengths], "timings": timings,
                   "torch": torch.__version__, "device": torch.cuda.get_device_name()}, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["build", "run"])
    parser.add_argument("dir")
    parser.add_argument("--documents", type=int, default=512)
    parser.add_argument("--min-words", type=int, default=16)
    parser.add_argument("--max-words", type=int, default=480)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    build(args) if args.command == "build" else run(args)


if __name__ == "__main__":
    main()
