// Writes testdata/tokenizer/corpus.json: the hard strings the tokenizer tests run on.
// Deterministic (fixed PRNG seed); run from scripts/tokenizer: node corpus.mjs
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.join(here, "..", "..", "testdata", "tokenizer", "corpus.json");

const entries = [];
const add = (cat, ...texts) => {
  for (const t of texts) entries.push({ name: `${cat}/${entries.filter((e) => e.name.startsWith(cat + "/")).length}`, text: t });
};

// Small deterministic PRNG (mulberry32).
let seed = 0x7a4d3e11;
const rand = () => {
  seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (arr) => arr[Math.floor(rand() * arr.length)];

// --- basics and whitespace ---
add("basic", "", " ", "  ", "   ", "\t", "\n", "a", "A", "Hello world", "Hello world ☃!", "hello", " hello", "  hello", "hello ",
  "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "tHe QuIcK bRoWn", "I", "I'm", ".", "...", "?!", "a b c d e f g");
add("ws", "\n\n", "\n\n\n", "\n\n\n\n\n\n\n\n\n\n", "a\n\n\nb", "\r\n", "\r", "\r\r\n\n", "a\r\nb\r\n\r\nc", "line1\r\nline2\r\n",
  "\t\t\tx", "x\t\ty", "abc   ", "   abc", "abc   \n", " \t \n \r\n  x", " ".repeat(40), "x" + " ".repeat(40) + "y",
  "\n".repeat(100), "a" + "\n".repeat(31) + "b", "a" + "\n".repeat(33) + "b", "\n \n \n ", "a   \nb", "a \n b", "a\n  b", "a\n\n  b\n",
  " \u00a0 ", "a\u00a0b", "a\u00a0\u00a0b", "a\u3000b", "a\u3000\u3000b", "a\u2028b", "a\u2029b", "a\u0085b", "a\u0085\u0085b",
  "a\ufeffb", "\ufeffhello", "a\u180e\u180eb", "a\u200bb", "a\u2003\u2003b", "a\u202fb", "a\u205fb", "a\u1680b", "a\u000bb", "a\u000cb",
  "a\u000b\u000bb", "\t \t", "  \n", "\n  ", " \n", "x  ", "x \n", "end with tab\t", "  leading and trailing  ",
  "trailing spaces then newline   \n\nnext", "tabs\tand\tspaces  mixed \t here", "\u2581", "\u2581\u2581 literal lower one eighth blocks \u2581x",
  "spaces▁and▁blocks ▁ ▁▁", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", " ".repeat(31), " ".repeat(32), "\t".repeat(31), "\t".repeat(40));

// --- scripts ---
add("script",
  "你好，世界！今天天气很好。", "我爱北京天安门", "日本語のテキストとカタカナ、ひらがな。", "東京都渋谷区", "한국어 텍스트입니다. 안녕하세요!",
  "مرحبا بالعالم، كيف حالك؟", "السلام عليكم ورحمة الله", "שלום עולם", "नमस्ते दुनिया, आप कैसे हैं?", "हिन्दी में लिखा गया वाक्य।",
  "বাংলা ভাষা", "தமிழ் மொழி", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "ગુજરાતી", "ਪੰਜਾਬੀ", "සිංහල",
  "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ", "ສະບາຍດີ", "ភាសាខ្មែរ", "မြန်မာဘာသာ", "ქართული ენა", "Հայերեն լեզու",
  "Ελληνικά: Καλημέρα κόσμε", "Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок, да выпей чаю.", "Українська мова: ґ є ї",
  "ኢትዮጵያ", "བོད་ཡིག", "ᠮᠣᠩᠭᠣᠯ", "ᏣᎳᎩ", "Tiếng Việt có dấu: Hà Nội, Đà Nẵng, Thành phố Hồ Chí Minh",
  "Ünïcödé façade naïve café résumé", "Straße groß Größe", "Ærøskøbing på Ærø", "İstanbul ıi Iİ", "ǅemal ǈ ǋ",
  "mixed 中文 English العربية русский हिन्दी 日本語", "Ⅻ Ⅷ ⅻ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３", "ﾊﾝｶｸｶﾀｶﾅ",
  "𠀀𠀁𠀂 CJK extension B", "𰀀𰀁 CJK extension G", "𱍐 CJK extension H", "\u{2EBF0}\u{2EBF1} CJK extension I (Unicode 15.1)",
  "\u{10D50}\u{10D51}\u{10D52} Garay (Unicode 16)", "\u{11BC0}\u{11BC1} Sunuwar (Unicode 16)", "\u{1FAE9}\u{1FAC6} emoji Unicode 16",
  "\u{16D40}\u{16D41} Kirat Rai (Unicode 16)", "ꙮ multiocular o");

// --- combining marks and normalization ---
add("combining",
  "e\u0301", "cafe\u0301", "A\u030a", "\u212b", "\u2126", "\u00c5", "a\u0301\u0323", "a\u0323\u0301", "o\u0308\u0304", "\u1100\u1161\u11a8",
  "\u1100\u1161", "\u1112\u1161\u11ab\u1100\u1173\u11af", "\u0041\u030a\u0301", "Z\u0335\u0308\u0301a\u0336\u0300l\u0337\u0303g\u0338\u0302o\u0334\u0306",
  "\u0915\u094d\u0937", "\u0928\u093c", "\u0929", "\u0627\u0653", "\u05d1\u05bc", "\ufb31", "\u0958", "\u2000", "\u2001", "\u0344", "\u0f73",
  "\u1e9b\u0323", "\u0387", "\u037e", "\u00c7\u0301", "\u1ec7", "e\u0323\u0302", "\uac00\u11a8", "\u0301 leading combining", "\u0301\u0301\u0301",
  "ﬁ ﬂ ﬀ ligatures", "x\u0338", "\u226f", "\u{1d15e}", "\u{1d165}\u{1d16e}", "\u{110ab}", "\u{11131}\u{11127}", "\u0e40\u0e01\u0e47",
  "q\u0307\u0323", "ñ vs n\u0303", "ǖ vs u\u0308\u0304", "\u0390", "\u03b9\u0308\u0301");

// --- emoji ---
add("emoji",
  "😀", "😀😃😄😁", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "🇺🇸🇯🇵🇫🇷", "👍🏽👍🏿", "1️⃣2️⃣#️⃣", "❤️", "❤", "☺️ vs ☺", "🤷‍♂️", "🧑‍🤝‍🧑",
  "I ❤️ NY 🗽", "emoji at end 🎉", "🎉 emoji at start", "🙂🙃".repeat(20), "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🫨🫠🫶", "©®™", "♠♣♥♦", "→←↑↓⇒", "✓✗✔︎");

// --- code ---
add("code",
  "def foo(x):\n    return x * 2\n",
  "import numpy as np\n\nclass Model(nn.Module):\n    def __init__(self, dim: int = 512) -> None:\n        super().__init__()\n        self.w = nn.Linear(dim, dim, bias=False)\n",
  "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, 世界\")\n}\n",
  "for (let i = 0; i < arr.length; i++) {\n  console.log(`item ${i}: ${arr[i]}`);\n}",
  "fn main() -> Result<(), Box<dyn std::error::Error>> {\n    let v: Vec<u8> = vec![0xE2, 0x98, 0x83];\n    println!(\"{:?}\", String::from_utf8(v)?);\n    Ok(())\n}",
  "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
  "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%smith%' ORDER BY id DESC;",
  "<!DOCTYPE html>\n<html>\n<body>\n<table><tr><td>cell</td></tr></table>\n<h1>Title</h1><p class=\"x\">text</p>\n</body>\n</html>",
  "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\\u00e9\"}}",
  "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | grep -E '^[a-z]+$' >> out.log 2>&1; done",
  "^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*)$",
  "\\begin{equation}\n  E = mc^2 \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}",
  "| col1 | col2 |\n|------|------|\n| a    | b    |\n", "```python\nprint('hi')\n```", "key: value\nlist:\n  - one\n  - two\n",
  "--- a/file.go\n+++ b/file.go\n@@ -1,3 +1,4 @@\n-old line\n+new line\n", "x=>x+1;y=(a,b)=>{return a??b}", "a->b; c::d; e<=f; g!=h; i===j; k<<=2",
  "    indented four\n        indented eight\n\t\ttwo tabs", "if x:\n\tpass\n\n\n\ndef y(): ...", "// comment\n/* block */\n# hash\n-- sql",
  "<div>\n  <span>{{ value }}</span>\n</div>", "public static void main(String[] args) {}", "$x = @{ 'a' = 1 }; Write-Host $x", "let x = 'don''t'",
  "    \n    \n", "foo_bar_baz FooBarBaz fooBarBaz FOO_BAR", "__init__ __main__ __dict__", "0x7fffffff 0b1010 0o777 1e-9 1_000_000");

// --- numbers ---
add("number", "1234567890", "12345678901234567890123456789012345678901234567890", "3.14159265358979", "1,000,000.00", "-0.0001e-10", "0x1F",
  "١٢٣٤٥", "१२३४५", "১২৩", "１２３４", "²³¹", "½ ¾ ⅓", "Ⅳ", "10%", "$1,234.56", "€99,99", "2024-01-15T10:30:00Z", "192.168.0.1",
  "+1 (555) 123-4567", "v1.2.3-beta.4", "1st 2nd 3rd 4th", "1+1=2", "π≈3.14", "7".repeat(300), "0.000000000000001", "9".repeat(41) + "." + "1".repeat(17));

// --- contractions ---
add("contraction", "don't I'll we've they're she'd he's it's", "DON'T I'LL WE'VE THEY'RE SHE'D HE'S IT'S", "Don'T", "'s", "'S", "'t", "'re", "'ve",
  "'m", "'ll", "'d", "'x", "''", "'", "' s", "'ſ", "it’s curly", "rock 'n' roll", "'tis the season", "O'Neil's", "a's'b't", "''s", "'LL'll'Ll");

// --- special-token look-alikes ---
add("special",
  "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<bos>hello", "hello<eos>", "<bos><bos>", "<<bos>>", "<BOS>", "< bos>", "<bos", "bos>",
  "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n", "<start_of_turn>", "<start_of_turn", "<end_of_turn><eos>",
  "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>", "<|im_end|>",
  "<|endoftext|>", "<|im_", "<|im_start", "im_start|>", "<|im_start|><|im_end|>", "a<|im_end|>b", "<|endoftext|><|endoftext|>",
  "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<tool_response>ok</tool_response>",
  "<|turn>user\nhi<turn|>", "<|channel>thought\n<channel|>", "<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>", "<|think|>",
  "<unused0>", "<unused99>", "<unused99999>", "<0xE2>", "<0x41>", "<0xe2>", "<0xZZ>", "<0xE2><0x98><0x83>", "<image_soft_token>",
  "<start_of_image>", "[multimodal]", "<table><tr><td>x</td></tr></table>", "<b>bold</b> <i>it</i> <code>c</code>", "<h1>T</h1>",
  "text <|im_start|> more", "  <|im_end|>  ", "\n<bos>\n", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>",
  "<bos>" + "x".repeat(10) + "<eos>", "<end_of_turn>\n\n<start_of_turn>");

// --- control characters and odd code points ---
add("control", "\u0000", "a\u0000b", "\u0001\u0002\u0003", "\u007f", "\u001b[31mred\u001b[0m", "\u0080\u009f", "\u00ad soft hyphen", "\ufffd",
  "\uffff", "\ufffe", "\ue000 private use", "\u{f0000}\u{10fffd}", "\u200e\u200f\u202e reversed\u202c", "a\u034fb", "\u2060\u2061", "\u{e0001}\u{e0020}",
  "\u0008backspace", "bell\u0007", "a\u001fb", "\u00a0", "\u00a0\u00a0", "\u2800 braille blank", "\u{1f3fb}", "\ufe0f", "\u200d", "a\u200db");

// --- long words ---
add("long",
  "a".repeat(5000), "ab".repeat(2000), "supercalifragilisticexpialidocious".repeat(50), "é".repeat(3000), "😀".repeat(1000), "的".repeat(2000),
  "=".repeat(2000), "-".repeat(3000), " ".repeat(1000), "\n".repeat(500), "\t".repeat(100), "_".repeat(1500), "0".repeat(4000),
  "Ġ".repeat(300), "▁".repeat(300), "ab " .repeat(1000), "x" + " ".repeat(700) + "y", "a\n".repeat(800),
  "https://example.com/" + "path/".repeat(200) + "?q=" + "v".repeat(300), "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(30));
{
  const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  let s = ""; for (let i = 0; i < 4000; i++) s += pick(b64);
  add("long", s);
  let t = ""; for (let i = 0; i < 1500; i++) t += String.fromCodePoint(0x4e00 + Math.floor(rand() * 20000));
  add("long", t);
  let u = ""; for (let i = 0; i < 2000; i++) u += pick(["a", "é", "😀", " ", "\n", "的", "1", ".", "ß", "\u0301", "\t", "Ж", "ก"]);
  add("long", u);
}

// --- prose and mixed ---
add("prose",
  "In 1905, Einstein published four groundbreaking papers. They changed physics forever!",
  "The price is $42.99 (tax incl.) — that's 15% off; see https://shop.example.com/item?id=123&ref=abc#top.",
  "Email me at john.doe+tag@example.co.uk or call +44 20 7946 0958.",
  "She said, \"Hello there!\" and he replied: 'Hi…'", "Wait... what?!?! No way!!!", "— em dash – en dash ‐ hyphen", "«guillemets» „quotes“ ‚single‘",
  "Mr. and Mrs. Smith went to Washington, D.C., on Jan. 5th.", "e.g. i.e. etc. vs. a.m. p.m.", "Hello\n\nWorld\n\n\nThis is a test.\n",
  "Column A\tColumn B\tColumn C\n1\t2\t3\n", "first line\r\nsecond line\r\n\r\nfourth line", "TL;DR: it works ¯\\_(ツ)_/¯",
  "日本語とEnglishの混在テキスト123です。", "Prices: 100円, 200元, ₹300, ₩400, ₽500", "Temperature: -40°C = -40°F",
  "The Greek letter λ (lambda) and ∑ (sum) ∫ (integral) √ (root).", "I have 3 apples and 12 oranges; total = 15.",
  "hashtag #AI @user_name", "snake_case camelCase PascalCase kebab-case SCREAMING_CASE", "A.B.C.D.E", "a/b\\c|d", "((()))[[[]]]{{{}}}", "!!!???...,,,;;;:::",
  "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.");

// --- random mixtures of tricky pieces ---
const pieces = ["a", "b", "Z", "é", "e\u0301", " ", "  ", "\t", "\n", "\r\n", "\n\n", "😀", "👨‍👩‍👧", "的", "한", "ا", "ก", "न्", "Ж", "1", "23", "456",
  ".", ",", "'s", "'T", "!", "?", "<", ">", "|", "<bos>", "<|im_end|>", "<eos>", "<start_of_turn>", "<0x41>", "▁", "Ġ", "\u00a0", "\u3000",
  "\u0085", "\ufeff", "\u200d", "\u0000", "_", "-", "=", "#", "\\", "\"", "`", "~", "ß", "İ", "ﬁ", "½", "²", "\u0301", "\u0323", "\u1100\u1161"];
for (let i = 0; i < 80; i++) {
  const n = 1 + Math.floor(rand() * 25);
  let s = ""; for (let j = 0; j < n; j++) s += pick(pieces);
  add("random", s);
}

fs.writeFileSync(out, JSON.stringify({ description: "Hard strings for the tandem/tokenizer reference tests (made by scripts/tokenizer/corpus.mjs).", entries }, null, 1) + "\n");
console.log(`wrote ${entries.length} strings to ${out}`);
