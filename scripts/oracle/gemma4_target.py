#!/usr/bin/env python3
"""Reference outputs of Gemma 4 targets from HF transformers, for Tandem's parity tests.

Runs on the GPU machine (PyTorch + transformers 5.17.0, no network). For every tiny preset it
uses two checkpoints:

  tandem  the checkpoint `tandem gen-model` wrote (read from --models/<preset>), so HF reads our
          files;
  hf      a model HF builds itself from the same config, re-initialised with peaked random values
          and written with save_pretrained (in bf16), so our loader reads HF's files.

Both run in float32 with eager attention. The embedding scales are set to sqrt(H) rounded to
bf16, as HF computes them when the model runs in its checkpoint dtype (bf16): Tandem follows that
rule, and a float32 run would otherwise use the unrounded value.

For prompts of 10, 700 and 1100 tokens (past the tiny models' sliding window and the default
512-token prefill chunk) it records every position's top-8 logits, the full logits of the last
position and post-norm hidden states at sampled positions; for the 10- and 700-token prompts, a
32-step greedy continuation (full forward per step, stop tokens ignored) with each step's
top-1/top-2 margin. One safetensors file per (preset, source); see testdata/oracle/README.md.
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import traceback

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Gemma4Config, Gemma4ForConditionalGeneration

PRESETS = ["gemma4-tiny-e2b", "gemma4-tiny-e4b", "gemma4-tiny-26b-a4b", "gemma4-tiny-31b"]
PROMPT_LENS = [10, 700, 1100]
GREEDY_PROMPTS = [10, 700]
GREEDY_STEPS = 32
TOPK = 8


def bf16_round(x: float) -> float:
    return torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).float().item()


def set_embed_scales(model):
    text = model.model.language_model
    cfg = text.config
    text.embed_tokens.embed_scale.fill_(bf16_round(math.sqrt(cfg.hidden_size)))
    if getattr(cfg, "hidden_size_per_layer_input", 0):
        text.embed_tokens_per_layer.embed_scale.fill_(bf16_round(math.sqrt(cfg.hidden_size_per_layer_input)))


@torch.no_grad()
def reinit_peaked(model, seed: int):
    """Random values in the spirit of gen-model: peaked logits, layers dominating the residual."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    cfg = model.model.language_model.config
    H = cfg.hidden_size
    out_norms = ("post_attention_layernorm.weight", "post_feedforward_layernorm.weight", "post_per_layer_input_norm.weight")
    tensors = dict(model.named_parameters())
    tensors.update({n: b for n, b in model.named_buffers() if n.endswith("layer_scalar")})
    for name, p in tensors.items():
        if "language_model" not in name:
            continue
        shape = p.shape
        if name.endswith("language_model.embed_tokens.weight"):
            v = torch.randn(shape, generator=g) * (4 / math.sqrt(H))
        elif name.endswith("embed_tokens_per_layer.weight"):
            v = torch.randn(shape, generator=g) / math.sqrt(cfg.hidden_size_per_layer_input)
        elif name.endswith("layer_scalar"):
            v = 0.8 + 0.4 * torch.rand(shape, generator=g)
        elif name.endswith(out_norms):
            v = 10 * (1 + 0.15 * torch.randn(shape, generator=g))
        elif p.dim() == 1:  # norm weights, router scales
            v = 1 + 0.15 * torch.randn(shape, generator=g)
        else:
            v = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
        p.copy_(v.to(torch.bfloat16).float())


def prompts(vocab: int):
    rng = np.random.default_rng(1234)
    out = {}
    for n in PROMPT_LENS:
        ids = rng.integers(3, vocab, size=n)
        ids[0] = 2  # <bos>
        out[n] = torch.tensor(ids, dtype=torch.int64)
    return out


@torch.no_grad()
def forward(model, ids, device):
    out = model(input_ids=ids[None].to(device), use_cache=False, output_hidden_states=True)
    logits = out.logits[0].float().cpu()
    hidden = out.hidden_states[-1][0].float().cpu()  # post final norm (last_hidden_state)
    return logits, hidden


@torch.no_grad()
def greedy(model, ids, device):
    seq = ids.clone()
    toks, margins = [], []
    for _ in range(GREEDY_STEPS):
        logits = model(input_ids=seq[None].to(device), use_cache=False).logits[0, -1].float().cpu()
        top2 = torch.topk(logits, 2)
        toks.append(int(top2.indices[0]))
        margins.append(float(top2.values[0] - top2.values[1]))
        seq = torch.cat([seq, top2.indices[:1]])
    return torch.tensor(toks, dtype=torch.int32), torch.tensor(margins, dtype=torch.float32)


def fixtures(model, device, meta):
    vocab = model.config.text_config.vocab_size
    t = {}
    for n, ids in prompts(vocab).items():
        logits, hidden = forward(model, ids, device)
        top = torch.topk(logits, TOPK, dim=-1)
        sampled = torch.tensor(sorted(set(list(range(0, n, 97)) + [n - 1])), dtype=torch.int64)
        t[f"p{n}.ids"] = ids.to(torch.int32)
        t[f"p{n}.topk_ids"] = top.indices.to(torch.int32).contiguous()
        t[f"p{n}.topk_logits"] = top.values.contiguous()
        t[f"p{n}.last_logits"] = logits[-1].contiguous()
        t[f"p{n}.hidden_pos"] = sampled.to(torch.int32)
        t[f"p{n}.hidden"] = hidden[sampled].contiguous()
        if n in GREEDY_PROMPTS:
            toks, margins = greedy(model, ids, device)
            t[f"p{n}.greedy"] = toks
            t[f"p{n}.greedy_margin"] = margins
    return t


def run_one(preset, models_dir, out_dir, device, log):
    src = os.path.join(models_dir, preset)
    results = {}
    # Our checkpoint, read by HF.
    m = Gemma4ForConditionalGeneration.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").to(device).eval()
    set_embed_scales(m)
    results["tandem"] = fixtures(m, device, {})
    del m
    # HF's own checkpoint, read by us.
    cfg = Gemma4Config.from_pretrained(src)
    cfg._attn_implementation = "eager"
    torch.manual_seed(99)
    m = Gemma4ForConditionalGeneration(cfg).eval()
    reinit_peaked(m, seed=99)
    hf_dir = os.path.join(out_dir, "hf-" + preset)
    shutil.rmtree(hf_dir, ignore_errors=True)
    m.to(torch.bfloat16).save_pretrained(hf_dir)
    del m
    # Reload rather than cast back: casting the model to bf16 also rounded its RoPE frequency
    # buffers, which a float32 reference must not inherit.
    m = Gemma4ForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").to(device).eval()
    set_embed_scales(m)
    results["hf"] = fixtures(m, device, {})
    # The Go test regenerates the tandem checkpoint and checks this hash, so fixtures that no
    # longer match gen-model's output fail loudly instead of comparing different weights.
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    for source, t in results.items():
        path = os.path.join(out_dir, f"{preset}.{source}.safetensors")
        save_file(t, path, metadata={"preset": preset, "source": source, "transformers": transformers.__version__,
                                     "torch": torch.__version__, "gen_model_seed": "0",
                                     "gen_model_sha256": digest, "compute": "float32, eager attention"})
        log.write(f"{preset} {source}: wrote {path}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="directory holding gen-model checkpoints, one folder per preset")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--presets", nargs="*", default=PRESETS)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    failed = 0
    with open(os.path.join(a.out, "log.txt"), "w") as log:
        log.write(f"transformers {transformers.__version__}, torch {torch.__version__}, device {a.device}\n")
        for p in a.presets:
            try:
                run_one(p, a.models, a.out, a.device, log)
            except Exception:
                failed += 1
                log.write(f"{p}: FAILED\n{traceback.format_exc()}\n")
            log.flush()
    print(open(os.path.join(a.out, "log.txt")).read())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
