"""The Hugging Face side of `npm run bench:embed` (bench/embed.ts): a BERT-base-size BertModel or a
Qwen3-Embedding-0.6B-size Qwen3Model (random weights, seeded), the workload, HF's embeddings for the correctness
check, and HF's speed.

  python3 bench/hf_embed.py build DIR [--model bert|qwen3] [--sequences N] [--min-len A] [--max-len B]
      DIR/: config.json + model.safetensors (BertModel / Qwen3Model.save_pretrained), a WordPiece tokenizer.json
      over the vocabulary (its ids are what both sides embed; texts are not tokenized in the timed part),
      sequences.json: N token sequences of lengths uniform in [A, B] — BERT's [CLS] … [SEP], Qwen3's ending in
      <|endoftext|> (151643) as Qwen3-Embedding's tokenizer ends them.
  python3 bench/hf_embed.py run DIR --dtype bf16|f32 [--batch-size 32] [--reps 5] [--no-compile]
      DIR/hf-<dtype>.json: {"vectors": pooled (BERT: mean; Qwen3: the last token's, sequences padded at the left
      as Qwen3-Embedding pads them), L2-normalised embeddings of every sequence (fp32 math on
      the same weights: the reference), "timings": {"eager": ms, "eager_sorted": ms, "compile_sorted": ms}},
      each the median over --reps of embedding all sequences in batches of --batch-size (CUDA-synchronised
      wall time after a warm-up pass): in the file's order, or sorted by length as SentenceTransformer.encode
      batches them; torch.compile with dynamic shapes on the sorted batches.
"""
import argparse
import json
import os
import statistics
import time

import torch
from transformers import AutoConfig, BertConfig, BertModel, Qwen3Config, Qwen3Model

QWEN3_EOS = 151643


def build(args):
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(0)
    if args.model == "bert":
        config = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                            intermediate_size=3072, max_position_embeddings=512, hidden_act="gelu")
        BertModel(config, add_pooling_layer=False).eval().save_pretrained(args.dir, safe_serialization=True)
    else:
        # Qwen3-Embedding-0.6B's shape (its config.json): 28 layers of 1024, 16 query / 8 key-value heads of 128, tied.
        config = Qwen3Config(vocab_size=151669, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                             num_key_value_heads=8, head_dim=128, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0,
                             tie_word_embeddings=True, bos_token_id=QWEN3_EOS, eos_token_id=QWEN3_EOS)
        Qwen3Model(config).to(torch.bfloat16).eval().save_pretrained(args.dir, safe_serialization=True)
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    vocab = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
    special = set(vocab.values())
    vocab.update({f"w{i}": i for i in range(config.vocab_size) if i not in special})
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 101), ("[SEP]", 102)])
    tokenizer.save(os.path.join(args.dir, "tokenizer.json"))
    g = torch.Generator().manual_seed(1)
    sequences = []
    for _ in range(args.sequences):
        n = int(torch.randint(args.min_len, args.max_len + 1, (1,), generator=g))
        if args.model == "bert":
            sequences.append([101] + torch.randint(1000, config.vocab_size, (n - 2,), generator=g).tolist() + [102])
        else:
            sequences.append(torch.randint(1000, QWEN3_EOS, (n - 1,), generator=g).tolist() + [QWEN3_EOS])
    with open(os.path.join(args.dir, "sequences.json"), "w") as f:
        json.dump({"sequences": sequences}, f)


def embed(model, batches, device, last_token=False):
    out = []
    for batch in batches:
        longest = max(len(s) for s in batch)
        if last_token:  # left padding, the last position pooled (Qwen3-Embedding's last_token_pool)
            ids = torch.tensor([[QWEN3_EOS] * (longest - len(s)) + s for s in batch], device=device)
            mask = torch.tensor([[0] * (longest - len(s)) + [1] * len(s) for s in batch], device=device)
        else:
            ids = torch.tensor([s + [0] * (longest - len(s)) for s in batch], device=device)
            mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in batch], device=device)
        with torch.no_grad():
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = hidden[:, -1] if last_token else (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
            out.append(torch.nn.functional.normalize(pooled.float(), dim=-1))
    return torch.cat(out)


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run(args):
    device = "cuda"
    with open(os.path.join(args.dir, "sequences.json")) as f:
        sequences = json.load(f)["sequences"]
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    # The reference: fp32 math on the weights the run uses (bf16-rounded for bf16).
    qwen3 = AutoConfig.from_pretrained(args.dir).model_type == "qwen3"
    load = (lambda: Qwen3Model.from_pretrained(args.dir)) if qwen3 else (lambda: BertModel.from_pretrained(args.dir, add_pooling_layer=False))
    model = load().to(device=device, dtype=dtype).eval()
    reference = load().to(device=device, dtype=dtype).float().eval()
    B = args.batch_size
    in_order = [sequences[i:i + B] for i in range(0, len(sequences), B)]
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    by_length = [[sequences[i] for i in order[k:k + B]] for k in range(0, len(order), B)]
    vectors = embed(reference, in_order, device, qwen3).cpu().tolist()
    del reference
    torch.cuda.empty_cache()
    timings = {"eager": timed(lambda: embed(model, in_order, device, qwen3), args.reps),
               "eager_sorted": timed(lambda: embed(model, by_length, device, qwen3), args.reps)}
    if not args.no_compile:
        compiled = torch.compile(model, dynamic=True)
        embed(compiled, by_length, device, qwen3)  # compiles (dynamic shapes: a few graphs)
        timings["compile_sorted"] = timed(lambda: embed(compiled, by_length, device, qwen3), args.reps)
    with open(os.path.join(args.dir, f"hf-{args.dtype}.json"), "w") as f:
        json.dump({"vectors": vectors, "timings": timings, "torch": torch.__version__, "device": torch.cuda.get_device_name()}, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["build", "run"])
    parser.add_argument("dir")
    parser.add_argument("--model", choices=["bert", "qwen3"], default="bert")
    parser.add_argument("--sequences", type=int, default=2048)
    parser.add_argument("--min-len", type=int, default=8)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    build(args) if args.command == "build" else run(args)


if __name__ == "__main__":
    main()
