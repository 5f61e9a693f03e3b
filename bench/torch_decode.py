"""PyTorch baselines for `npm run bench:decode`: HF transformers generate(), greedy (or sampled, with the
spec's "sampling": temperature, topK, topP), as Python users run it.

Reads a JSON spec on stdin ({"model": "gpt2"|"llama", "config": {...HF config...}, "batches": [1, 32],
"prompt": 32, "new_tokens": 128, "reps": 5, "modes": ["eager", "static-compile", "static"]}) and prints one
JSON line: {mode: {batch: {"ms_per_token", "tokens_per_s"} or {"error"}}}.

Modes: "eager" is generate() with the default dynamic KV cache; "static-compile" is
cache_implementation="static" with model.forward compiled (torch.compile mode "reduce-overhead",
fullgraph=True: HF's documented recipe for a static cache, CUDA graphs included; each call marks a new
CUDA-graph step and clones the logits, which generate() reads after the next replay — without that,
torch 2.11 refuses with "accessing tensor output of CUDAGraphs that has been overwritten"; generate()'s
own compile is disabled for it); "static" is the static cache as generate() runs it, which transformers 5
compiles by itself (GenerationConfig.compile_config, auto-compile on CUDA for a compileable cache). Random bf16 weights; EOS disabled so every call makes exactly the tokens asked.
Per-token time = (T(new_tokens) − T(1)) / (new_tokens − 1) of whole generate() calls (wall clock after a
synchronize), medians of `reps` calls after warm-up, so prefill cancels out.
"""
import json
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
from torch_timing import median, timed


def build(spec):
    config = {k: v for k, v in spec["config"].items() if v is not None}
    if spec["model"] == "gpt2":
        return GPT2LMHeadModel(GPT2Config(**config))
    if config.pop("model_type", None) == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(**config))
    return LlamaForCausalLM(LlamaConfig(**config))


def graph_safe(compiled):
    """A compiled forward whose logits outlive the next CUDA-graph replay (see the header)."""
    def forward(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(*args, **kwargs)
        out.logits = out.logits.clone()
        return out
    return forward


def run_mode(model, spec, mode, batch):
    torch.manual_seed(0)
    vocab = spec["config"]["vocab_size"]
    ids = torch.randint(0, vocab, (batch, spec["prompt"]), device="cuda")
    mask = torch.ones_like(ids)
    extra = {"cache_implementation": "static"} if mode.startswith("static") else {}

    sampling = spec.get("sampling") or {"temperature": 0}
    if sampling["temperature"] > 0:
        # Sampled as ours is (bench/decode.ts --sampling): temperature, top-k (0 = off), top-p.
        extra.update(do_sample=True, temperature=sampling["temperature"], top_k=sampling["topK"] or None, top_p=sampling["topP"])
    else:
        extra.update(do_sample=False)

    def generate(n):
        return model.generate(ids, attention_mask=mask, max_new_tokens=n, pad_token_id=0, **extra)

    new = spec["new_tokens"]
    out = generate(new)  # warm-up (and compilation for static-compile: prefill and decode shapes)
    if out.shape[1] != spec["prompt"] + new:
        raise RuntimeError(f"generate() made {out.shape[1] - spec['prompt']} tokens, expected {new}")
    generate(1)
    generate(new)
    reps = spec["reps"]
    full = median([timed(lambda: generate(new)) for _ in range(reps)])
    prefill = median([timed(lambda: generate(1)) for _ in range(reps)])
    per_token = (full - prefill) / (new - 1)
    return {"ms_per_token": per_token * 1000, "tokens_per_s": batch / per_token}


def main():
    spec = json.load(sys.stdin)
    torch.backends.cuda.matmul.allow_tf32 = True
    results = {}
    for mode in spec["modes"]:
        results[mode] = {}
        try:
            # Built on the GPU: an 8B model's random init on the CPU takes minutes (the weights are random either way).
            with torch.device("cuda"):
                model = build(spec).to(dtype=torch.bfloat16).eval()
            model.generation_config.eos_token_id = None
            model.generation_config.pad_token_id = 0
            if mode == "static-compile":
                # Ours instead of generate()'s own compile of a static-cache forward (transformers 5 compiles
                # it unless told not to): two compiles of one forward are not what either recipe measures.
                model.generation_config.disable_compile = True
                model.forward = graph_safe(torch.compile(model.forward, mode="reduce-overhead", fullgraph=True))
        except Exception as error:  # a mode that cannot be set up is reported, not fatal
            results[mode] = {str(b): {"error": f"{type(error).__name__}: {error}"} for b in spec["batches"]}
            continue
        for batch in spec["batches"]:
            try:
                with torch.no_grad():
                    results[mode][str(batch)] = run_mode(model, spec, mode, batch)
            except Exception as error:
                results[mode][str(batch)] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
            print(f"{spec['model']} {mode} batch {batch}: {results[mode][str(batch)]}", file=sys.stderr)
            # Each row on stdout as it is measured: a crash in a later mode (torch 2.11's compiled static
            # cache ended the process with SIGSEGV) keeps the rows already made.
            print(json.dumps({"mode": mode, "batch": batch, "result": results[mode][str(batch)]}), flush=True)
        del model
        torch.cuda.empty_cache()
        if mode == "static-compile":
            torch._dynamo.reset()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
