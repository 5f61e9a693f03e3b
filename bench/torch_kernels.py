"""PyTorch eager baselines for `npm run bench:kernels`.

Reads a JSON list of cases on stdin (written by bench/kernels.ts), runs the same computation as each
fuseformer op the way PyTorch eager users write it, and prints JSON {case id: median ms per call}.

Timing matches the fuseformer side: inputs rotate over several buffer sets (so HBM, not L2, is
measured), CUDA events around `calls` back-to-back calls, the median over `repeats` after warm-up.
Eager launches every kernel from Python, exactly as a user's training loop does.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F
from torch_timing import median, time_calls

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def randn(shape, dtype, scale=1.0):
    return (torch.randn(shape, device="cuda", dtype=torch.float32) * scale).to(dtype)


def make_case(case):
    """Returns (fn, make_set): make_set() builds one input set, fn(set) runs the eager computation."""
    op, dt = case["op"], DTYPES[case["dtype"]]
    p = case.get("p", 0.1)
    if op == "layerNormForward":
        rows, H = case["rows"], case["H"]
        w, b = randn([H], dt), randn([H], dt)
        return (lambda s: F.layer_norm(s[0], (H,), w, b, 1e-5)), (lambda: [randn([rows, H], dt)])
    if op == "layerNormBackward":
        rows, H = case["rows"], case["H"]
        w, b = randn([H], dt), randn([H], dt)

        def make():
            x = randn([rows, H], dt)
            _, mean, rstd = torch.ops.aten.native_layer_norm(x, [H], w, b, 1e-5)
            return [randn([rows, H], dt), x, mean, rstd]
        return (lambda s: torch.ops.aten.native_layer_norm_backward(s[0], s[1], [H], s[2], s[3], w, b, [True, True, True])), make
    if op == "rmsNormForward":
        rows, H = case["rows"], case["H"]
        w = randn([H], dt)
        return (lambda s: F.rms_norm(s[0], (H,), w, 1e-6)), (lambda: [randn([rows, H], dt)])
    if op == "softmaxForward":
        B, heads, L = case["B"], case["heads"], case["L"]
        scale = 1 / math.sqrt(64)
        if case.get("causal"):
            mask = torch.ones(L, L, device="cuda", dtype=torch.bool).tril()
        else:
            lengths = torch.randint(L // 2, L + 1, (B,), device="cuda")
            mask = (torch.arange(L, device="cuda")[None, :] < lengths[:, None])[:, None, None, :]
        neg = torch.tensor(float("-inf"), device="cuda", dtype=dt)
        return (lambda s: torch.softmax(torch.where(mask, s[0] * scale, neg), dim=-1)), (lambda: [randn([B, heads, L, L], dt)])
    if op == "softmaxBackward":
        B, heads, L = case["B"], case["heads"], case["L"]
        scale = 1 / math.sqrt(64)
        return (lambda s: torch._softmax_backward_data(s[0], s[1], -1, dt) * scale), (
            lambda: [randn([B, heads, L, L], dt), torch.softmax(randn([B, heads, L, L], dt), -1)])
    if op == "biasDropoutResidual":
        rows, H = case["rows"], case["H"]
        bias = randn([H], dt)
        return (lambda s: F.dropout(s[0] + bias, p, training=True) + s[1]), (lambda: [randn([rows, H], dt), randn([rows, H], dt)])
    if op == "biasDropoutResidualBackward":
        rows, H = case["rows"], case["H"]

        def fn(s):
            d = torch.ops.aten.native_dropout_backward(s[0], s[1], 1 / (1 - p))
            return d, d.sum(0)
        return fn, (lambda: [randn([rows, H], dt), torch.rand(rows, H, device="cuda") >= p])
    if op == "biasActivationDropout":
        rows, H = case["rows"], case["H"]
        bias = randn([H], dt)
        approx = "tanh" if case["activation"] == "gelu_tanh" else "none"
        return (lambda s: F.dropout(F.gelu(s[0] + bias, approximate=approx), p, training=True)), (lambda: [randn([rows, H], dt)])
    if op == "biasActivationDropoutBackward":
        rows, H = case["rows"], case["H"]
        bias = randn([H], dt)
        approx = "tanh" if case["activation"] == "gelu_tanh" else "none"

        def fn(s):
            d = torch.ops.aten.native_dropout_backward(s[0], s[2], 1 / (1 - p))
            d = torch.ops.aten.gelu_backward(d, s[1] + bias, approximate=approx)
            return d, d.sum(0)
        return fn, (lambda: [randn([rows, H], dt), randn([rows, H], dt), torch.rand(rows, H, device="cuda") >= p])
    if op == "biasQkvSplit":
        B, L, heads, d = case["B"], case["L"], case["heads"], case["d"]
        bias = randn([3 * heads * d], dt)

        def fn(s):
            q, k, v = (s[0] + bias).view(B, L, 3, heads, d).unbind(2)
            return q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        return fn, (lambda: [randn([B, L, 3 * heads * d], dt)])
    if op == "crossEntropy":
        rows, V = case["rows"], case["V"]

        def fn(s):
            logits = s[0].requires_grad_(True)
            loss = F.cross_entropy(logits, s[1], ignore_index=-100, reduction="sum", label_smoothing=case.get("smoothing", 0.0))
            return torch.autograd.grad(loss, logits)
        return fn, (lambda: [randn([rows, V], dt, 2), torch.randint(0, V, (rows,), device="cuda")])
    if op == "embeddingForward":
        B, L, V, H = case["B"], case["L"], case["V"], case["H"]
        wte, wpe = randn([V, H], dt, 0.02), randn([L, H], dt, 0.02)
        pos = torch.arange(L, device="cuda")
        return (lambda s: F.dropout(F.embedding(s[0], wte) + F.embedding(pos, wpe), p, training=True)), (
            lambda: [torch.randint(0, V, (B, L), device="cuda")])
    if op == "adamW":
        n = case["n"]
        param = torch.nn.Parameter(randn([n], dt))
        opt = torch.optim.AdamW([param], lr=1e-3, weight_decay=0.01, fused=True)

        def make():
            return [randn([n], dt, 0.1)]

        def fn(s):
            param.grad = s[0]
            opt.step()
        return fn, make
    raise ValueError(f"unknown op {op}")


def main():
    cases = json.load(sys.stdin)
    results = {}
    for case in cases:
        try:
            fn, make_set = make_case(case)
            sets = [make_set() for _ in range(case.get("sets", 4))]
            results[case["id"]] = time_calls(fn, sets)
        except Exception as error:  # a baseline that cannot run is reported, not fatal
            results[case["id"]] = None
            print(f"torch baseline {case['id']} failed: {error}", file=sys.stderr)
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
