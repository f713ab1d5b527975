// Measures HF tokenizers.js encode speed on testdata/tokenizer/corpus.json, the way Go's
// BenchmarkEncode measures tandem/tokenizer: every corpus string encoded once per iteration
// (add_special_tokens=false), one thread; MB/s = corpus bytes / seconds, best of the runs.
//
//   cd scripts/tokenizer && npm install && node bench.mjs
import os from "node:os";
import { packages, load, corpus } from "./common.mjs";

// "all" is the whole corpus (BenchmarkEncode), "text" the corpus without its long/ strings
// (BenchmarkEncodeText).
const entries = corpus();
const sets = {
  all: entries.map((e) => e.text),
  text: entries.filter((e) => !e.name.startsWith("long/")).map((e) => e.text),
};
const bytes = (texts) => texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
console.log(`node ${process.version}, ${os.cpus()[0].model}, ${os.cpus().length} CPUs; corpus ${entries.length} strings, ${bytes(sets.all)} bytes (text subset ${bytes(sets.text)} bytes)`);
for (const name of Object.keys(packages)) {
  const tok = load(name);
  for (const [set, texts] of Object.entries(sets)) {
    const total = bytes(texts);
    for (const t of texts) tok.encode(t, { add_special_tokens: false }); // warm up (JIT, caches)
    let best = Infinity;
    const deadline = Date.now() + 10000;
    let runs = 0;
    while (runs < 3 || (Date.now() < deadline && runs < 200)) {
      const t0 = process.hrtime.bigint();
      for (const t of texts) tok.encode(t, { add_special_tokens: false });
      const dt = Number(process.hrtime.bigint() - t0) / 1e9;
      best = Math.min(best, dt);
      runs++;
    }
    console.log(`${name} ${set}: ${(total / best / 1e6).toFixed(2)} MB/s (best of ${runs} runs, ${(best * 1000).toFixed(2)} ms per pass)`);
  }
}
