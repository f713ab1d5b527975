#!/usr/bin/env python3
"""Reference outputs of Gemma 4 assistant drafters from HF transformers, for Tandem's parity tests.

Runs on the GPU machine (transformers 5.17.0, float32, eager). For each tiny target preset and its
assistant (both written by `tandem gen-model --seed 0`, read from --models/<preset>):

1. the target runs over a prompt of T tokens (T = 10, below the tiny sliding window of 16, and
   T = 40, beyond it) with return_shared_kv_states, giving the K/V of the last non-shared sliding
   and full layers and the post-final-norm hidden states;
2. the drafter's snapshot is reconciled as Tandem does (spec §3.5): full = all T committed keys,
   sliding = the last min(W, T) keys;
3. the drafter runs 3 recursive steps from the pending token b (the target's greedy choice at
   T-1): step 1 takes [target_embed(b)·scale, hidden[T-1]], step i>1 takes
   [target_embed(d_{i-1})·scale, post_projection output of step i-1], all at one query position
   P — once with P = T (HF's convention) and once with P = T-1.

It records each step's drafted token (argmax), full logits (for the centroid head: HF's
full-vocabulary tensor filled with min(selected)-1) and post_projection hidden. Embedding scales
are bf16-rounded, as in gemma4_target.py. One safetensors file per preset; see
testdata/oracle/README.md.
"""
import argparse
import hashlib
import math
import os
import sys
import traceback

import torch
import transformers
from safetensors.torch import save_file
from transformers import Gemma4AssistantForCausalLM, Gemma4ForConditionalGeneration

PRESETS = ["gemma4-tiny-e2b", "gemma4-tiny-e4b", "gemma4-tiny-26b-a4b", "gemma4-tiny-31b"]
PROMPTS = [10, 40]
STEPS = 3


def bf16_round(x):
    return torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).float().item()


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@torch.no_grad()
def run_one(preset, models, out_dir, dev, log):
    tdir, adir = os.path.join(models, preset), os.path.join(models, preset + "-assistant")
    tgt = Gemma4ForConditionalGeneration.from_pretrained(tdir, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    ast = Gemma4AssistantForCausalLM.from_pretrained(adir, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    text = tgt.model.language_model
    cfg = text.config
    text.embed_tokens.embed_scale.fill_(bf16_round(math.sqrt(cfg.hidden_size)))
    if getattr(cfg, "hidden_size_per_layer_input", 0):
        text.embed_tokens_per_layer.embed_scale.fill_(bf16_round(math.sqrt(cfg.hidden_size_per_layer_input)))
    W = cfg.sliding_window
    g = torch.Generator().manual_seed(4321)
    t = {}
    for T in PROMPTS:
        ids = torch.randint(3, cfg.vocab_size, (1, T), generator=g)
        ids[0, 0] = 2
        out = tgt(input_ids=ids.to(dev), use_cache=False, output_hidden_states=True, return_shared_kv_states=True)
        hidden = out.hidden_states[-1][0]  # post-norm
        bonus = int(out.logits[0, -1].argmax())
        kv = out.shared_kv_states
        snap = {
            "full_attention": (kv["full_attention"][0][:, :, :T], kv["full_attention"][1][:, :, :T]),
            "sliding_attention": (kv["sliding_attention"][0][:, :, -min(W, T):], kv["sliding_attention"][1][:, :, -min(W, T):]),
        }
        t[f"p{T}.ids"] = ids[0].to(torch.int32)
        t[f"p{T}.bonus"] = torch.tensor([bonus], dtype=torch.int32)
        for name, P in (("T", T), ("Tm1", T - 1)):
            tok, h = bonus, hidden[T - 1]
            toks, logits, hids = [], [], []
            for _ in range(STEPS):
                e = text.embed_tokens(torch.tensor([[tok]], device=dev))[0, 0]
                x = torch.cat([e, h])[None, None]
                o = ast(inputs_embeds=x, position_ids=torch.tensor([[P]], device=dev), shared_kv_states=snap)
                lg = o.logits[0, -1].float()
                h = o.last_hidden_state[0, -1]
                tok = int(lg.argmax())
                toks.append(tok)
                logits.append(lg.cpu())
                hids.append(h.float().cpu())
            t[f"p{T}.{name}.tokens"] = torch.tensor(toks, dtype=torch.int32)
            t[f"p{T}.{name}.logits"] = torch.stack(logits).contiguous()
            t[f"p{T}.{name}.hidden"] = torch.stack(hids).contiguous()
    meta = {"preset": preset, "transformers": transformers.__version__, "torch": torch.__version__,
            "gen_model_seed": "0", "target_sha256": sha(os.path.join(tdir, "model.safetensors")),
            "assistant_sha256": sha(os.path.join(adir, "model.safetensors")), "sliding_window": str(W),
            "compute": "float32, eager attention"}
    path = os.path.join(out_dir, f"{preset}-assistant.hf.safetensors")
    save_file(t, path, metadata=meta)
    log.write(f"{preset}: wrote {path}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    failed = 0
    with open(os.path.join(a.out, "drafter-log.txt"), "w") as log:
        for p in PRESETS:
            try:
                run_one(p, a.models, a.out, a.device, log)
            except Exception:
                failed += 1
                log.write(f"{p}: FAILED\n{traceback.format_exc()}\n")
    print(open(os.path.join(a.out, "drafter-log.txt")).read())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
