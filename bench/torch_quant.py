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


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def time_calls(fn, sets, calls=20, repeats=15, warmup=3):
    for _ in range(warmup):
        for i in range(calls):
            fn(sets[i % len(sets)])
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            fn(sets[i % len(sets)])
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    return median(samples)


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
