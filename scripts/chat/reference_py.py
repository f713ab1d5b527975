"""Cross-check tandem/chat against Python Jinja2 in transformers' chat-template environment.

transformers renders chat templates with Jinja2 (ImmutableSandboxedEnvironment, trim_blocks and
lstrip_blocks on, the loopcontrols extension, its own tojson, raise_exception and strftime_now).
This script rebuilds that environment (transformers itself is not needed, only jinja2>=3.1) and

  1. writes testdata/chat/snippets.json: small templates that exercise what tandem/chat has to
     do beyond the engine (whitespace control, raw blocks, string escapes, brackets inside tags,
     tojson's options and number formats, raise_exception), with Jinja2's output;
  2. renders every conversation of testdata/chat/conversations.json with the Gemma 3, Qwen3 and
     Gemma 4 templates and checks that Jinja2 gives the same strings as the committed
     @huggingface/jinja references (scripts/chat/reference.mjs must have run first, it fetches
     the real templates into testdata/chat/.cache/).

Usage: python3 scripts/chat/reference_py.py
"""

import json
import pathlib
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "testdata" / "chat"


class Raised(Exception):
    pass


def make_env():
    # As transformers.utils.chat_template_utils._compile_jinja_template builds it.
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise Raised(message)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def render(source, context):
    try:
        return {"output": ENV.from_string(source).render(**context)}
    except Raised as e:
        return {"raise": str(e)}
    except Exception as e:  # noqa: BLE001 - any engine error is a result here
        return {"error": f"{type(e).__name__}: {e}"}


NESTED = json.loads('{"zeta": 1, "alpha": {"y": [1, 2.5, {"q": null, "b": true}], "b": "x"}, "mid": "é"}')

SNIPPETS = [
    # Whitespace control: trim_blocks, lstrip_blocks, "-" and "+" markers.
    ("{% for t in items %}{{ t }}\n{% endfor %}|", {"items": [1, 2]}),
    ("{% for t in items %}{{ t }}\n{% endfor %}{% for m in items %}{{ m }}\n{% endfor %}|", {"items": [1, 2]}),
    ("a \n{{ x }}{{- y }}|", {"x": "X", "y": "Y"}),
    ("a \n{{ x }}  {{- y }}|", {"x": "X", "y": "Y"}),
    ("  {% if true %}\n  yes\n  {% endif %}\nend", {}),
    ("{%+ if true %}x{% endif +%}\n  y", {}),
    ("   {%+ if true %}x{% endif %}\n  y", {}),
    ("line\n    {# comment #}\nnext", {}),
    ("line\n    {#- comment -#}\n   next", {}),
    ("line {# comment +#}\nnext", {}),
    ("{#- c -#}\n  x", {}),
    ("  {# c #}x", {}),
    ("{% if true -%}\n\n  x  \n\n{%- endif %}|", {}),
    ("{% for i in [1, 2, 3] %}\n  {{ i }}\n{% endfor %}", {}),
    ("{% macro m(x) %}\n  <{{ x }}>\n{% endmacro %}{{ m(1) }}{{ m(2) }}", {}),
    ("text {{- ' a ' -}} text", {}),
    ("{%- if true %}\n\t\tx{% endif %}", {}),
    ("{{ x }}  {% if true %}y{% endif %}", {"x": "X"}),
    ("{{ x -}}  \n  {% if true %}y{% endif %}", {"x": "X"}),
    ("{{ x -}}\n  {% if true %}y{% endif %}", {"x": "X"}),
    ("{% if true %}{% if true %}\n  a\n{% endif %}{% endif %}", {}),
    ("{% set x %}\n  body  \n{% endset %}[{{ x }}]", {}),
    ("{% for i in [1, 2, 3] %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}\n{% endfor %}", {}),
    ("{% for i in [1, 2, 3] %}{% if i == 3 %}{% break %}{% endif %}{{ i }}\n{% endfor %}", {}),
    ("a\n\n{%- if true %}\n  b\n{%- endif %}\n\nc", {}),
    ("{{ x }}\n", {"x": "trailing newline dropped"}),
    ("{{ x }}\n\n", {"x": "one of two trailing newlines dropped"}),
    ("a\r\nb\rc\n{% if true %}\r\nd{% endif %}", {}),
    ("\u00a0{%- if true %}x{% endif %}", {}),
    # Raw blocks.
    ("{% raw %}\n  {{ not rendered }} {% if %}\n{% endraw %}\nafter", {}),
    ("{%- raw -%}  x  {%- endraw -%}  y", {}),
    ("a\n  {% raw %}x{% endraw %}\n  b", {}),
    # String literals, brackets and delimiters inside tags.
    ("{{ 'x\\u00e9\\x41\\101\\U0001F600|\\q|' ~ \"\\\"\" ~ '\\'' }}", {}),
    ("{{ 'tab\\there' ~ '\\\\n' }}", {}),
    ("{{ \"}}\" }}{% if \"%}\" %}x{% endif %}", {}),
    ("{{ {'a': {'b': 1}} | tojson }}", {}),
    ("{% set d = {'items': [1], 'k': {'v': 2}} %}{{ d['items'] | tojson }}{{ d.k.v }}", {}),
    ("{{ [1, [2, [3]]] | tojson }}", {}),
    # tojson: key order, options, strings, numbers.
    ("{{ x | tojson }}", {"x": NESTED}),
    ("{{ x | tojson(indent=2) }}", {"x": NESTED}),
    ("{{ x | tojson(indent=0) }}", {"x": [1, {"a": []}, {}]}),
    ("{{ x | tojson(separators=(',', ':'), sort_keys=true) }}", {"x": NESTED}),
    ("{{ x | tojson(ensure_ascii=true) }}", {"x": "é😀\u2028\x7f"}),
    ("{{ x | tojson }}", {"x": "</script> & <b> \u2028\u2029 \x01\x1f\b\f\n\r\t \" \\ / é 😀"}),
    ("{{ x | tojson }}", {"x": json.loads("[1.0, 1e-7, 1e16, 1234567.5, 0.1, -0.0, 100, 9007199254740993]")}),
    ("{{ x.tojson }}|{{ 'tojson' }}|{{ x | tojson }}", {"x": {"tojson": "attr"}}),
    # Printing: values print as Python's str() prints them.
    ("{{ x }}|{{ y }}|{{ n }}|{{ b }}|{{ l }}|{{ x | string }}|{{ 4 / 2 }}|{{ undefined_name }}|", {"x": 1.0, "y": 1234567.5, "n": None, "b": True, "l": [1.5, None, "it's", 'say "hi"', {"k": "v\n"}]}),
    ("{% if x is string %}{{ x }}{% endif %}{{ (y | string) ~ '!' }}", {"x": "s", "y": 21.0}),
    # Mapping iteration order and the items filter.
    ("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}", {"d": NESTED["alpha"]}),
    ("{% for k, v in (d or {}).items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"z": 1, "a": 2}}),
    # raise_exception.
    ("{% if x %}{{ raise_exception('Bad role: ' ~ x) }}{% endif %}ok", {"x": "robot"}),
]


def main():
    snippets = []
    for source, context in SNIPPETS:
        snippets.append({"template": source, "context": context, **render(source, context)})
    header = {
        "generator": f"scripts/chat/reference_py.py with Python Jinja2 {jinja2.__version__} in transformers' environment",
        "snippets": snippets,
    }
    (OUT / "snippets.json").write_text(json.dumps(header, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {len(snippets)} snippets")

    conversations = json.loads((OUT / "conversations.json").read_text())
    failures = 0
    for name in ["gemma3", "qwen3", "gemma4"]:
        ref = json.loads((OUT / f"reference-{name}.json").read_text())
        if name == "gemma4":
            source = (ROOT / "chat" / "templates" / "gemma4.jinja").read_text()
        else:
            cfg = json.loads((OUT / ".cache" / f"tokenizer-{name}-3.7.2" / "tokenizer_config.json").read_text())
            source = cfg["chat_template"]
        same = 0
        for conv in conversations:
            ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "add_generation_prompt": conv["add_generation_prompt"]}
            if ref["bos_token"] is not None:
                ctx["bos_token"] = ref["bos_token"]
            if ref["eos_token"] is not None:
                ctx["eos_token"] = ref["eos_token"]
            if "enable_thinking" in conv:
                ctx["enable_thinking"] = conv["enable_thinking"]
            got = render(source, ctx)
            want = ref["results"][conv["name"]]
            if got == want or ("error" in got and "error" in want):
                same += 1
            else:
                failures += 1
                print(f"{name}/{conv['name']}: Jinja2 {got!r}\n  @huggingface/jinja {want!r}")
        print(f"{name}: Jinja2 agrees with @huggingface/jinja on {same}/{len(conversations)} conversations")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
