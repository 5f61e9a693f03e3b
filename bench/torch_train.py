"""PyTorch baselines for `npm run bench:train`: HF transformers models trained the way Python users
train them — eager with bf16 (or fp16) autocast and fused AdamW, and the same under torch.compile.

Reads a JSON spec on stdin ({"model": "gpt2"|"bert", "config": {...HF config...}, "batch", "seq_len",
"dtype", "steps", "warmup", "modes": ["eager", "compile"]}) and prints JSON per mode:
{"tokens_per_s", "step_ms" (median), "peak_bytes", "loss"}. Timing: CUDA events around each whole
step (forward, backward, clip, optimizer) after warm-up; the median over the timed steps.
"""
import json
import sys
import time

import torch
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel


def build(spec):
    if spec["model"] == "gpt2":
        return GPT2LMHeadModel(GPT2Config(**spec["config"]))
    return BertForMaskedLM(BertConfig(**spec["config"]))


def run_mode(spec, mode):
    torch.manual_seed(0)
    model = build(spec).cuda()
    model.train()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[spec["dtype"]]
    B, L = spec["batch"], spec["seq_len"]
    vocab = spec["config"]["vocab_size"]
    tokens = torch.randint(0, vocab, (B, L), device="cuda")
    targets = torch.randint(0, vocab, (B, L), device="cuda")
    if spec["model"] == "bert":
        # masked LM: 15% of positions carry a target, the rest are ignored
        keep = torch.rand(B, L, device="cuda") < 0.15
        targets = torch.where(keep, targets, torch.full_like(targets, -100))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    forward = torch.compile(model) if mode == "compile" else model

    def step():
        with torch.autocast("cuda", dtype=dtype):
            logits = forward(input_ids=tokens).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-100)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for _ in range(spec["warmup"]):
        step()
    torch.cuda.synchronize()
    warmup_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    times = []
    loss = None
    for _ in range(spec["steps"]):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    median_ms = times[len(times) // 2]
    result = {
        "step_ms": median_ms,
        "tokens_per_s": B * L / (median_ms / 1000),
        "peak_bytes": torch.cuda.max_memory_allocated(),
        "loss": loss.item(),
        "warmup_s": warmup_s,
    }
    del model, opt, forward
    torch.cuda.empty_cache()
    return result


def main():
    spec = json.load(sys.stdin)
    results = {"torch": torch.__version__}
    for mode in spec["modes"]:
        try:
            results[mode] = run_mode(spec, mode)
        except Exception as e:  # report, don't hide: the TS side prints it
            results[mode] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
