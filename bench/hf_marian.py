"""Hugging Face reference for fuseformer's encoder-decoder generation (on the GPU when there is one, else the CPU).

  python3 bench/hf_marian.py build <dir> --size small|base [--seed N] [--eos-bias X] [--sources N]
      A randomly initialised MarianMTModel (small, or the Transformer-base size of opus-mt: 58101 tokens,
      d_model 512, 6 + 6 layers, 8 heads, FFN 2048, swish), saved with save_pretrained (safetensors), with
      opus-mt's generation settings (pad banned, forced EOS, renormalized logits) in generation_config.json,
      and <dir>/sources.json: random source token ids ending with EOS, of varied lengths.
      final_logits_bias[eos] is raised by eos-bias logit standard deviations (0.02·sqrt(d_model) at this
      init), so some hypotheses end early and the beam scorer's bookkeeping is exercised; a large negative
      value makes every sequence run to max_new_tokens.
  python3 bench/hf_marian.py generate <dir> --dtype f32|bf16 --beams K [--max-new-tokens N]
      model.generate(num_beams=K, max_new_tokens=N) on sources.json (one right-padded batch with its
      attention mask); writes <dir>/hf-<dtype>-beams<K>.json: {"outputs": [[token ids after the start token,
      up to and including the first EOS]], "scores": [sequence scores] (beam search only)}.
"""
import argparse
import json
import math
import os

import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel

SIZES = {
    "small": dict(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=128),
    "base": dict(vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=512),
}


def build(args):
    size = SIZES[args.size]
    vocab = size["vocab_size"]
    pad, eos = vocab - 1, 0
    config = MarianConfig(**size, decoder_vocab_size=vocab, activation_function="swish", scale_embedding=True,
                          share_encoder_decoder_embeddings=True, tie_word_embeddings=True, pad_token_id=pad,
                          eos_token_id=eos, decoder_start_token_id=pad, forced_eos_token_id=eos, dropout=0.1)
    torch.manual_seed(args.seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, eos] += args.eos_bias * 0.02 * math.sqrt(size["d_model"])
    model.generation_config = GenerationConfig(
        decoder_start_token_id=pad, pad_token_id=pad, eos_token_id=eos, forced_eos_token_id=eos, bad_words_ids=[[pad]],
        num_beams=4, max_length=512, renormalize_logits=True)
    model.save_pretrained(args.dir, safe_serialization=True)
    g = torch.Generator().manual_seed(args.seed + 1)
    sources = []
    for _ in range(args.sources):
        length = int(torch.randint(args.min_len, args.max_len + 1, (1,), generator=g))
        sources.append(torch.randint(1, vocab - 1, (length - 1,), generator=g).tolist() + [eos])
    with open(os.path.join(args.dir, "sources.json"), "w") as f:
        json.dump({"sources": sources}, f)


def generate(args):
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = MarianMTModel.from_pretrained(args.dir).to(device=device, dtype=dtype).eval()
    with open(os.path.join(args.dir, "sources.json")) as f:
        sources = json.load(f)["sources"]
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    longest = max(len(s) for s in sources)
    input_ids = torch.tensor([s + [pad] * (longest - len(s)) for s in sources], device=device)
    attention_mask = torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in sources], device=device)
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=args.beams,
                             max_new_tokens=args.max_new_tokens, do_sample=False, return_dict_in_generate=True,
                             output_scores=args.beams > 1)
    outputs = []
    for row in out.sequences[:, 1:].tolist():
        cut = row.index(eos) + 1 if eos in row else len(row)
        outputs.append([t for t in row[:cut]])
    result = {"outputs": outputs}
    if args.beams > 1 and getattr(out, "sequences_scores", None) is not None:
        result["scores"] = out.sequences_scores.float().tolist()
    with open(os.path.join(args.dir, f"hf-{args.dtype}-beams{args.beams}.json"), "w") as f:
        json.dump(result, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["build", "generate"])
    parser.add_argument("dir")
    parser.add_argument("--size", choices=list(SIZES), default="small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eos-bias", type=float, default=3.0)
    parser.add_argument("--sources", type=int, default=16)
    parser.add_argument("--min-len", type=int, default=4)
    parser.add_argument("--max-len", type=int, default=40)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    build(args) if args.command == "build" else generate(args)


if __name__ == "__main__":
    main()
