"""PyTorch baselines for `npm run bench:quant`: the bf16 linear layer (x @ W.T) at the same shapes.

Reads a JSON list of cases {id, M, N, K} on stdin (written by bench/quant.ts) and prints JSON
{torch version, device, results: {case id: median ms per call}}. Timing matches the fuseformer side:
the weights rotate over enough sets to exceed the L2 cache, CUDA events around `calls` back-to-back
calls, the median of `repeats` after warm-up (eager, as a PyTorch user runs it).
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch_timing import median, time_calls


def main():
    cases = json.load(sys.stdin)
    results = {}
    for case in cases:
        try:
            M, N, K, sets = case["M"], case["N"], case["K"], case.get("sets", 4)
            data = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
                     (torch.randn(N, K, device="cuda") * 0.02).to(torch.bfloat16)) for _ in range(sets)]
            results[case["id"]] = time_calls(lambda s: F.linear(s[0], s[1]), data)
        except Exception as error:  # a baseline that cannot run is reported, not fatal
            results[case["id"]] = None
            print(f"torch baseline {case['id']} failed: {error}", file=sys.stderr)
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
