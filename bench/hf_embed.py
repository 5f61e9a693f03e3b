"""The Hugging Face side of `npm run bench:embed` (bench/embed.ts): a BERT-base-size BertModel (random
weights, seeded), the workload, HF's embeddings for the correctness check, and HF's speed.

  python3 bench/hf_embed.py build DIR [--sequences N] [--min-len A] [--max-len B]
      DIR/: config.json + model.safetensors (BertModel.save_pretrained), a WordPiece tokenizer.json over the
      vocabulary (its ids are what both sides embed; texts are not tokenized in the timed part),
      sequences.json: N token sequences ([CLS] … [SEP]) of lengths uniform in [A, B].
  python3 bench/hf_embed.py run DIR --dtype bf16|f32 [--batch-size 32] [--reps 5] [--no-compile]
      DIR/hf-<dtype>.json: {"vectors": mean-pooled, L2-normalised embeddings of every sequence (fp32 math on
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
from transformers import BertConfig, BertModel


def build(args):
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=512, hidden_act="gelu")
    BertModel(config, add_pooling_layer=False).eval().save_pretrained(args.dir, safe_serialization=True)
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
        body = torch.randint(1000, config.vocab_size, (n - 2,), generator=g).tolist()
        sequences.append([101] + body + [102])
    with open(os.path.join(args.dir, "sequences.json"), "w") as f:
        json.dump({"sequences": sequences}, f)


def embed(model, batches, device):
    out = []
    for batch in batches:
        longest = max(len(s) for s in batch)
        ids = torch.tensor([s + [0] * (longest - len(s)) for s in batch], device=device)
        mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in batch], device=device)
        with torch.no_grad():
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
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
    model = BertModel.from_pretrained(args.dir, add_pooling_layer=False).to(device=device, dtype=dtype).eval()
    reference = BertModel.from_pretrained(args.dir, add_pooling_layer=False).to(device=device, dtype=dtype).float().eval()
    B = args.batch_size
    in_order = [sequences[i:i + B] for i in range(0, len(sequences), B)]
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    by_length = [[sequences[i] for i in order[k:k + B]] for k in range(0, len(order), B)]
    vectors = embed(reference, in_order, device).cpu().tolist()
    timings = {"eager": timed(lambda: embed(model, in_order, device), args.reps),
               "eager_sorted": timed(lambda: embed(model, by_length, device), args.reps)}
    if not args.no_compile:
        compiled = torch.compile(model, dynamic=True)
        embed(compiled, by_length, device)  # compiles (dynamic shapes: a few graphs)
        timings["compile_sorted"] = timed(lambda: embed(compiled, by_length, device), args.reps)
    with open(os.path.join(args.dir, f"hf-{args.dtype}.json"), "w") as f:
        json.dump({"vectors": vectors, "timings": timings, "torch": torch.__version__, "device": torch.cuda.get_device_name()}, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["build", "run"])
    parser.add_argument("dir")
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
