package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// tinyJSON assembles a tokenizer.json: vocab pieces get ids in order; merges are "a b" strings.
type tinyJSON struct {
	vocab                                    []string
	merges                                   []string
	added                                    string // JSON list body
	normalizer, pre, post, decoder, modelOpt string
}

func (j tinyJSON) bytes() []byte {
	var v []string
	for i, p := range j.vocab {
		v = append(v, fmt.Sprintf("%s: %d", jsonString(p), i))
	}
	var m []string
	for _, x := range j.merges {
		m = append(m, jsonString(x))
	}
	orNull := func(s string) string {
		if s == "" {
			return "null"
		}
		return s
	}
	model := `"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false`
	if j.modelOpt != "" {
		model = j.modelOpt
	}
	return []byte(fmt.Sprintf(`{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [%s],
"normalizer": %s, "pre_tokenizer": %s, "post_processor": %s, "decoder": %s,
"model": {%s, "vocab": {%s}, "merges": [%s]}}`, j.added, orNull(j.normalizer), orNull(j.pre), orNull(j.post), orNull(j.decoder), model, strings.Join(v, ", "), strings.Join(m, ", ")))
}

func mustParse(t *testing.T, j tinyJSON, config string) *Tokenizer {
	t.Helper()
	var cj []byte
	if config != "" {
		cj = []byte(config)
	}
	tok, err := Parse(j.bytes(), cj)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, j.bytes())
	}
	return tok
}

func pieces(tok *Tokenizer, ids []int32) []string {
	var out []string
	for _, id := range ids {
		p, _ := tok.Token(id)
		out = append(out, p)
	}
	return out
}

// The examples of HF's SplitDelimiterBehavior documentation.
func TestSplitBehaviors(t *testing.T) {
	for _, c := range []struct {
		behavior splitBehavior
		invert   bool
		want     []string
	}{
		{behaviorRemoved, false, []string{"the", "final", "countdown"}},
		{behaviorIsolated, false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{behaviorMergedWithPrevious, false, []string{"the-", "final-", "-", "countdown"}},
		{behaviorMergedWithNext, false, []string{"the", "-final", "-", "-countdown"}},
		{behaviorContiguous, false, []string{"the", "-", "final", "--", "countdown"}},
		{behaviorRemoved, true, []string{"-", "-", "-"}},
	} {
		p := &splitPre{m: literalMatcher("-"), behavior: c.behavior, invert: c.invert}
		if got := p.pretokenize([]string{"the-final--countdown"}, true); !slices.Equal(got, c.want) {
			t.Errorf("behavior %d invert %v: %q, want %q", c.behavior, c.invert, got, c.want)
		}
	}
}

func TestPreTokenizers(t *testing.T) {
	ms := &metaspacePre{replacement: "▁", prepend: prependAlways, split: true}
	if got := ms.pretokenize([]string{"Hey friend!"}, false); !slices.Equal(got, []string{"▁Hey", "▁friend!"}) {
		t.Errorf("Metaspace: %q", got)
	}
	ms = &metaspacePre{replacement: "▁", prepend: prependFirst, split: false}
	if got := ms.pretokenize([]string{"Hey friend"}, false); !slices.Equal(got, []string{"Hey▁friend"}) {
		t.Errorf("Metaspace first, not at the start: %q", got)
	}
	if got := ms.pretokenize([]string{"Hey friend"}, true); !slices.Equal(got, []string{"▁Hey▁friend"}) {
		t.Errorf("Metaspace first, at the start: %q", got)
	}
	bl := &byteLevelPre{addPrefixSpace: true, useRegex: true}
	if got := bl.pretokenize([]string{"Hello my friend, how's it going?"}, true); !slices.Equal(got, []string{"ĠHello", "Ġmy", "Ġfriend", ",", "Ġhow", "'s", "Ġit", "Ġgoing", "?"}) {
		t.Errorf("ByteLevel: %q", got)
	}
}

func TestDecoders(t *testing.T) {
	chain := seqDec{&replaceDec{literal: "▁", content: " "}, byteFallbackDec{}, fuseDec{}, &stripDec{content: ' ', start: 1}}
	if got := strings.Join(chain.decodeChain([]string{"▁Hello", "▁wor", "ld", "<0xE2>", "<0x98>", "<0x83>"}), ""); got != "Hello world☃" {
		t.Errorf("Llama-style chain: %q", got)
	}
	ms := &metaspaceDec{replacement: '▁', prepend: prependAlways}
	if got := strings.Join(ms.decodeChain([]string{"▁Hey", "▁friend"}), ""); got != "Hey friend" {
		t.Errorf("Metaspace: %q", got)
	}
	ms.prepend = prependNever
	if got := strings.Join(ms.decodeChain([]string{"▁Hey", "▁friend"}), ""); got != " Hey friend" {
		t.Errorf("Metaspace never: %q", got)
	}
	if got := strings.Join(byteLevelDec{}.decodeChain([]string{"Hello", "Ġw", "Ã©", "âĺ"}), ""); got != "Hello wé\ufffd" {
		t.Errorf("ByteLevel: %q", got)
	}
	if got := strings.Join((&stripDec{content: 'x', start: 2, stop: 1}).decodeChain([]string{"xxxaxx", "x"}), ""); got != "xax" {
		t.Errorf("Strip: %q", got)
	}
}

// A vocabulary with byte tokens, ▁, letters and a few merges.
func gemmaLike() tinyJSON {
	v := []string{"<pad>", "<eos>", "<bos>", "<unk>", "<x>", "<y>"}
	for b := 0; b < 256; b++ {
		v = append(v, byteTokenName(byte(b)))
	}
	v = append(v, "▁", "a", "b", "c", "x", "<", ">", "▁a", "ab", "▁ab", "abc", "▁▁", "X", "é")
	return tinyJSON{
		vocab:      v,
		merges:     []string{"▁ a", "a b", "▁a b", "ab c", "▁ ▁"},
		normalizer: `{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}`,
		decoder:    `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]}`,
		modelOpt:   `"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true`,
		added: `{"id": 0, "content": "<pad>", "special": true}, {"id": 1, "content": "<eos>", "special": true},
			{"id": 2, "content": "<bos>", "special": true}, {"id": 3, "content": "<unk>", "special": true}`,
	}
}

func TestAddedTokenOptions(t *testing.T) {
	for _, c := range []struct {
		token, in string
		want      []string
	}{
		{`"content": "<x>"`, "a <x> b", []string{"a", "▁", "<x>", "▁", "b"}},
		{`"content": "<x>", "lstrip": true`, "a  <x> b", []string{"a", "<x>", "▁", "b"}},
		{`"content": "<x>", "rstrip": true`, "a <x>  b", []string{"a", "▁", "<x>", "b"}},
		{`"content": "<x>", "lstrip": true, "rstrip": true`, "a <x> b", []string{"a", "<x>", "b"}},
		{`"content": "<x>", "single_word": true`, "a<x>b", []string{"a", "<", "x", ">", "b"}},
		{`"content": "<x>", "single_word": true`, "a <x> b", []string{"a", "▁", "<x>", "▁", "b"}},
		// A normalized token is matched in normalized text ("a b" is found as "a▁b").
		{`"content": "a b", "normalized": true`, "xa▁by", []string{"x", "a b", "<0x79>"}},
		{`"content": "a b", "normalized": false`, "xa▁by", []string{"x", "a▁b", "<0x79>"}},
		{`"content": "a b", "normalized": false`, "xa by", []string{"x", "a b", "<0x79>"}},
	} {
		j := gemmaLike()
		if strings.Contains(c.token, `"a b"`) {
			j.vocab = append(j.vocab, "a b", "a▁b")
			j.merges = append(j.merges, "a ▁b")
			j.vocab = append(j.vocab, "▁b")
			j.merges = append(j.merges, "▁ b")
		}
		id := slices.Index(j.vocab, "<x>")
		if strings.Contains(c.token, `"a b"`) {
			id = slices.Index(j.vocab, "a b")
		}
		j.added += fmt.Sprintf(`, {"id": %d, %s, "special": false}`, id, c.token)
		tok := mustParse(t, j, "")
		if got := pieces(tok, tok.Encode(c.in, false)); !slices.Equal(got, c.want) {
			t.Errorf("added token {%s}, encode(%q) = %q, want %q", c.token, c.in, got, c.want)
		}
	}
}

func TestModelOptions(t *testing.T) {
	j := gemmaLike()
	tok := mustParse(t, j, "")
	if got := pieces(tok, tok.Encode(" abc ab☃<eos>", false)); !slices.Equal(got, []string{"▁ab", "c", "▁ab", "<0xE2>", "<0x98>", "<0x83>", "<eos>"}) {
		t.Errorf("byte fallback: %q", got)
	}
	// Without byte fallback: the unknown token, fused or not; without one, characters vanish.
	j.modelOpt = `"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": false`
	tok = mustParse(t, j, "")
	if got := pieces(tok, tok.Encode("a☃☃b", false)); !slices.Equal(got, []string{"a", "<unk>", "b"}) {
		t.Errorf("fuse_unk: %q", got)
	}
	j.modelOpt = `"type": "BPE", "unk_token": "<unk>", "fuse_unk": false`
	tok = mustParse(t, j, "")
	if got := pieces(tok, tok.Encode("a☃☃b", false)); !slices.Equal(got, []string{"a", "<unk>", "<unk>", "b"}) {
		t.Errorf("no fuse_unk: %q", got)
	}
	j.modelOpt = `"type": "BPE", "unk_token": null`
	tok = mustParse(t, j, "")
	if got := pieces(tok, tok.Encode("a☃b", false)); !slices.Equal(got, []string{"ab"}) { // ☃ dropped, then a+b merge, as in HF
		t.Errorf("no unk token: %q", got)
	}
	// ignore_merges: a word in the vocabulary is one token even if merges would split it.
	k := tinyJSON{vocab: []string{"a", "b", "c", "ab", "bc", "abc"}, merges: []string{"b c", "a bc"}}
	tok = mustParse(t, k, "")
	if got := pieces(tok, tok.Encode("abc", false)); !slices.Equal(got, []string{"abc"}) {
		t.Errorf("merges: %q", got)
	}
	k.merges = []string{"a b"}
	tok = mustParse(t, k, "")
	if got := pieces(tok, tok.Encode("abc", false)); !slices.Equal(got, []string{"ab", "c"}) {
		t.Errorf("merges: %q", got)
	}
	k.modelOpt = `"type": "BPE", "ignore_merges": true`
	tok = mustParse(t, k, "")
	if got := pieces(tok, tok.Encode("abc", false)); !slices.Equal(got, []string{"abc"}) {
		t.Errorf("ignore_merges: %q", got)
	}
	// continuing_subword_prefix and end_of_word_suffix.
	p := tinyJSON{vocab: []string{"a", "##b", "##c", "ab", "abc"}, merges: []string{"a ##b", "ab ##c"}, modelOpt: `"type": "BPE", "continuing_subword_prefix": "##"`}
	tok = mustParse(t, p, "")
	if got := pieces(tok, tok.Encode("abc", false)); !slices.Equal(got, []string{"abc"}) {
		t.Errorf("continuing_subword_prefix: %q", got)
	}
	s := tinyJSON{vocab: []string{"a", "b", "b</w>", "ab</w>"}, merges: []string{"a b</w>"}, modelOpt: `"type": "BPE", "end_of_word_suffix": "</w>"`}
	tok = mustParse(t, s, "")
	if got := pieces(tok, tok.Encode("ab", false)); !slices.Equal(got, []string{"ab</w>"}) {
		t.Errorf("end_of_word_suffix: %q", got)
	}
	// Merges given as pairs.
	q := []byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}}`)
	tok2, err := Parse(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok2.Encode("ab", false); !slices.Equal(got, []int32{2}) {
		t.Errorf("pair merges: %v", got)
	}
}

func TestPostProcessors(t *testing.T) {
	j := gemmaLike()
	// No post-processor: nothing is added, whatever add_bos_token says (HF's behaviour).
	tok := mustParse(t, j, `{"add_bos_token": true, "add_eos_token": true, "bos_token": "<bos>", "eos_token": {"content": "<eos>"}}`)
	if got := pieces(tok, tok.Encode("a", true)); !slices.Equal(got, []string{"a"}) {
		t.Errorf("no post-processor: %q", got)
	}
	if !tok.AddBOSToken() {
		t.Errorf("AddBOSToken false")
	}
	if bos, ok := tok.BOS(); !ok || bos != 2 {
		t.Errorf("BOS %d %v", bos, ok)
	}
	if eos, ok := tok.EOS(); !ok || eos != 1 {
		t.Errorf("EOS %d %v", eos, ok)
	}
	for _, c := range []struct {
		post string
		want []string
	}{
		{`{"type": "TemplateProcessing", "single": "<bos> $A <eos>", "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}, "<eos>": {"id": "<eos>", "ids": [1], "tokens": ["<eos>"]}}}`, []string{"<bos>", "a", "<eos>"}},
		{`{"type": "RobertaProcessing", "sep": ["<eos>", 1], "cls": ["<bos>", 2]}`, []string{"<bos>", "a", "<eos>"}},
		{`{"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}}]}`, []string{"<bos>", "a"}},
		{`{"type": "ByteLevel"}`, []string{"a"}},
	} {
		j.post = c.post
		tok := mustParse(t, j, "")
		if got := pieces(tok, tok.Encode("a", true)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.post, got, c.want)
		}
		if got := pieces(tok, tok.Encode("a", false)); !slices.Equal(got, []string{"a"}) {
			t.Errorf("%s without specials: %q", c.post, got)
		}
	}
}

func TestParseErrors(t *testing.T) {
	base := gemmaLike()
	for _, c := range []struct {
		name string
		json []byte
		cfg  string
		want string
	}{
		{"empty", []byte(""), "", "empty"},
		{"not json", []byte("{"), "", "tokenizer.json"},
		{"no model", []byte(`{"added_tokens": []}`), "", "no model"},
		{"unigram", []byte(`{"model": {"type": "Unigram", "vocab": []}}`), "", `model type "Unigram" is not supported`},
		{"dropout", []byte(`{"model": {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}}`), "", "dropout"},
		{"bad merge", []byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}`), "", `token "b" is not in the vocab`},
		{"bad merge result", []byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}}`), "", `merged token "ab"`},
		{"merge not two", []byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}`), "", "not two tokens"},
		{"negative id", []byte(`{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}`), "", "out of range"},
		{"duplicate id", []byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}}`), "", "two tokens with id 0"},
		{"added without id", []byte(`{"added_tokens": [{"content": "x"}], "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", "has no id"},
		{"normalizer", []byte(`{"normalizer": {"type": "Lowercase"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", `normalizer type "Lowercase" is not supported`},
		{"nested normalizer", []byte(`{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "BertNormalizer"}]}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", `Sequence[1]: normalizer type "BertNormalizer"`},
		{"pre-tokenizer", []byte(`{"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", `pre-tokenizer type "Whitespace" is not supported`},
		{"decoder", []byte(`{"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", `decoder type "WordPiece" is not supported`},
		{"post-processor", []byte(`{"post_processor": {"type": "Foo"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", `post-processor type "Foo" is not supported`},
		{"no type", []byte(`{"decoder": {"content": "x"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", "no type"},
		{"regex", []byte(`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<=a+)b"}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", "look-behind"},
		{"behavior", []byte(`{"pre_tokenizer": {"type": "Split", "pattern": {"String": "x"}, "behavior": "Sideways"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", `Split behavior "Sideways"`},
		{"template", []byte(`{"post_processor": {"type": "TemplateProcessing", "single": "<s> $A", "special_tokens": {}}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`), "", `special token "<s>" is not in special_tokens`},
		{"config json", base.bytes(), "{", "tokenizer_config.json"},
		{"config bos", base.bytes(), `{"bos_token": "<s>"}`, `bos_token "<s>" is not in the vocabulary`},
		{"vocab type", []byte(`{"model": {"type": "BPE", "vocab": [1, 2], "merges": []}}`), "", "model"},
	} {
		_, err := Parse(c.json, []byte(c.cfg))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestStreamingDecoderChains streams random ids through decoder pipelines the real tokenizers
// don't use (Strip, Metaspace, multi-character Replace, transformers' clean-up, no decoder, a
// ByteFallback after Fuse) and checks every chunk against Decode.
func TestStreamingDecoderChains(t *testing.T) {
	chains := []string{
		`{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}`,
		`{"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Replace", "pattern": {"String": "▁▁"}, "content": "<2>"}, {"type": "Strip", "content": "▁", "start": 2, "stop": 2}]}`,
		`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`,
		`{"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}]}`,
		`{"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"}]}`,
		`{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": "▁+"}, "content": " "}, {"type": "ByteFallback"}]}`,
		`{"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Replace", "pattern": {"Regex": "a+"}, "content": "A"}]}`,
		`{"type": "ByteLevel"}`,
		`{"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "Replace", "pattern": {"String": "ab"}, "content": "c"}, {"type": "Strip", "content": "a", "start": 0, "stop": 3}]}`,
		`{"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "ByteLevel"}]}`,
		``,
	}
	rng := rand.New(rand.NewPCG(5, 8))
	for ci, chain := range chains {
		for _, cleanup := range []bool{false, true} {
			j := gemmaLike()
			j.vocab = append(j.vocab, " ", ".", "'s", "Ġ", "âĺ", "ĥ", "Ã©")
			j.decoder = chain
			tok := mustParse(t, j, fmt.Sprintf(`{"clean_up_tokenization_spaces": %v}`, cleanup))
			for it := 0; it < 300; it++ {
				ids := make([]int32, rng.IntN(30))
				for i := range ids {
					if rng.IntN(3) == 0 {
						ids[i] = int32(6 + 0xE0 + rng.IntN(32)) // byte tokens of lead and continuation bytes
						if rng.IntN(2) == 0 {
							ids[i] = int32(6 + 0x80 + rng.IntN(64))
						}
					} else {
						ids[i] = int32(rng.IntN(tok.VocabSize() + 2)) // includes unknown ids
					}
				}
				skip := it%2 == 0
				want := tok.Decode(ids, skip)
				if got := streamDecode(t, tok, ids, skip, fmt.Sprintf("chain %d", ci)); got != want {
					t.Fatalf("chain %d cleanup %v ids %v (%q): streamed %q, Decode %q", ci, cleanup, ids, pieces(tok, ids), got, want)
				}
			}
		}
	}
}

func TestDecoderReuse(t *testing.T) {
	tok := mustParse(t, gemmaLike(), "")
	ids := tok.Encode("abc ab☃ é", true)
	d := tok.NewDecoder(true)
	for round := 0; round < 3; round++ {
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		if got, want := b.String(), tok.Decode(ids, true); got != want {
			t.Fatalf("round %d: %q, want %q", round, got, want)
		}
	}
	// Held-back bytes come out on Flush, not before.
	d.Reset()
	e2, _ := tok.ID("<0xE2>")
	if s := d.Add(e2); s != "" {
		t.Errorf("a lone lead byte was emitted: %q", s)
	}
	if s := d.Flush(); s != "\ufffd" {
		t.Errorf("Flush of a lone lead byte: %q", s)
	}
}

func TestAccessors(t *testing.T) {
	j := gemmaLike()
	j.added += `, {"id": 300, "content": "<extra>", "special": false}`
	tok := mustParse(t, j, "")
	if tok.VocabSize() != 301 {
		t.Errorf("VocabSize %d", tok.VocabSize())
	}
	if p, ok := tok.Token(300); !ok || p != "<extra>" {
		t.Errorf("Token(300) = %q %v", p, ok)
	}
	if _, ok := tok.Token(299); ok {
		t.Errorf("Token(299) exists")
	}
	if _, ok := tok.Token(-1); ok {
		t.Errorf("Token(-1) exists")
	}
	if id, ok := tok.ID("<extra>"); !ok || id != 300 {
		t.Errorf("ID(<extra>) = %d %v", id, ok)
	}
	if id, ok := tok.ID("▁ab"); !ok || int(id) != slices.Index(j.vocab, "▁ab") {
		t.Errorf("ID(▁ab) = %d %v", id, ok)
	}
	if !tok.IsSpecial(2) || tok.IsSpecial(300) || tok.IsSpecial(5000) {
		t.Errorf("IsSpecial")
	}
	if got := tok.Decode([]int32{2, 300, 9999, -4}, true); got != "<extra>" {
		t.Errorf("Decode skipping specials and unknown ids: %q", got)
	}
	// Invalid UTF-8 input is read as U+FFFD.
	if got, want := tok.Encode("a\xffb", false), tok.Encode("a\ufffdb", false); !slices.Equal(got, want) {
		t.Errorf("invalid UTF-8: %v vs %v", got, want)
	}
}
