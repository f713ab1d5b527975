#!/usr/bin/env python3
"""Probe what HF transformers feeds the Gemma 4 assistant drafter during assisted generation.

Runs on the GPU machine. Loads a tiny target and its assistant written by `tandem gen-model`,
runs greedy assisted generation with hooks on the assistant's forward and the target's final
norm, and reports:
  - whether the hidden half of the drafter input (inputs_embeds = [embedding, hidden]) equals the
    target's post-final-norm or pre-final-norm hidden state, and at which position;
  - whether the embedding half equals embed_tokens(token) * embed_scale;
  - the drafter's position_ids and shared K/V shapes per call;
  - whether assisted greedy output equals plain greedy output.
Writes a JSON report (docs/gemma4-drafter-inputs.md summarises the answer).
"""
import argparse
import json
import math

import torch
from transformers import Gemma4AssistantForCausalLM, Gemma4ForConditionalGeneration


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--assistant", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    tgt = Gemma4ForConditionalGeneration.from_pretrained(a.target, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    ast = Gemma4AssistantForCausalLM.from_pretrained(a.assistant, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    text = tgt.model.language_model
    H = text.config.hidden_size

    calls = []

    def pre_hook(mod, args, kwargs):
        kv = kwargs.get("shared_kv_states") or {}
        calls.append({
            "inputs_embeds": kwargs["inputs_embeds"].detach().float().cpu().clone(),
            "position_ids": None if kwargs.get("position_ids") is None else kwargs["position_ids"].detach().cpu().tolist(),
            "kv_shapes": {k: [list(v[0].shape), list(v[1].shape)] for k, v in kv.items()},
        })

    ast.register_forward_pre_hook(pre_hook, with_kwargs=True)

    torch.manual_seed(0)
    ids = torch.randint(3, text.config.vocab_size, (1, 12), device=dev)
    ids[0, 0] = 2
    report = {}
    with torch.no_grad():
        plain = tgt.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
        assisted = tgt.generate(ids, assistant_model=ast, max_new_tokens=12, do_sample=False, eos_token_id=None,
                                pad_token_id=0, num_assistant_tokens=3)
        report["plain"] = plain[0].tolist()
        report["assisted"] = assisted[0].tolist()
        report["assisted_equals_plain"] = plain[0].tolist() == assisted[0].tolist()

        # Target hidden states over the final sequence: post-norm (last_hidden_state) and the
        # input of the final norm (pre-norm).
        pre = {}
        h = text.norm.register_forward_hook(lambda m, i, o: pre.__setitem__("x", i[0].detach().float().cpu()))
        out = tgt(input_ids=assisted, use_cache=False, output_hidden_states=True)
        h.remove()
        post = out.hidden_states[-1][0].float().cpu()
        prenorm = pre["x"][0]
        emb = text.embed_tokens(assisted)[0].float().cpu()  # already multiplied by embed_scale

    seq = assisted[0].tolist()
    found = []
    for ci, c in enumerate(calls):
        x = c["inputs_embeds"][0]  # [L, 2H]
        row = {"call": ci, "position_ids": c["position_ids"], "kv_shapes": c["kv_shapes"], "rows": []}
        for r in range(x.shape[0]):
            e, hid = x[r, :H], x[r, H:]
            best = {}
            for name, table in (("post_norm", post), ("pre_norm", prenorm)):
                d = (table - hid).abs().max(dim=-1).values
                j = int(d.argmin())
                best[name] = {"position": j, "max_abs_diff": float(d[j])}
            de = (emb - e).abs().max(dim=-1).values
            j = int(de.argmin())
            best["embedding"] = {"position": j, "token": seq[j], "max_abs_diff": float(de[j])}
            row["rows"].append(best)
        found.append(row)
    report["calls"] = found
    report["prompt_len"] = ids.shape[1]
    report["embed_scale"] = float(text.embed_tokens.embed_scale)
    report["sqrt_hidden"] = math.sqrt(H)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: report[k] for k in ("assisted_equals_plain", "prompt_len", "embed_scale")}))
    for c in found[:6]:
        print(json.dumps(c))


if __name__ == "__main__":
    main()
