"""A random-init Llama model directory for runs on the GPU machine (no network there): the Llama 1.2B
config of issue #5 (or --layers N for a shorter one), bf16 weights initialised on the GPU, saved with
save_pretrained, plus hf_infer.py's byte-level tokenizer.json (so `fuseformer quantize` and `generate`
have a tokenizer without downloading one).

Usage: python3 bench/make_llama_dir.py <dir> [--layers N]
"""
import argparse
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_infer import write_tokenizer  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--layers", type=int, default=16)
    args = parser.parse_args()
    config = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=args.layers,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=2048,
                         rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=256, eos_token_id=256)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(args.dir, safe_serialization=True)
    write_tokenizer(args.dir, config.vocab_size)
    print(f"saved {sum(p.numel() for p in model.parameters()):,} parameters to {args.dir}")


if __name__ == "__main__":
    main()
