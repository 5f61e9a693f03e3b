"""Hugging Face reference for `npm run check:infer` (bench/infer-parity.ts; run on the GPU machine).

Usage: python3 bench/hf_infer.py <workdir>

Creates random-init models with save_pretrained (safetensors; one of them sharded), each with a
tokenizer.json (byte-level: 256 byte tokens + <|endoftext|>, written by hand so the `tokenizers` package is
not needed) and a generation_config.json, and for each model and dtype (fp32, bf16):
  - logits of every prompt (several lengths) at every position;
  - greedy generation of 128 new tokens per prompt (EOS disabled), with the top-1 − top-2 logit gap of
    every step (so the checker can tell a near tie from a real disagreement);
  - logits of prompt + generated tokens at the generated positions (KV-cache parity under teacher forcing).
And BERT-family encoders (BertModel and XLMRobertaModel with their poolers; BertForMaskedLM and RobertaForMaskedLM with their tied MLM heads), each run on one
right-padded batch of several lengths with token types, in fp32 and bf16: last_hidden_state,
pooler_output (BertModel), MLM logits (BertForMaskedLM) and L2-normalised mean-pooled embeddings.
And an "exact" reference for the bf16 runs: the bf16-rounded weights computed in fp32
(reference-exact.safetensors: prompt logits, and the continuation logits over the bf16 greedy tokens; the
same encoder outputs for BERT). A bf16 run can be no closer to the truth than that; HF's fp32 outputs also
carry the weights' rounding, which neither bf16 implementation can avoid.
Writes <workdir>/<case>/ (the model folder) and <workdir>/<case>/reference-<dtype>.safetensors +
reference-<dtype>.json, and <workdir>/cases.json listing the cases (with their family).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (BertConfig, BertForMaskedLM, BertModel, DistilBertConfig, DistilBertModel, MPNetConfig, MPNetModel, RobertaConfig, RobertaForMaskedLM, XLMRobertaConfig, XLMRobertaModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

# The GPU machine has one; elsewhere the references run on the CPU (slower, the same numbers to rounding).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

NEW_TOKENS = 128
PROMPT_LENGTHS = [1, 7, 32, 100]
BERT_LENGTHS = [1, 7, 32, 100, 64]


def bytes_to_unicode():
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars = {b: chr(b) for b in printable}
    n = 256
    for b in range(256):
        if b not in chars:
            chars[b] = chr(n)
            n += 1
    return [chars[b] for b in range(256)]


def write_tokenizer(directory, vocab_size):
    """A byte-level BPE tokenizer.json with no merges: id b is byte b, 256 is <|endoftext|>."""
    vocab = {c: i for i, c in enumerate(bytes_to_unicode())}
    vocab["<|endoftext|>"] = 256
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "model_max_length": 4096}, f)
    assert vocab_size >= 257


def llama3_scaled(config):
    """Llama 3 RoPE scaling, set the way the installed transformers spells it (rope_scaling in 4.x,
    rope_parameters in 5.x), and checked to have taken effect."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
    if hasattr(config, "rope_parameters") and isinstance(getattr(config, "rope_parameters"), dict):
        config.rope_parameters = {**config.rope_parameters, **scaling, "rope_theta": 500000.0}
    else:
        config.rope_scaling = scaling
    if "llama3" not in json.dumps(config.to_dict()):
        raise SystemExit("could not set Llama 3 RoPE scaling on this transformers version")
    return config


def cases():
    vocab = 5003
    return {
        # GPT-2: learned positions, LayerNorm, GELU(tanh), tied head.
        "gpt2": (GPT2LMHeadModel, GPT2Config(vocab_size=vocab, n_positions=512, n_embd=256, n_layer=4, n_head=8,
                                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=256, eos_token_id=256), {}),
        # Llama with grouped-query attention (8 heads, 2 kv heads), Llama 3 RoPE scaling, untied head, sharded files.
        "llama-gqa": (LlamaForCausalLM, llama3_scaled(LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                                                 num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
                                                                 rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                                                 bos_token_id=256, eos_token_id=256)), {"max_shard_size": "2MB"}),
        # Small Llama: multi-query (1 kv head), tied embeddings, attention and MLP biases, head_dim 64.
        "llama-tied": (LlamaForCausalLM, LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                                                    num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=512,
                                                    tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                                                    bos_token_id=256, eos_token_id=256), {}),
        # Qwen2: biases on q, k and v only, tied embeddings, RoPE base 1e6 (read as a Llama variant).
        "qwen2": (Qwen2ForCausalLM, Qwen2Config(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                                rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                                                bos_token_id=256, eos_token_id=256), {}),
        # Mistral v0.1-style: a sliding window (256 positions, past the longest sequence here, 228: our engine
        # caps its context at the window, inside which the window changes nothing).
        "mistral": (MistralForCausalLM, MistralConfig(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                                                      num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=1024,
                                                      sliding_window=256, bos_token_id=256, eos_token_id=256), {}),
        # Phi-3: q/k/v as one qkv_proj, gate/up as one gate_up_proj (pad_token_id inside this vocabulary).
        "phi3": (Phi3ForCausalLM, Phi3Config(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                                             num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                                             original_max_position_embeddings=512, sliding_window=None, pad_token_id=0,
                                             bos_token_id=256, eos_token_id=256), {}),
        # Qwen3: an RMS norm over each query and key head (q_norm / k_norm, perturbed below like every norm gain)
        # before RoPE; head_dim 48, apart from hidden / heads (32); tied, RoPE base 1e6.
        "qwen3": (Qwen3ForCausalLM, Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                                                num_attention_heads=4, num_key_value_heads=2, head_dim=48, max_position_embeddings=512,
                                                rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                                                bos_token_id=256, eos_token_id=256), {}),
    }


def bert_cases():
    vocab = 3001  # not a multiple of 64: the padded vocabulary rows are exercised
    return {
        # BertModel (saved without the "bert." prefix) with its pooler; erf GELU, head size 64.
        "bert": (BertModel, BertConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                       intermediate_size=1024, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu")),
        # BertForMaskedLM (the "bert." prefix, no pooler, tied decoder); tanh GELU, head size 80, three token types.
        "bert-mlm": (BertForMaskedLM, BertConfig(vocab_size=vocab, hidden_size=160, num_hidden_layers=3, num_attention_heads=2,
                                                 intermediate_size=640, max_position_embeddings=256, type_vocab_size=3,
                                                 hidden_act="gelu_new")),
        # XLMRobertaModel (unprefixed, with its pooler) and RobertaForMaskedLM ("roberta." prefix, lm_head.*):
        # positions from pad_token_id + 1; random ids include the padding id, which HF gives pad_token_id's position.
        "xlm-roberta": (XLMRobertaModel, XLMRobertaConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=3, num_attention_heads=4,
                                                          intermediate_size=1024, max_position_embeddings=130, type_vocab_size=1,
                                                          pad_token_id=1, hidden_act="gelu")),
        "roberta-mlm": (RobertaForMaskedLM, RobertaConfig(vocab_size=vocab, hidden_size=192, num_hidden_layers=2, num_attention_heads=3,
                                                          intermediate_size=768, max_position_embeddings=102, type_vocab_size=1,
                                                          pad_token_id=1, hidden_act="gelu")),
        # MPNetModel ("all-mpnet-base-v2"'s architecture, with its pooler): no token types, a relative position
        # bias over 32 buckets shared by the layers; rows of 100 tokens reach the logarithmic buckets.
        "mpnet": (MPNetModel, MPNetConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=3, num_attention_heads=4,
                                          intermediate_size=1024, max_position_embeddings=130, pad_token_id=1)),
        # DistilBertModel (unprefixed: embeddings.*, transformer.layer.N.*): no token types, no pooler.
        "distilbert": (DistilBertModel, DistilBertConfig(vocab_size=vocab, dim=192, n_layers=2, n_heads=3, hidden_dim=768,
                                                         max_position_embeddings=128)),
    }


def run_bert_cases(workdir, first_index):
    """Random-init BERT encoders: one right-padded batch per model, references in fp32 and bf16."""
    listed = []
    for offset, (name, (cls, config)) in enumerate(bert_cases().items()):
        if not wanted(name):
            continue
        index = first_index + offset
        directory = os.path.join(workdir, name)
        os.makedirs(directory, exist_ok=True)
        torch.manual_seed(1000 + index)
        config.initializer_range = 0.05
        config.hidden_dropout_prob = 0.0
        config.attention_probs_dropout_prob = 0.0
        model = cls(config)
        with torch.no_grad():
            for parameter_name, parameter in model.named_parameters():
                if parameter_name.endswith("bias") or "layernorm" in parameter_name.lower():
                    parameter.add_(torch.randn_like(parameter) * 0.1)
        model.save_pretrained(directory, safe_serialization=True)
        generator = torch.Generator().manual_seed(7 + index)
        L = max(BERT_LENGTHS)
        ids = torch.zeros((len(BERT_LENGTHS), L), dtype=torch.long)
        mask = torch.zeros_like(ids)
        types = torch.zeros_like(ids)
        for row, n in enumerate(BERT_LENGTHS):
            ids[row, :n] = torch.randint(0, config.vocab_size, (n,), generator=generator)
            mask[row, :n] = 1
            if cls not in (MPNetModel, DistilBertModel):  # no token types
                types[row, :n] = torch.randint(0, config.type_vocab_size, (n,), generator=generator)
        meta = {"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "token_type_ids": types.tolist()}
        # "exact": after the bf16 pass the model holds bf16-rounded weights; back in fp32 it computes them exactly.
        for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16), ("exact", torch.float32)):
            m = model.to(device=DEVICE, dtype=dtype).eval()
            with torch.no_grad():
                typed = {} if cls in (MPNetModel, DistilBertModel) else {"token_type_ids": types.to(DEVICE)}
                out = m(input_ids=ids.to(DEVICE), attention_mask=mask.to(DEVICE), output_hidden_states=True, **typed)
                hidden = out.hidden_states[-1]
                tensors = {"hidden": hidden.float().contiguous().cpu()}
                if cls in (BertModel, XLMRobertaModel, MPNetModel):
                    tensors["pooler"] = out.pooler_output.float().contiguous().cpu()
                elif hasattr(out, "logits"):
                    tensors["logits"] = out.logits.float().contiguous().cpu()
                weights = mask.to(DEVICE).unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
                tensors["mean_normalized"] = torch.nn.functional.normalize(mean.float(), dim=-1).contiguous().cpu()
            save_file(tensors, os.path.join(directory, f"reference-{dtype_name}.safetensors"))
            with open(os.path.join(directory, f"reference-{dtype_name}.json"), "w") as f:
                json.dump(meta, f)
        listed.append({"name": name, "dir": directory, "family": "bert", "head": "pooler" if cls in (BertModel, XLMRobertaModel, MPNetModel) else "none" if cls is DistilBertModel else "masked-lm"})
        del model
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    return listed


def wanted(name):
    """HF_INFER_ONLY="qwen3,bert" (infer-parity.js --only) makes only those cases; each keeps its seeds."""
    only = [n for n in os.environ.get("HF_INFER_ONLY", "").split(",") if n]
    return not only or name in only


def main(workdir):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    listed = []
    for index, (name, (cls, config, save_options)) in enumerate(cases().items()):
        if not wanted(name):
            continue
        directory = os.path.join(workdir, name)
        os.makedirs(directory, exist_ok=True)
        torch.manual_seed(1000 + index)
        # Larger weights than HF's 0.02 make the next-token distributions peaked, so greedy paths are decisive.
        config.initializer_range = 0.08
        model = cls(config)
        with torch.no_grad():
            # HF initialises biases to 0 and norm gains to 1; perturb them so those code paths are checked too.
            for parameter_name, parameter in model.named_parameters():
                if parameter_name.endswith("bias") or "norm" in parameter_name or ".ln_" in parameter_name:
                    parameter.add_(torch.randn_like(parameter) * 0.1)
        model.save_pretrained(directory, safe_serialization=True, **save_options)
        write_tokenizer(directory, config.vocab_size)
        with open(os.path.join(directory, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 256, "eos_token_id": 256, "do_sample": False}, f)
        generator = torch.Generator().manual_seed(7 + index)
        prompts = [torch.randint(0, config.vocab_size, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS]
        # Casting the model casts its buffers too: Llama's RoPE inv_freq becomes bf16 (up to 0.4% off), which
        # HF's bf16 forward then uses. Kept here to restore for the exact reference below.
        buffers = {buffer_name: b.detach().clone() for buffer_name, b in model.named_buffers()}
        for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            m = model.to(device=DEVICE, dtype=dtype).eval()
            m.generation_config.eos_token_id = None
            m.generation_config.pad_token_id = 0
            tensors, meta = {}, {"prompts": prompts, "greedy": [], "gaps": []}
            with torch.no_grad():
                for i, prompt in enumerate(prompts):
                    ids = torch.tensor([prompt], device=DEVICE)
                    tensors[f"logits.{i}"] = m(input_ids=ids).logits[0].float().contiguous().cpu()
                    out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                                     output_scores=True, return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
                    new = out.sequences[0, len(prompt):].tolist()
                    top2 = [torch.topk(s[0].float(), 2).values.tolist() for s in out.scores]
                    meta["greedy"].append(new)
                    meta["gaps"].append([a - b for a, b in top2])
                    full = torch.tensor([prompt + new[:-1]], device=DEVICE)
                    tensors[f"continuation.{i}"] = m(input_ids=full).logits[0, len(prompt) - 1:].float().contiguous().cpu()
            save_file(tensors, os.path.join(directory, f"reference-{dtype_name}.safetensors"))
            with open(os.path.join(directory, f"reference-{dtype_name}.json"), "w") as f:
                json.dump(meta, f)
        # The bf16-rounded weights in fp32, with the model's own fp32 buffers (RoPE frequencies): the exact
        # computation of the model a bf16 run holds. Prompt logits, and continuation logits over the bf16
        # greedy tokens.
        m = model.to(device=DEVICE, dtype=torch.float32).eval()
        with torch.no_grad():
            for buffer_name, b in m.named_buffers():
                b.copy_(buffers[buffer_name].to(b.device))
        exact = {}
        with torch.no_grad():
            for i, prompt in enumerate(prompts):
                exact[f"logits.{i}"] = m(input_ids=torch.tensor([prompt], device=DEVICE)).logits[0].float().contiguous().cpu()
                full = torch.tensor([prompt + meta["greedy"][i][:-1]], device=DEVICE)
                exact[f"continuation.{i}"] = m(input_ids=full).logits[0, len(prompt) - 1:].float().contiguous().cpu()
        save_file(exact, os.path.join(directory, "reference-exact.safetensors"))
        listed.append({"name": name, "dir": directory, "family": "gpt2" if cls is GPT2LMHeadModel else "llama"})
        del model
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    listed.extend(run_bert_cases(workdir, len(cases())))
    with open(os.path.join(workdir, "cases.json"), "w") as f:
        json.dump({"cases": listed, "new_tokens": NEW_TOKENS, "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__}, f)


if __name__ == "__main__":
    main(sys.argv[1])
