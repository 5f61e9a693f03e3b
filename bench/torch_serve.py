"""HF transformers baseline for `npm run bench:serve-speed`: generate() on static batches, as Python users batch.

Reads a JSON spec on stdin ({"config": {...HF Llama config...}, "seed": 1, "runs": [{"concurrency": 16,
"batches": [[{"prompt": 212, "output": 97}, ...], ...]}, ...]}) and prints one JSON line:
{concurrency: {"requests", "batches", "useful_tokens", "padded_tokens", "seconds", "tokens_per_s",
"padded_tokens_per_s"} or {"error"}}.

LlamaForCausalLM from the config, random init, bf16, CUDA, eager (dynamic KV cache). Each batch: the
requests' prompts (random tokens of the drawn lengths) left-padded to the batch's longest, generate()
greedy with max_new_tokens = min_new_tokens = the batch's longest drawn output and no EOS, so every row
makes exactly that many tokens; only each request's own drawn output length counts as useful. Time =
wall clock of the generate() call between synchronizes; tokens/s = Σ useful tokens ÷ Σ batch times.
A warm-up generate() at each batch size runs first. A concurrency whose batch fails (out of memory, say)
reports the error and the next concurrency still runs.
"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

PAD = 0


def build(spec):
    config = LlamaConfig(**{k: v for k, v in spec["config"].items() if v is not None})
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = PAD
    return model


def batch_inputs(batch, vocab, generator):
    """Left-padded ids and attention mask for the batch's prompt lengths."""
    width = max(r["prompt"] for r in batch)
    ids = torch.full((len(batch), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, r in enumerate(batch):
        n = r["prompt"]
        ids[i, width - n:] = torch.randint(1, vocab, (n,), generator=generator)
        mask[i, width - n:] = 1
    return ids.cuda(), mask.cuda()


def generate(model, ids, mask, new):
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=PAD)
    if out.shape[1] != ids.shape[1] + new:
        raise RuntimeError(f"generate() made {out.shape[1] - ids.shape[1]} tokens, expected {new}")


def run(model, spec, run_spec, generator):
    vocab = spec["config"]["vocab_size"]
    batches = run_spec["batches"]
    warm_ids, warm_mask = batch_inputs([{"prompt": 16}] * len(batches[0]), vocab, generator)
    generate(model, warm_ids, warm_mask, 4)
    seconds, useful, padded, requests = 0.0, 0, 0, 0
    for batch in batches:
        ids, mask = batch_inputs(batch, vocab, generator)
        new = max(r["output"] for r in batch)
        torch.cuda.synchronize()
        start = time.perf_counter()
        generate(model, ids, mask, new)
        torch.cuda.synchronize()
        seconds += time.perf_counter() - start
        useful += sum(r["output"] for r in batch)
        padded += new * len(batch)
        requests += len(batch)
        del ids, mask
    return {
        "requests": requests, "batches": len(batches), "useful_tokens": useful, "padded_tokens": padded, "seconds": seconds,
        "tokens_per_s": useful / seconds, "padded_tokens_per_s": padded / seconds,
    }


def main():
    spec = json.load(sys.stdin)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(spec["seed"])
    generator = torch.Generator().manual_seed(spec["seed"])
    model = build(spec)
    results = {}
    for run_spec in spec["runs"]:
        key = str(run_spec["concurrency"])
        try:
            with torch.no_grad():
                results[key] = run(model, spec, run_spec, generator)
        except Exception as error:  # reported in the row, not fatal: the other concurrencies still run
            results[key] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
        torch.cuda.empty_cache()
        print(f"HF generate, concurrency {key}: {results[key]}", file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
