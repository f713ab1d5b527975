"""Checks what transformers' AutoTokenizer (the layer above HF tokenizers that most users call)
does with tokenizer_config.json's add_bos_token/add_eos_token, next to raw `tokenizers`.

    python3 scripts/tokenizer/transformers_check.py

Uses the cached real tokenizers (testdata/tokenizer/.cache/) and a copy of a component case
without a post-processor. Prints one line per check.
"""
import json
import os
import shutil
import tempfile

import transformers
from tokenizers import Tokenizer
from transformers import AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TESTDATA = os.path.join(ROOT, "testdata", "tokenizer")
print("transformers", transformers.__version__)
texts = ["Hello world", " a  b\n\n\nc", "<start_of_turn>user\nhi<end_of_turn>", "<|im_start|>user\nhi<|im_end|>"]
for name in ["gemma3", "qwen3"]:
    d = os.path.join(TESTDATA, ".cache", name)
    auto = AutoTokenizer.from_pretrained(d)
    raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    for t in texts:
        for special in [False, True]:
            a = auto.encode(t, add_special_tokens=special)
            r = raw.encode(t, add_special_tokens=special).ids
            print(f"{name} {type(auto).__name__} special={special} {t!r}: {'same' if a == r else f'DIFFERENT auto={a} raw={r}'}")
    ids = raw.encode(texts[1] + texts[2], add_special_tokens=True).ids
    for skip in [False, True]:
        a = auto.decode(ids, skip_special_tokens=skip)
        r = raw.decode(ids, skip_special_tokens=skip)
        print(f"{name} decode skip={skip}: {'same' if a == r else f'DIFFERENT auto={a!r} raw={r!r}'}")

cases = json.load(open(os.path.join(TESTDATA, "components.json"), encoding="utf-8"))["cases"]
for c in cases:
    if c["name"] != "post-none-config-bos":
        continue
    for cls in ["GemmaTokenizer", "LlamaTokenizer", "PreTrainedTokenizerFast"]:
        d = tempfile.mkdtemp()
        json.dump(c["tokenizer"], open(os.path.join(d, "tokenizer.json"), "w"))
        cfg = dict(c["config"], tokenizer_class=cls)
        json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"))
        try:
            auto = AutoTokenizer.from_pretrained(d)
            print(f"no post-processor, config {cfg}: {type(auto).__name__} encode('a', special) = {auto.encode('a')}, raw tokenizers = {Tokenizer.from_file(os.path.join(d, 'tokenizer.json')).encode('a').ids}")
        except Exception as e:
            print(f"no post-processor, class {cls}: error {e}")
        shutil.rmtree(d)
