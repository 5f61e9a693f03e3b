"""PyTorch baselines for `npm run bench:beam` (run on the GPU machine).

Reads a JSON spec on stdin and prints JSON:
  {"mode": "generate", "dir": D, "dtype": "bf16"|"f32", "beams": K, "max_new_tokens": N, "batches": [1, 32],
   "warmup": W, "iters": I}
      MarianMTModel.generate(num_beams=K, max_new_tokens=N) on the first B sources of D/sources.json, for each
      batch size B: {"<B>": {"total_ms": median wall time of a generate call (CUDA-synchronised), "steps":
      generated positions}}. This is how Python users run translation: eager, with the static KV cache
      logic of transformers' own beam search.
  {"mode": "topk", "vocabs": [...], "beams": K, "batches": [...], "dtype": "bf16", "iters": I}
      The candidate selection of one beam-search step as HF's generate computes it: logits (dtype) → f32
      log_softmax → + running beam scores → top 2K over each item's K·V candidates. Per (V, B):
      {"hf_eager_us": per call in an eager loop, "hf_graph_us": the same captured in a CUDA graph (kernel time
      only), "topk_graph_us": torch.topk alone over f32 scores, in a graph}.
"""
import json
import statistics
import sys
import time

import torch
from torch_timing import capture_graph


def generate(spec):
    from transformers import MarianMTModel

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[spec["dtype"]]
    model = MarianMTModel.from_pretrained(spec["dir"]).to(device="cuda", dtype=dtype).eval()
    with open(f"{spec['dir']}/sources.json") as f:
        sources = json.load(f)["sources"]
    pad = model.config.pad_token_id
    result = {}
    for batch in spec["batches"]:
        chunk = sources[:batch]
        longest = max(len(s) for s in chunk)
        ids = torch.tensor([s + [pad] * (longest - len(s)) for s in chunk], device="cuda")
        mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in chunk], device="cuda")
        times, steps = [], 0
        for i in range(spec["warmup"] + spec["iters"]):
            torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, num_beams=spec["beams"],
                                     max_new_tokens=spec["max_new_tokens"], do_sample=False)
            torch.cuda.synchronize()
            if i >= spec["warmup"]:
                times.append((time.perf_counter() - start) * 1e3)
            steps = out.shape[1] - 1
        result[str(batch)] = {"total_ms": statistics.median(times), "steps": steps}
    return result


def time_graph(fn, iters):
    graph = capture_graph(fn, 20)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (iters * 20)


def topk(spec):
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[spec["dtype"]]
    k, iters = spec["beams"], spec["iters"]
    result = {}
    for vocab in spec["vocabs"]:
        for batch in spec["batches"]:
            logits = torch.randn(batch * k, vocab, device="cuda").to(dtype)
            scores = torch.randn(batch, k, device="cuda")
            flat = torch.randn(batch, k * vocab, device="cuda")

            def hf():
                lp = torch.nn.functional.log_softmax(logits.float(), dim=-1).view(batch, k, vocab) + scores[:, :, None]
                return torch.topk(lp.view(batch, k * vocab), 2 * k)

            for _ in range(5):
                hf()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                hf()
            end.record()
            torch.cuda.synchronize()
            result[f"{vocab}/{batch}"] = {
                "hf_eager_us": start.elapsed_time(end) * 1e3 / iters,
                "hf_graph_us": time_graph(hf, max(1, iters // 20)),
                "topk_graph_us": time_graph(lambda: torch.topk(flat, 2 * k), max(1, iters // 20)),
            }
    return result


def main():
    spec = json.load(sys.stdin)
    out = generate(spec) if spec["mode"] == "generate" else topk(spec)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
