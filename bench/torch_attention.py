"""PyTorch side of `npm run bench:attention` (bench/attention.ts runs it and reads its stdout).

Reads one JSON object on stdin:
  {"mode": "time", "repeats": n, "sampleMs": ms, "shapes": [{id, B, H, L, d, causal[, dropout]}, ...]}
      times torch SDPA with sdpa_kernel(SDPBackend.FLASH_ATTENTION) and (CUDNN_ATTENTION): the
      training forward (inputs require grad, so the kernel saves its logsumexp) and forward +
      backward (torch.autograd.grad, no .grad accumulation); bf16, CUDA events around back-to-back
      calls after warm-up, median; "dropout" (p) is SDPA's dropout_p (attention dropout inside the kernel).
      Prints {"torch": version, "results": {id: {flash_fwd, flash_fwdbwd,
      cudnn_fwd, cudnn_fwdbwd}}} in ms per call (null where a backend refuses the shape).
  {"mode": "check", "cases": [{id, B, Hq, Hkv, Lq, Lk, d, causal, dir}, ...]}
      reads q, k, v, dOut, out, lse, dq, dk, dv (raw little-endian f32) from each dir, recomputes out,
      lse and the gradients with SDPA's math backend in fp32 (causal = keys j <= i + Lk - Lq, the
      fuseformer contract, as an explicit mask), and prints relative errors ||ours - ref|| / ||ref||.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch_timing import median

OUT_TOLERANCE = 1e-2
GRAD_TOLERANCE = 2e-2


def time_calls(fn, repeats, sample_ms):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample(calls):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / calls

    once = sample(1)
    calls = max(1, min(50, round(sample_ms / max(once, 1e-3))))
    sample(calls)
    sample(calls)
    return median([sample(calls) for _ in range(repeats)])


def time_shapes(request):
    results = {}
    for s in request["shapes"]:
        B, H, L, d, causal, p = s["B"], s["H"], s["L"], s["d"], s["causal"], s.get("dropout", 0.0)
        q, k, v, dout = (torch.randn(B, H, L, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        entry = {}
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    def forward():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=p)

                    def forward_backward():
                        torch.autograd.grad(forward(), (q, k, v), dout)

                    entry[f"{name}_fwd"] = time_calls(forward, request["repeats"], request["sampleMs"])
                    entry[f"{name}_fwdbwd"] = time_calls(forward_backward, request["repeats"], request["sampleMs"])
            except RuntimeError as error:
                print(f"torch SDPA {name} refused {s['id']}: {str(error).splitlines()[0]}", file=sys.stderr)
                entry.setdefault(f"{name}_fwd", None)
                entry.setdefault(f"{name}_fwdbwd", None)
        results[s["id"]] = entry
        del q, k, v, dout
        torch.cuda.empty_cache()
    return {"torch": torch.__version__, "results": results}


def load(directory, name, shape):
    data = np.fromfile(os.path.join(directory, f"{name}.f32"), dtype="<f4")
    if data.size != math.prod(shape):
        raise ValueError(f"{directory}/{name}.f32 holds {data.size} floats, expected {shape}")
    return torch.from_numpy(data.reshape(shape)).cuda()


def rel_err(ours, ref):
    ref = ref.double()
    return float((ours.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def check_cases(request):
    results = []
    for c in request["cases"]:
        B, Hq, Hkv, Lq, Lk, d, causal, folder = c["B"], c["Hq"], c["Hkv"], c["Lq"], c["Lk"], c["d"], c["causal"], c["dir"]
        qs, kvs = (B, Hq, Lq, d), (B, Hkv, Lk, d)
        q, k, v = (load(folder, n, s).requires_grad_(True) for n, s in (("q", qs), ("k", kvs), ("v", kvs)))
        dout = load(folder, "dOut", qs)
        mask = None
        if causal:
            i = torch.arange(Lq, device="cuda")[:, None]
            j = torch.arange(Lk, device="cuda")[None, :]
            mask = j <= i + (Lk - Lq)
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=Hq != Hkv)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
        with torch.no_grad():
            group = Hq // Hkv
            scores = (q @ k.repeat_interleave(group, dim=1).transpose(-1, -2)) / math.sqrt(d)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            lse = torch.logsumexp(scores, dim=-1)
        errors = {
            "out": rel_err(load(folder, "out", qs), out), "lse": rel_err(load(folder, "lse", (B, Hq, Lq)), lse),
            "dq": rel_err(load(folder, "dq", qs), dq), "dk": rel_err(load(folder, "dk", kvs), dk),
            "dv": rel_err(load(folder, "dv", kvs), dv),
        }
        ok = errors["out"] <= OUT_TOLERANCE and errors["lse"] <= OUT_TOLERANCE and all(errors[g] <= GRAD_TOLERANCE for g in ("dq", "dk", "dv"))
        results.append({"id": c["id"], "errors": errors, "pass": bool(ok)})
        del q, k, v, dout, out, dq, dk, dv, scores, lse
        torch.cuda.empty_cache()
    return {"torch": torch.__version__, "results": results}


def main():
    request = json.load(sys.stdin)
    if request["mode"] == "time":
        print(json.dumps(time_shapes(request)))
    elif request["mode"] == "check":
        print(json.dumps(check_cases(request)))
    else:
        raise ValueError(f"unknown mode {request['mode']!r} (expected 'time' or 'check')")


if __name__ == "__main__":
    main()
