"""PyTorch baseline for `npm run bench:spec`: HF transformers assisted generation (generate() with
assistant_model: HF's speculative decoding) against plain generate(), batch 1, bf16, the shapes of
bench/speculative.ts.

Reads a JSON spec on stdin: {"model": "gpt2"|"llama", "config": {...HF config...}, "draft_layers": 2} (random
HF-initialised target; the draft is its first draft_layers layers with its embeddings, final norm and head,
as in bench/speculative.ts; the weights differ from ours, so α differs too) or {"target_dir": D, "draft_dir": D};
plus "prompt", "new_tokens", "reps", "ks". Prints one JSON line:
  {"plain": {T: {"ms_per_token"}}, "assisted": {T: {K: {"ms_per_token", "tokens_per_pass"}}}} for T in "0", "1"
(T = 0 greedy; T = 1 sampling with top-k 50) and K in ks plus "adaptive" (HF's "heuristic" schedule from 4).
Fixed K: num_assistant_tokens_schedule "constant" and assistant_confidence_threshold 0 (drafts are never cut
short). ms/token = whole generate() calls (wall clock after a synchronize) / new tokens, median of `reps`
after a warm-up: the measure bench/speculative.ts uses. tokens_per_pass = new tokens / target forward calls.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from torch_timing import median, timed


def build(model, config):
    config = {k: v for k, v in config.items() if v is not None}
    if model == "gpt2":
        return GPT2LMHeadModel(GPT2Config(**config))
    return LlamaForCausalLM(LlamaConfig(**config))


def models(spec):
    if "target_dir" in spec:
        load = lambda d: AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.bfloat16)
        return load(spec["target_dir"]), load(spec["draft_dir"])
    torch.manual_seed(1)
    target = build(spec["model"], spec["config"])
    draft_config = dict(spec["config"])
    draft_config["n_layer" if spec["model"] == "gpt2" else "num_hidden_layers"] = spec["draft_layers"]
    draft = build(spec["model"], draft_config)
    missing, _ = draft.load_state_dict(target.state_dict(), strict=False)
    if [m for m in missing if not m.endswith("lm_head.weight")]:
        raise RuntimeError(f"draft weights not copied: {missing[:3]}")
    return target, draft


def main():
    spec = json.load(sys.stdin)
    target, draft = models(spec)
    for m in (target, draft):
        m.to(device="cuda", dtype=torch.bfloat16).eval()
        m.generation_config.eos_token_id = None
        m.generation_config.pad_token_id = 0
    calls = {"target": 0}
    target.register_forward_pre_hook(lambda *_: calls.__setitem__("target", calls["target"] + 1))
    torch.manual_seed(0)
    vocab = target.config.vocab_size
    ids = torch.tensor([spec["prompt_ids"]], device="cuda") if "prompt_ids" in spec else torch.randint(0, vocab, (1, spec["prompt"]), device="cuda")
    mask = torch.ones_like(ids)
    new = spec["new_tokens"]
    results = {"plain": {}, "assisted": {}}
    for label, sampling in (("0", {"do_sample": False}), ("1", {"do_sample": True, "temperature": 1.0, "top_k": 50})):
        def generate(**extra):
            out = target.generate(ids, attention_mask=mask, max_new_tokens=new, pad_token_id=0, **sampling, **extra)
            if out.shape[1] != spec["prompt"] + new:
                raise RuntimeError(f"generate() made {out.shape[1] - spec['prompt']} tokens, expected {new}")

        def measure(**extra):
            generate(**extra)
            calls["target"] = 0
            times = [timed(lambda: generate(**extra)) for _ in range(spec["reps"])]
            return {"ms_per_token": median(times) * 1000 / new, "tokens_per_pass": new * spec["reps"] / max(1, calls["target"])}

        with torch.no_grad():
            try:
                results["plain"][label] = {"ms_per_token": measure()["ms_per_token"]}
            except Exception as error:
                results["plain"][label] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
            results["assisted"][label] = {}
            for k in [*spec["ks"], "adaptive"]:
                g = draft.generation_config
                g.num_assistant_tokens = 4 if k == "adaptive" else k
                g.num_assistant_tokens_schedule = "heuristic" if k == "adaptive" else "constant"
                if k != "adaptive" and hasattr(g, "assistant_confidence_threshold"):
                    g.assistant_confidence_threshold = 0.0
                try:
                    results["assisted"][label][str(k)] = measure(assistant_model=draft)
                except Exception as error:
                    results["assisted"][label][str(k)] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
                print(f"HF T={label} K={k}: {results['assisted'][label][str(k)]}", file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
