"""Hugging Face reference for fuseformer's training-step checks (run on the GPU machine).

Usage: python3 bench/hf_reference.py <dir>
<dir> holds config.json, model.safetensors (fp32 weights, HF names) and batch.json
({"tokens": [[...]], "targets": [[...]], "dtype": "f32"|"bf16", "steps": n, "lr": x, ...}).

Writes <dir>/reference.safetensors with every parameter's gradient of the mean loss (fp32, at the
given weights), and <dir>/reference.json with the loss and, when steps > 0, the loss curve of `steps`
AdamW steps on the same batch sequence (batches repeat) — the same optimizer settings fuseformer uses.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM


def main(directory):
    with open(os.path.join(directory, "batch.json")) as f:
        spec = json.load(f)
    config = AutoConfig.from_pretrained(directory)
    config.attn_implementation = "eager"
    kind = spec.get("kind", "causal-lm")
    cls = AutoModelForCausalLM if kind == "causal-lm" else AutoModelForMaskedLM
    model = cls.from_config(config, attn_implementation="eager").cuda().float()
    state = load_file(os.path.join(directory, "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied or derived tensors and buffers that fuseformer does not store.
    missing = [m for m in missing if not m.endswith("lm_head.weight") and "attn.bias" not in m and "masked_bias" not in m
               and "position_ids" not in m and not m.startswith("cls.predictions.decoder.")]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.train()  # dropout is 0 in the configs we check, so train() only matters for BERT's heads

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[spec["dtype"]]
    tokens = torch.tensor(spec["tokens"], dtype=torch.long, device="cuda")
    targets = torch.tensor(spec["targets"], dtype=torch.long, device="cuda")
    ignore = spec.get("ignore_index", -100)

    def loss_of(tok, tgt):
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            logits = model(input_ids=tok).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=ignore)

    loss = loss_of(tokens[0], targets[0])
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            grads[name] = p.grad.detach().float().contiguous().cpu()
    save_file(grads, os.path.join(directory, "reference.safetensors"))
    result = {"loss": loss.item(), "curve": []}

    steps = spec.get("steps", 0)
    if steps:
        model.zero_grad(set_to_none=True)
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": spec["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=spec["lr"], betas=(spec["beta1"], spec["beta2"]), eps=spec["eps"], fused=True)
        for step in range(steps):
            i = step % tokens.shape[0]
            loss = loss_of(tokens[i], targets[i])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec["max_grad_norm"])
            opt.step()
            opt.zero_grad(set_to_none=True)
            result["curve"].append(loss.item())
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
