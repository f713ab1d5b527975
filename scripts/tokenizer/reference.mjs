// Encodes testdata/tokenizer/corpus.json with Hugging Face tokenizers.js and writes
// testdata/tokenizer/reference-{gemma3,qwen3}.json (the real tokenizers) and
// reference-synthetic-{gemma,qwen}512.json (tandem's Synthetic tokenizers, committed under
// testdata/tokenizer/synthetic-*/): per string, the ids of
// encode(add_special_tokens=false) and (true), and decode(ids_special) with and without
// skip_special_tokens.
//
//   cd scripts/tokenizer && npm install && node reference.mjs
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { packages, synthetic, load, corpus, testdata } from "./common.mjs";

const hf = "@huggingface/tokenizers@" + JSON.parse(fs.readFileSync(new URL("./node_modules/@huggingface/tokenizers/package.json", import.meta.url))).version;
const entries = corpus();
for (const name of [...Object.keys(packages), ...synthetic]) {
  const tok = load(name);
  const lines = [];
  for (const e of entries) {
    const ids = tok.encode(e.text, { add_special_tokens: false }).ids;
    const idsSpecial = tok.encode(e.text, { add_special_tokens: true }).ids;
    // tokenizers.js refuses to decode an empty list; HF's Rust decode([]) is "".
    const decode = idsSpecial.length ? tok.decode(idsSpecial, { skip_special_tokens: false }) : "";
    const decodeSkip = idsSpecial.length ? tok.decode(idsSpecial, { skip_special_tokens: true }) : "";
    lines.push(JSON.stringify({ name: e.name, ids, ids_special: idsSpecial, decode, decode_skip: decodeSkip }));
  }
  const header = JSON.stringify({ tokenizer: packages[name] ?? `testdata/tokenizer/${name}`, implementation: hf, node: process.version });
  const text = `{"about": ${header},\n"entries": [\n${lines.join(",\n")}\n]}\n`;
  const out = path.join(testdata, `reference-${name}.json`);
  fs.writeFileSync(out, text);
  console.log(`${name}: ${entries.length} strings -> ${out} (${text.length} bytes)`);
}

// Component cases (testdata/tokenizer/components.json, written by the Go test TestComponentCases):
// small tokenizer.json files exercising components the real tokenizers don't use.
{
  const { cases } = JSON.parse(fs.readFileSync(path.join(testdata, "components.json"), "utf8"));
  const answers = [];
  for (const c of cases) {
    const a = { name: c.name };
    try {
      const tok = new Tokenizer(c.tokenizer, c.config ?? {});
      a.ids = c.encode.map((s) => tok.encode(s, { add_special_tokens: false }).ids);
      a.ids_special = c.encode.map((s) => tok.encode(s, { add_special_tokens: true }).ids);
      a.decode = c.decode.map((ids) => (ids.length ? tok.decode(ids, { skip_special_tokens: false }) : ""));
      a.decode_skip = c.decode.map((ids) => (ids.length ? tok.decode(ids, { skip_special_tokens: true }) : ""));
    } catch (e) {
      a.error = String(e.message ?? e);
    }
    answers.push(JSON.stringify(a));
  }
  const out = path.join(testdata, "components-js.json");
  fs.writeFileSync(out, `{"implementation": ${JSON.stringify(hf)},\n"answers": [\n${answers.join(",\n")}\n]}\n`);
  console.log(`components: ${cases.length} cases -> ${out}`);
}
