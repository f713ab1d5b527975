#!/usr/bin/env python3
"""HF transformers' own bf16 logits for the tiny Gemma 4 targets: how far a bf16 run strays from
the float32 reference, which bounds Tandem's bf16 prompt passes (`--prefill-precision bf16`).

Runs on the GPU machine (PyTorch + transformers 5.17.0, no network) from the repository root.
For every tiny preset it loads HF's own checkpoint (testdata/oracle/gemma4/hf-<preset>, the one
gemma4_target.py wrote) in bfloat16 with eager attention, runs the prompts of the float32 fixture
(<preset>.hf.safetensors: 10, 700 and 1100 tokens) in one forward pass each, and writes, per
prompt, its logits at the float32 fixture's top-8 ids of every position (bf16_topk_logits) and the
last position's full logits (bf16_last_logits), to <preset>.hf-bf16.safetensors. The Go test
TestBF16PromptsNearHF compares Tandem's bf16 prompt logits with the float32 ones against these.
"""
import argparse
import math
import os
import sys
import traceback

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import Gemma4ForConditionalGeneration

PRESETS = ["gemma4-tiny-e2b", "gemma4-tiny-e4b", "gemma4-tiny-26b-a4b", "gemma4-tiny-31b"]
PROMPT_LENS = [10, 700, 1100]


@torch.no_grad()
def run_one(preset, oracle_dir, device, log):
    ref = load_file(os.path.join(oracle_dir, f"{preset}.hf.safetensors"))
    m = Gemma4ForConditionalGeneration.from_pretrained(os.path.join(oracle_dir, "hf-" + preset), dtype=torch.bfloat16,
                                                       attn_implementation="eager").to(device).eval()
    # The embedding scale as HF computes it in the checkpoint's dtype (see gemma4_target.py).
    text = m.model.language_model
    text.embed_tokens.embed_scale.fill_(math.sqrt(text.config.hidden_size))
    if getattr(text.config, "hidden_size_per_layer_input", 0):
        text.embed_tokens_per_layer.embed_scale.fill_(math.sqrt(text.config.hidden_size_per_layer_input))
    t = {}
    for n in PROMPT_LENS:
        ids = ref[f"p{n}.ids"].to(torch.int64)
        logits = m(input_ids=ids[None].to(device), use_cache=False).logits[0].float().cpu()
        top = ref[f"p{n}.topk_ids"].to(torch.int64)
        t[f"p{n}.bf16_topk_logits"] = torch.gather(logits, 1, top).contiguous()
        t[f"p{n}.bf16_last_logits"] = logits[-1].contiguous()
        f32 = ref[f"p{n}.topk_logits"]
        log.write(f"{preset} p{n}: mean |bf16 - f32| over the top-8 {float((t[f'p{n}.bf16_topk_logits'] - f32).abs().mean()):.4g}\n")
    path = os.path.join(oracle_dir, f"{preset}.hf-bf16.safetensors")
    save_file(t, path, metadata={"preset": preset, "source": "hf", "transformers": transformers.__version__,
                                 "torch": torch.__version__, "compute": "bfloat16, eager attention"})
    log.write(f"{preset}: wrote {path}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", default="testdata/oracle/gemma4", help="the float32 fixtures and HF's checkpoints")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--presets", nargs="*", default=PRESETS)
    a = ap.parse_args()
    failed = 0
    log = sys.stdout
    log.write(f"transformers {transformers.__version__}, torch {torch.__version__}, device {a.device}\n")
    for p in a.presets:
        try:
            run_one(p, a.oracle, a.device, log)
        except Exception:
            failed += 1
            log.write(f"{p}: FAILED\n{traceback.format_exc()}\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
