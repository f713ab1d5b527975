package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Synthetic builds a small tokenizer of the given family ("gemma" or "qwen") with exactly
// vocabSize token ids, for random-weight test models. Its merges are learned with BPE from a
// small built-in English and code corpus, so encoding exercises real merges as well as byte
// fallback (gemma: 256 "<0xHH>" tokens after the reserved ids) or the byte-level alphabet
// (qwen: ids 0–255), and special tokens.
//
// gemma uses Gemma 4's special ids (0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4 <mask>, 46–52 tool
// tokens, 98 <|think|>, 100/101 channel, 105 <|turn>, 106 <turn|>, 107 "\n"; the other ids
// below 108 are "<unusedN>" placeholders), then the byte tokens (108–363), then characters and
// merges; it needs vocabSize ≥ 400. qwen has the 256 byte-level characters, merges, then
// <|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think>, <tool_call>, </tool_call> as the
// last ids (the byte-level characters in GPT-2's order); it needs vocabSize ≥ 300. When the
// corpus runs out of merges, placeholder vocabulary entries ("<unusedN>", "<|extra_N|>") fill
// the remaining ids.
//
// It returns tokenizer.json and tokenizer_config.json (gemma: add_bos_token true and a Gemma 4
// chat template; qwen: a ChatML template).
func Synthetic(family string, vocabSize int) (tokenizerJSON, tokenizerConfigJSON []byte, err error) {
	switch family {
	case "gemma":
		tokenizerJSON, tokenizerConfigJSON, err = syntheticGemma(vocabSize)
	case "qwen":
		tokenizerJSON, tokenizerConfigJSON, err = syntheticQwen(vocabSize)
	default:
		return nil, nil, fmt.Errorf("tokenizer: Synthetic: unknown family %q (want gemma or qwen)", family)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tokenizer: Synthetic(%s, %d): %w", family, vocabSize, err)
	}
	t, err := Parse(tokenizerJSON, tokenizerConfigJSON)
	if err != nil {
		return nil, nil, fmt.Errorf("tokenizer: Synthetic(%s, %d) made a file that does not load: %w", family, vocabSize, err)
	}
	if t.VocabSize() != vocabSize {
		return nil, nil, fmt.Errorf("tokenizer: Synthetic(%s, %d) made %d ids", family, vocabSize, t.VocabSize())
	}
	return tokenizerJSON, tokenizerConfigJSON, nil
}

// syntheticCorpus is the text the synthetic tokenizers learn their merges from.
const syntheticCorpus = `The quick brown fox jumps over the lazy dog. A language model reads text as tokens, and a
tokenizer turns the text into those tokens and back again. The model then predicts the next token,
one step at a time, while the drafter proposes several tokens that the target model verifies in a
single pass. When the drafter is right, the output comes faster and it is exactly the same.

Hello, world! How are you today? I am fine, thank you. What is the weather like in the city?
It is sunny and warm, with a light wind from the west. Let me think about that for a moment.
The answer is 42, and the total is 1,024 items at $3.50 each; that's 3,584 dollars in all.

def encode(text: str) -> list[int]:
    """Return the token ids of text."""
    ids = []
    for word in text.split():
        ids.extend(vocab.get(word, [unk_id]))
    return ids

class Tokenizer:
    def __init__(self, path):
        self.path = path
        self.cache = {}

func (t *Tokenizer) Encode(text string) []int32 {
	var ids []int32
	for _, word := range strings.Fields(text) {
		if id, ok := t.vocab[word]; ok {
			ids = append(ids, id)
		}
	}
	return ids
}

for (let i = 0; i < items.length; i++) {
  console.log("item " + i + ": " + items[i].name);
}

{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
SELECT name, count(*) FROM users WHERE active = true GROUP BY name ORDER BY name;
`

// bpeTrain learns up to maxMerges merges from words (symbol sequences with counts). Each step
// merges the most frequent adjacent pair (ties: the smallest pair in string order), as long as
// it occurs at least twice. It returns the merges in order.
func bpeTrain(words map[string]int, split func(string) []string, maxMerges int) [][2]string {
	type word struct {
		syms  []string
		count int
	}
	keys := make([]string, 0, len(words))
	for w := range words {
		keys = append(keys, w)
	}
	sort.Strings(keys)
	ws := make([]*word, 0, len(keys))
	for _, k := range keys {
		ws = append(ws, &word{split(k), words[k]})
	}
	var merges [][2]string
	for len(merges) < maxMerges {
		counts := map[[2]string]int{}
		for _, w := range ws {
			for i := 0; i+1 < len(w.syms); i++ {
				counts[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		best, bestN := [2]string{}, 1
		for p, n := range counts {
			if n > bestN || (n == bestN && n > 1 && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			break
		}
		merges = append(merges, best)
		for _, w := range ws {
			out := w.syms[:0]
			for i := 0; i < len(w.syms); i++ {
				if i+1 < len(w.syms) && w.syms[i] == best[0] && w.syms[i+1] == best[1] {
					out = append(out, best[0]+best[1])
					i++
				} else {
					out = append(out, w.syms[i])
				}
			}
			w.syms = out
		}
	}
	return merges
}

func runeStrings(s string) []string {
	out := make([]string, 0, len(s))
	for _, r := range s {
		out = append(out, string(r))
	}
	return out
}

// synthFile assembles a tokenizer.json with the vocabulary in id order.
type synthFile struct {
	vocab         []string // id -> piece
	merges        [][2]string
	mergesAsPairs bool
	added         []jsonAddedToken
	normalizer    string
	preTokenizer  string
	postProcessor string
	decoder       string
	model         string // the model object's fields other than vocab and merges
}

func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func (f *synthFile) bytes() []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, a := range f.added {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %v}", *a.ID, jsonString(a.Content), a.Special)
	}
	b.WriteString("\n  ],\n")
	fmt.Fprintf(&b, "  \"normalizer\": %s,\n  \"pre_tokenizer\": %s,\n  \"post_processor\": %s,\n  \"decoder\": %s,\n", f.normalizer, f.preTokenizer, f.postProcessor, f.decoder)
	fmt.Fprintf(&b, "  \"model\": {\n    %s,\n    \"vocab\": {", f.model)
	for id, p := range f.vocab {
		if id > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n      %s: %d", jsonString(p), id)
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, m := range f.merges {
		if i > 0 {
			b.WriteString(",")
		}
		if f.mergesAsPairs {
			fmt.Fprintf(&b, "\n      [%s, %s]", jsonString(m[0]), jsonString(m[1]))
		} else {
			fmt.Fprintf(&b, "\n      %s", jsonString(m[0]+" "+m[1]))
		}
	}
	b.WriteString("\n    ]\n  }\n}\n")
	return b.Bytes()
}

func configJSON(fields [][2]string) []byte {
	var b bytes.Buffer
	b.WriteString("{")
	for i, f := range fields {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n  %s: %s", jsonString(f[0]), f[1])
	}
	b.WriteString("\n}\n")
	return b.Bytes()
}

func i64(v int) *int64 { x := int64(v); return &x }

// gemmaReserved are the Gemma 4 ids below the byte tokens that have names (spec §6.1).
var gemmaReserved = map[int]struct {
	content string
	special bool
}{
	0: {"<pad>", true}, 1: {"<eos>", true}, 2: {"<bos>", true}, 3: {"<unk>", true}, 4: {"<mask>", true},
	46: {"<|tool>", true}, 47: {"<tool|>", true}, 48: {"<|tool_call>", true}, 49: {"<tool_call|>", true},
	50: {"<|tool_response>", true}, 51: {"<tool_response|>", true}, 52: {"<|\"|>", true},
	98: {"<|think|>", true}, 100: {"<|channel>", true}, 101: {"<channel|>", true},
	105: {"<|turn>", true}, 106: {"<turn|>", true}, 107: {"\n", false},
}

const (
	gemmaFirstByte = 108
	gemmaMinVocab  = 400
)

// gemmaChatTemplate follows Gemma 4's chat format (spec §6.1): BOS; a system turn when there is
// a system/developer message, tools or thinking (thinking adds <|think|>); each message as
// <|turn>ROLE\n…<turn|>\n with assistant written as model and thoughts dropped from history;
// tool calls and results in their delimiters; the generation prompt <|turn>model\n.
const gemmaChatTemplate = `{{- bos_token -}}
{%- set ns = namespace(system='', rest=messages) -%}
{%- if messages and messages[0]['role'] in ['system', 'developer'] -%}
{%- set ns.system = messages[0]['content'] -%}
{%- set ns.rest = messages[1:] -%}
{%- endif -%}
{%- if ns.system or tools or enable_thinking -%}
{{- '<|turn>system\n' -}}
{%- if enable_thinking -%}{{- '<|think|>\n' -}}{%- endif -%}
{{- ns.system -}}
{%- for tool in tools or [] -%}
{%- set fn = tool['function'] if tool['function'] is defined else tool -%}
{{- '<|tool>declaration:' + fn['name'] + (fn['parameters'] | tojson) + '<tool|>' -}}
{%- endfor -%}
{{- '<turn|>\n' -}}
{%- endif -%}
{%- for message in ns.rest -%}
{%- if message['role'] == 'tool' -%}
{{- '<|turn>user\n<|tool_response>' + (message['content'] if message['content'] is string else (message['content'] | tojson)) + '<tool_response|><turn|>\n' -}}
{%- else -%}
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
{%- set content = message['content'] if message['content'] is string else '' -%}
{%- if role == 'model' and '<channel|>' in content -%}
{%- set content = content.split('<channel|>')[-1] | trim -%}
{%- endif -%}
{{- '<|turn>' + role + '\n' + content -}}
{%- for call in message['tool_calls'] or [] -%}
{%- set fn = call['function'] if call['function'] is defined else call -%}
{{- '<|tool_call>call:' + fn['name'] + '{' -}}
{%- for k, v in (fn['arguments'] or {}).items() -%}
{{- k + ':' -}}{%- if v is string -%}{{- '<|"|>' + v + '<|"|>' -}}{%- else -%}{{- v | tojson -}}{%- endif -%}{{- ',' if not loop.last else '' -}}
{%- endfor -%}
{{- '}<tool_call|>' -}}
{%- endfor -%}
{{- '<turn|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|turn>model\n' -}}{%- endif -%}`

// chatMLTemplate is Qwen's ChatML: <|im_start|>ROLE\n…<|im_end|>\n, prompt <|im_start|>assistant\n.
const chatMLTemplate = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + (message['content'] if message['content'] is string else '') + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}`

func syntheticGemma(vocabSize int) ([]byte, []byte, error) {
	if vocabSize < gemmaMinVocab {
		return nil, nil, fmt.Errorf("gemma needs vocabSize >= %d (108 reserved ids, 256 byte tokens, characters and merges)", gemmaMinVocab)
	}
	f := &synthFile{mergesAsPairs: true}
	unused := 0
	for id := 0; id < gemmaFirstByte; id++ {
		r, ok := gemmaReserved[id]
		if !ok {
			r.content = fmt.Sprintf("<unused%d>", unused)
			unused++
		}
		f.vocab = append(f.vocab, r.content)
		f.added = append(f.added, jsonAddedToken{ID: i64(id), Content: r.content, Special: r.special})
	}
	for b := 0; b < 256; b++ {
		f.vocab = append(f.vocab, byteTokenName(byte(b)))
	}
	// Words as Gemma sees them: spaces are '▁', "\n" is an added token; '▁' starts a word.
	text := strings.ReplaceAll(syntheticCorpus, " ", "\u2581")
	words := map[string]int{}
	for _, line := range strings.Split(text, "\n") {
		start := 0
		for i, r := range line {
			if r == '\u2581' && i > start {
				words[line[start:i]]++
				start = i
			}
		}
		if start < len(line) {
			words[line[start:]]++
		}
	}
	// Characters, most frequent first, up to half of the remaining budget.
	freq := map[string]int{}
	for w, n := range words {
		for _, r := range w {
			freq[string(r)] += n
		}
	}
	chars := make([]string, 0, len(freq))
	for c := range freq {
		chars = append(chars, c)
	}
	sort.Slice(chars, func(i, j int) bool {
		if freq[chars[i]] != freq[chars[j]] {
			return freq[chars[i]] > freq[chars[j]]
		}
		return chars[i] < chars[j]
	})
	budget := vocabSize - len(f.vocab)
	if len(chars) > budget/2 {
		chars = chars[:budget/2]
	}
	known := map[string]bool{}
	for _, p := range f.vocab {
		known[p] = true
	}
	for _, c := range chars {
		f.vocab = append(f.vocab, c)
		known[c] = true
	}
	// Words with characters outside the alphabet are split there (they become byte tokens).
	trainWords := map[string]int{}
	for w, n := range words {
		start := 0
		for i, r := range w {
			if !known[string(r)] {
				if i > start {
					trainWords[w[start:i]] += n
				}
				start = i + utf8.RuneLen(r)
			}
		}
		if start < len(w) {
			trainWords[w[start:]] += n
		}
	}
	for _, m := range bpeTrain(trainWords, runeStrings, vocabSize) {
		if len(f.vocab) >= vocabSize {
			break
		}
		f.merges = append(f.merges, m)
		if p := m[0] + m[1]; !known[p] {
			known[p] = true
			f.vocab = append(f.vocab, p)
		}
	}
	// Fillers are plain vocabulary entries (unreachable by merges), not added tokens, so a
	// full-size vocabulary stays cheap to load.
	for len(f.vocab) < vocabSize {
		f.vocab = append(f.vocab, fmt.Sprintf("<unused%d>", unused))
		unused++
	}
	f.normalizer = `{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}`
	f.preTokenizer = `{"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}`
	f.postProcessor = `{"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<bos>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}}`
	f.decoder = `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]}`
	f.model = `"type": "BPE",
    "dropout": null,
    "unk_token": "<unk>",
    "continuing_subword_prefix": null,
    "end_of_word_suffix": null,
    "fuse_unk": true,
    "byte_fallback": true,
    "ignore_merges": false`
	cfg := configJSON([][2]string{
		{"add_bos_token", "true"},
		{"add_eos_token", "false"},
		{"bos_token", `"<bos>"`},
		{"eos_token", `"<eos>"`},
		{"pad_token", `"<pad>"`},
		{"unk_token", `"<unk>"`},
		{"mask_token", `"<mask>"`},
		{"clean_up_tokenization_spaces", "false"},
		{"model_max_length", "131072"},
		{"padding_side", `"left"`},
		{"tokenizer_class", `"GemmaTokenizer"`},
		{"chat_template", jsonString(gemmaChatTemplate)},
	})
	return f.bytes(), cfg, nil
}

var qwenSpecials = []struct {
	content string
	special bool
}{
	{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true},
	{"<think>", false}, {"</think>", false}, {"<tool_call>", false}, {"</tool_call>", false},
}

const qwenMinVocab = 300

func syntheticQwen(vocabSize int) ([]byte, []byte, error) {
	if vocabSize < qwenMinVocab {
		return nil, nil, fmt.Errorf("qwen needs vocabSize >= %d (256 byte-level characters, merges, %d special tokens)", qwenMinVocab, len(qwenSpecials))
	}
	f := &synthFile{}
	known := map[string]bool{}
	// GPT-2's order: the bytes that map to themselves, then the others.
	for pass := 0; pass < 2; pass++ {
		for b := 0; b < 256; b++ {
			if (byteToRune[b] == rune(b)) == (pass == 0) {
				f.vocab = append(f.vocab, byteToString[b])
				known[byteToString[b]] = true
			}
		}
	}
	v := knownPatterns[patQwen2]
	words := map[string]int{}
	for _, m := range v.findAll(syntheticCorpus, nil) {
		words[byteLevelEncode(syntheticCorpus[m[0]:m[1]])]++
	}
	limit := vocabSize - len(qwenSpecials)
	for _, m := range bpeTrain(words, runeStrings, limit) {
		if len(f.vocab) >= limit {
			break
		}
		f.merges = append(f.merges, m)
		if p := m[0] + m[1]; !known[p] {
			known[p] = true
			f.vocab = append(f.vocab, p)
		}
	}
	for extra := 0; len(f.vocab) < limit; extra++ {
		f.vocab = append(f.vocab, fmt.Sprintf("<|extra_%d|>", extra))
	}
	var specials []jsonAddedToken
	for _, s := range qwenSpecials {
		specials = append(specials, jsonAddedToken{ID: i64(len(f.vocab)), Content: s.content, Special: s.special})
		f.vocab = append(f.vocab, s.content)
	}
	f.added = specials
	f.normalizer = `{"type": "NFC"}`
	f.preTokenizer = `{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ` + jsonString(patQwen2) + `}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}`
	f.postProcessor = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`
	f.decoder = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`
	f.model = `"type": "BPE",
    "dropout": null,
    "unk_token": null,
    "continuing_subword_prefix": "",
    "end_of_word_suffix": "",
    "fuse_unk": false,
    "byte_fallback": false,
    "ignore_merges": false`
	cfg := configJSON([][2]string{
		{"add_bos_token", "false"},
		{"add_prefix_space", "false"},
		{"bos_token", "null"},
		{"eos_token", `"<|im_end|>"`},
		{"pad_token", `"<|endoftext|>"`},
		{"unk_token", "null"},
		{"clean_up_tokenization_spaces", "false"},
		{"errors", `"replace"`},
		{"model_max_length", "131072"},
		{"split_special_tokens", "false"},
		{"tokenizer_class", `"Qwen2Tokenizer"`},
		{"chat_template", jsonString(chatMLTemplate)},
	})
	return f.bytes(), cfg, nil
}
