"""PyTorch baseline for bench/sample-speed.ts: a token drawn the way transformers' generate() samples.

Reads a JSON list of cases on stdin; for each, a [B, V] bf16 row of normal(0, sigma) logits, then
transformers' logits processors as written in generation/logits_process.py — temperature, top-k
(torch.topk's k-th value, the rest -inf), top-p (an ascending sort, softmax, cumsum, the tail below
1 - p removed, scattered back) — then softmax and torch.multinomial; greedy is argmax. Prints JSON
{"version", "results": {id: {"eager": ms, "graph": ms or null}}}: eager launches from Python as
generate() does; "graph" replays the same work captured into a CUDA graph (the kernels alone).
"""
import json
import sys

import torch
from torch_timing import capture_graph, time_calls


def sample(logits, temperature, top_k, top_p):
    if temperature == 0:
        return logits.argmax(-1)
    scores = logits.float() / temperature
    if top_k > 0:
        kth = torch.topk(scores, min(top_k, scores.size(-1)))[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -1:] = 0
        scores = scores.masked_fill(remove.scatter(1, sorted_indices, remove), float("-inf"))
    return torch.multinomial(scores.softmax(dim=-1), num_samples=1).squeeze(1)


def graph_ms(fn, reps):
    graph = capture_graph(fn, 20)
    return time_calls(lambda _: graph.replay(), [None], calls=1, repeats=reps) / 20


def main():
    cases = json.load(sys.stdin)
    results = {}
    for c in cases:
        logits = (torch.randn([c["B"], c["V"]], device="cuda") * c["sigma"]).to(torch.bfloat16)
        fn = lambda: sample(logits, c["temperature"], c["topK"], c["topP"])
        eager = time_calls(lambda _: fn(), [None], calls=20, repeats=c["reps"])
        try:
            graph = graph_ms(fn, c["reps"])
        except Exception as e:  # capture refused: report eager alone
            print(f"{c['id']}: graph capture failed: {e}", file=sys.stderr)
            graph = None
        results[c["id"]] = {"eager": eager, "graph": graph}
    print(json.dumps({"version": torch.__version__, "results": results}))


if __name__ == "__main__":
    main()
