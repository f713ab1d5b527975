package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Parsing of tokenizer.json and tokenizer_config.json. Every unsupported component type and
// every malformed field is an error that names it.

type jsonTokenizer struct {
	Version       string           `json:"version"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	AddedTokens   []jsonAddedToken `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

type jsonAddedToken struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type jsonBPE struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int64 `json:"vocab"`
	Merges                  mergeList        `json:"merges"`
}

// mergeList reads merges as "a b" strings or [a, b] pairs.
type mergeList [][2]string

func (m *mergeList) UnmarshalJSON(b []byte) error {
	t := bytes.TrimSpace(b)
	if bytes.Equal(t, []byte("null")) {
		*m = nil
		return nil
	}
	if len(t) == 0 || t[0] != '[' {
		return fmt.Errorf("merges is not a list")
	}
	rest := bytes.TrimSpace(t[1:])
	if len(rest) > 0 && rest[0] == '[' {
		var pairs [][]string
		if err := decodeJSON(t, &pairs); err != nil {
			return fmt.Errorf("merges: %w", err)
		}
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return fmt.Errorf("merges[%d] has %d elements, want 2", i, len(p))
			}
			out[i] = [2]string{p[0], p[1]}
		}
		*m = out
		return nil
	}
	var lines []string
	if err := decodeJSON(t, &lines); err != nil {
		return fmt.Errorf("merges: %w", err)
	}
	out := make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return fmt.Errorf("merges[%d] %q is not two tokens separated by one space", i, l)
		}
		out[i] = [2]string{a, b}
	}
	*m = out
	return nil
}

// decodeJSON is json.Unmarshal through a Decoder, which scans the input once instead of
// validating it first and then decoding it (tokenizer.json files run to tens of megabytes).
func decodeJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// component is the common shape of normalizers, pre-tokenizers, decoders and post-processors.
type component struct {
	Type string `json:"type"`
	// Replace, Split
	Pattern *jsonPattern `json:"pattern"`
	Content *string      `json:"content"`
	// Split
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// ByteLevel
	AddPrefixSpace *bool `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Metaspace
	Replacement   *string `json:"replacement"`
	PrependScheme *string `json:"prepend_scheme"`
	Split         *bool   `json:"split"`
	// Prepend
	Prepend *string `json:"prepend"`
	// Strip normalizer
	StripLeft  *bool `json:"strip_left"`
	StripRight *bool `json:"strip_right"`
	// Strip decoder
	Start *int `json:"start"`
	Stop  *int `json:"stop"`
	// Sequences
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	Processors    []json.RawMessage `json:"processors"`
	// TemplateProcessing
	Single        json.RawMessage                `json:"single"`
	SpecialTokens map[string]jsonTemplateSpecial `json:"special_tokens"`
	// RobertaProcessing, BertProcessing
	Sep []json.RawMessage `json:"sep"`
	Cls []json.RawMessage `json:"cls"`
}

type jsonPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type jsonTemplateSpecial struct {
	ID     string   `json:"id"`
	IDs    []int64  `json:"ids"`
	Tokens []string `json:"tokens"`
}

// jsonConfig holds the tokenizer_config.json fields the tokenizer uses; the others (chat
// template, added_tokens_decoder, class names, lengths) are ignored here.
type jsonConfig struct {
	AddBOSToken               *bool           `json:"add_bos_token"`
	BOSToken                  json.RawMessage `json:"bos_token"`
	EOSToken                  json.RawMessage `json:"eos_token"`
	CleanUpTokenizationSpaces *bool           `json:"clean_up_tokenization_spaces"`
}

func isNull(r json.RawMessage) bool {
	r = bytes.TrimSpace(r)
	return len(r) == 0 || bytes.Equal(r, []byte("null"))
}

func decodeStrict(data []byte, v any, what string) error {
	if err := decodeJSON(data, v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func parseTokenizer(tj, cj []byte) (*Tokenizer, error) {
	if len(bytes.TrimSpace(tj)) == 0 {
		return nil, fmt.Errorf("tokenizer.json is empty")
	}
	var raw jsonTokenizer
	if err := decodeStrict(tj, &raw, "tokenizer.json"); err != nil {
		return nil, err
	}
	if isNull(raw.Model) {
		return nil, fmt.Errorf("tokenizer.json: no model")
	}
	t := &Tokenizer{bos: -1, eos: -1}
	model, err := parseModel(raw.Model)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: model: %w", err)
	}
	t.model = model

	// Id -> piece table over the model vocabulary and the added tokens.
	maxID := int64(-1)
	for _, id := range model.vocab {
		maxID = max(maxID, int64(id))
	}
	for i, a := range raw.AddedTokens {
		if a.ID == nil {
			return nil, fmt.Errorf("tokenizer.json: added_tokens[%d] (%q) has no id", i, a.Content)
		}
		if *a.ID < 0 || *a.ID > math.MaxInt32-1 {
			return nil, fmt.Errorf("tokenizer.json: added_tokens[%d] (%q) has id %d out of range", i, a.Content, *a.ID)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("tokenizer.json: added_tokens[%d] (id %d) has empty content", i, *a.ID)
		}
		maxID = max(maxID, *a.ID)
	}
	if maxID > 1<<28 {
		return nil, fmt.Errorf("tokenizer.json: token id %d is implausibly large", maxID)
	}
	t.pieces = make([]string, maxID+1)
	t.known = make([]bool, maxID+1)
	t.special = make([]bool, maxID+1)
	for p, id := range model.vocab {
		if t.known[id] {
			return nil, fmt.Errorf("tokenizer.json: model vocab has two tokens with id %d (%q and %q)", id, t.pieces[id], p)
		}
		t.pieces[id], t.known[id] = p, true
	}
	t.addedByContent = map[string]int32{}
	var raws, norms []*addedToken
	for _, a := range raw.AddedTokens {
		at := &addedToken{id: int32(*a.ID), content: a.Content, special: a.Special, lstrip: a.Lstrip, rstrip: a.Rstrip, normalized: a.Normalized, singleWord: a.SingleWord}
		t.pieces[at.id], t.known[at.id] = at.content, true
		t.special[at.id] = at.special
		t.addedByContent[at.content] = at.id
		t.added = append(t.added, at)
		if at.normalized {
			norms = append(norms, at)
		} else {
			raws = append(raws, at)
		}
	}

	if t.normalizer, err = parseNormalizer(raw.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer.json: normalizer: %w", err)
	}
	if t.pre, err = parsePreTokenizer(raw.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer.json: pre_tokenizer: %w", err)
	}
	if t.decoder, err = parseDecoder(raw.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer.json: decoder: %w", err)
	}
	t.fastByteLevel = fastByteLevelVariant(t.pre, t.model)
	if t.post, err = parsePostProcessor(raw.PostProcessor, t); err != nil {
		return nil, fmt.Errorf("tokenizer.json: post_processor: %w", err)
	}
	// Tokens are matched longest first; sort for a deterministic trie (first content wins).
	sort.SliceStable(raws, func(i, j int) bool { return raws[i].id < raws[j].id })
	t.addedRaw = newAddedMatcher(raws, func(a *addedToken) string { return a.content })
	t.addedNorm = newAddedMatcher(norms, func(a *addedToken) string {
		if t.normalizer != nil {
			return t.normalizer.normalize(a.content)
		}
		return a.content
	})

	if len(bytes.TrimSpace(cj)) > 0 {
		if err := t.applyConfig(cj); err != nil {
			return nil, err
		}
	}
	if t.bos < 0 && t.post != nil {
		// No configured BOS: take the special token the template puts before the sequence.
		for _, tp := range t.post.templates {
			if len(tp.single) > 1 && tp.single[0].special != "" && len(tp.special[tp.single[0].special]) == 1 {
				t.bos = tp.special[tp.single[0].special][0]
				break
			}
		}
	}
	return t, nil
}

func (t *Tokenizer) applyConfig(cj []byte) error {
	var c jsonConfig
	if err := decodeStrict(cj, &c, "tokenizer_config.json"); err != nil {
		return err
	}
	tokenID := func(r json.RawMessage, field string) (int32, error) {
		if isNull(r) {
			return -1, nil
		}
		var name string
		if err := json.Unmarshal(r, &name); err != nil {
			var obj struct {
				Content *string `json:"content"`
			}
			if err2 := json.Unmarshal(r, &obj); err2 != nil || obj.Content == nil {
				return -1, fmt.Errorf("tokenizer_config.json: %s is neither a string nor an object with content", field)
			}
			name = *obj.Content
		}
		id, ok := t.ID(name)
		if !ok {
			return -1, fmt.Errorf("tokenizer_config.json: %s %q is not in the vocabulary", field, name)
		}
		return id, nil
	}
	var err error
	if t.bos, err = tokenID(c.BOSToken, "bos_token"); err != nil {
		return err
	}
	if t.eos, err = tokenID(c.EOSToken, "eos_token"); err != nil {
		return err
	}
	if c.AddBOSToken != nil {
		t.addBOS = *c.AddBOSToken
	}
	if c.CleanUpTokenizationSpaces != nil {
		t.cleanup = *c.CleanUpTokenizationSpaces
	}
	return nil
}

func parseModel(r json.RawMessage) (*bpeModel, error) {
	var j jsonBPE
	err := decodeJSON(r, &j)
	if err != nil || (j.Type != "" && j.Type != "BPE") || (j.Type == "" && j.Merges == nil) {
		// Name an unsupported model type before any error its other fields cause.
		var head struct {
			Type string `json:"type"`
		}
		json.Unmarshal(r, &head)
		if head.Type != "" && head.Type != "BPE" {
			return nil, fmt.Errorf("model type %q is not supported (only BPE)", head.Type)
		}
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("no type")
	}
	if j.Dropout != nil && *j.Dropout != 0 {
		return nil, fmt.Errorf("BPE dropout %v is not supported (it makes encoding random)", *j.Dropout)
	}
	if j.Vocab == nil {
		return nil, fmt.Errorf("BPE has no vocab")
	}
	m := &bpeModel{vocab: make(map[string]int32, len(j.Vocab)), unk: -1, fuseUnk: j.FuseUnk, byteFallback: j.ByteFallback, ignoreMerges: j.IgnoreMerges}
	for p, id := range j.Vocab {
		if id < 0 || id > 1<<28 {
			return nil, fmt.Errorf("vocab token %q has id %d out of range", p, id)
		}
		m.vocab[p] = int32(id)
	}
	if j.ContinuingSubwordPrefix != nil {
		m.prefix = *j.ContinuingSubwordPrefix
	}
	if j.EndOfWordSuffix != nil {
		m.suffix = *j.EndOfWordSuffix
	}
	if j.UnkToken != nil {
		if id, ok := m.vocab[*j.UnkToken]; ok {
			m.unk = id
		}
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[byteTokenName(byte(b))]; ok {
			m.byteIDs[b] = id
		}
	}
	pairs := j.Merges
	m.merges = newMergeTable(len(pairs))
	for rank, p := range pairs {
		a, ok1 := m.vocab[p[0]]
		b, ok2 := m.vocab[p[1]]
		if !ok1 || !ok2 {
			missing := p[0]
			if ok1 {
				missing = p[1]
			}
			return nil, fmt.Errorf("merges[%d] (%q %q): token %q is not in the vocab", rank, p[0], p[1], missing)
		}
		right := p[1]
		if m.prefix != "" {
			right = strings.TrimPrefix(right, m.prefix)
		}
		merged, ok := m.vocab[p[0]+right]
		if !ok {
			return nil, fmt.Errorf("merges[%d] (%q %q): merged token %q is not in the vocab", rank, p[0], p[1], p[0]+right)
		}
		m.merges.set(pairID(a, b), uint64(rank)<<32|uint64(uint32(merged)))
	}
	m.prepare()
	return m, nil
}

func parseComponent(r json.RawMessage) (*component, error) {
	var c component
	if err := json.Unmarshal(r, &c); err != nil {
		return nil, err
	}
	if c.Type == "" {
		return nil, fmt.Errorf("component has no type")
	}
	return &c, nil
}

// replacement reads a Replace component (normalizer or decoder): its
// pattern and its content.
func (c *component) replacement() (literal string, re *regex, content string, err error) {
	literal, re, err = c.pattern()
	if err != nil {
		return "", nil, "", err
	}
	if c.Content == nil {
		return "", nil, "", fmt.Errorf("Replace: no content")
	}
	return literal, re, *c.Content, nil
}

// pattern compiles a {"String": …} or {"Regex": …} pattern.
func (c *component) pattern() (literal string, re *regex, err error) {
	if c.Pattern == nil || (c.Pattern.String == nil) == (c.Pattern.Regex == nil) {
		return "", nil, fmt.Errorf("%s: pattern must have exactly one of String or Regex", c.Type)
	}
	if c.Pattern.String != nil {
		if *c.Pattern.String == "" {
			return "", nil, fmt.Errorf("%s: empty String pattern", c.Type)
		}
		return *c.Pattern.String, nil, nil
	}
	re, err = compileRegex(*c.Pattern.Regex)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", c.Type, err)
	}
	return "", re, nil
}

func parseNormalizer(r json.RawMessage) (normalizer, error) {
	if isNull(r) {
		return nil, nil
	}
	c, err := parseComponent(r)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Replace":
		lit, re, content, err := c.replacement()
		if err != nil {
			return nil, err
		}
		return &replaceNorm{literal: lit, re: re, content: content}, nil
	case "NFC":
		return unicodeNorm{formNFC}, nil
	case "NFD":
		return unicodeNorm{formNFD}, nil
	case "NFKC":
		return unicodeNorm{formNFKC}, nil
	case "NFKD":
		return unicodeNorm{formNFKD}, nil
	case "Prepend":
		if c.Prepend == nil {
			return nil, fmt.Errorf("Prepend: no prepend")
		}
		return prependNorm{*c.Prepend}, nil
	case "Strip":
		return stripNorm{left: c.StripLeft == nil || *c.StripLeft, right: c.StripRight == nil || *c.StripRight}, nil
	case "Sequence":
		var seq seqNorm
		for i, s := range c.Normalizers {
			n, err := parseNormalizer(s)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("normalizer type %q is not supported", c.Type)
}

func parseBehavior(s string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("unknown Split behavior %q", s)
}

func parsePrepend(c *component) (prependScheme, error) {
	if c.PrependScheme != nil {
		switch *c.PrependScheme {
		case "always":
			return prependAlways, nil
		case "never":
			return prependNever, nil
		case "first":
			return prependFirst, nil
		}
		return 0, fmt.Errorf("Metaspace: unknown prepend_scheme %q", *c.PrependScheme)
	}
	if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
		return prependNever, nil
	}
	return prependAlways, nil
}

func metaspaceReplacement(c *component) (string, error) {
	rep := "\u2581"
	if c.Replacement != nil {
		rep = *c.Replacement
	}
	if len([]rune(rep)) != 1 {
		return "", fmt.Errorf("Metaspace: replacement %q is not one character", rep)
	}
	return rep, nil
}

func parsePreTokenizer(r json.RawMessage) (preTokenizer, error) {
	if isNull(r) {
		return nil, nil
	}
	c, err := parseComponent(r)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Split":
		b, err := parseBehavior(c.Behavior)
		if err != nil {
			return nil, err
		}
		if c.Pattern != nil && c.Pattern.Regex != nil {
			if v, ok := knownPatterns[*c.Pattern.Regex]; ok {
				return &splitPre{m: gpt2Matcher{v}, behavior: b, invert: c.Invert}, nil
			}
		}
		lit, re, err := c.pattern()
		if err != nil {
			return nil, err
		}
		var m matcher = literalMatcher(lit)
		if re != nil {
			m = re
		}
		return &splitPre{m: m, behavior: b, invert: c.Invert}, nil
	case "ByteLevel":
		return &byteLevelPre{addPrefixSpace: c.AddPrefixSpace != nil && *c.AddPrefixSpace, useRegex: c.UseRegex == nil || *c.UseRegex}, nil
	case "Metaspace":
		rep, err := metaspaceReplacement(c)
		if err != nil {
			return nil, err
		}
		ps, err := parsePrepend(c)
		if err != nil {
			return nil, err
		}
		return &metaspacePre{replacement: rep, prepend: ps, split: c.Split == nil || *c.Split}, nil
	case "Sequence":
		var seq seqPre
		for i, s := range c.Pretokenizers {
			p, err := parsePreTokenizer(s)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("pre-tokenizer type %q is not supported", c.Type)
}

func parseDecoder(r json.RawMessage) (decoderStep, error) {
	if isNull(r) {
		return nil, nil
	}
	c, err := parseComponent(r)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Replace":
		lit, re, content, err := c.replacement()
		if err != nil {
			return nil, err
		}
		return &replaceDec{literal: lit, re: re, content: content}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Strip":
		if c.Content == nil || len([]rune(*c.Content)) != 1 {
			return nil, fmt.Errorf("Strip: content must be one character")
		}
		d := &stripDec{content: []rune(*c.Content)[0]}
		if c.Start != nil {
			d.start = *c.Start
		}
		if c.Stop != nil {
			d.stop = *c.Stop
		}
		if d.start < 0 || d.stop < 0 {
			return nil, fmt.Errorf("Strip: negative start or stop")
		}
		return d, nil
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "Metaspace":
		rep, err := metaspaceReplacement(c)
		if err != nil {
			return nil, err
		}
		ps, err := parsePrepend(c)
		if err != nil {
			return nil, err
		}
		return &metaspaceDec{replacement: []rune(rep)[0], prepend: ps}, nil
	case "Sequence":
		var seq seqDec
		for i, s := range c.Decoders {
			d, err := parseDecoder(s)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("decoder type %q is not supported", c.Type)
}

func parsePostProcessor(r json.RawMessage, t *Tokenizer) (*postProcessor, error) {
	if isNull(r) {
		return nil, nil
	}
	c, err := parseComponent(r)
	if err != nil {
		return nil, err
	}
	p := &postProcessor{}
	switch c.Type {
	case "ByteLevel":
		return p, nil // offsets only; ids are unchanged
	case "TemplateProcessing":
		tp, err := parseTemplate(c)
		if err != nil {
			return nil, err
		}
		p.templates = append(p.templates, tp)
		return p, nil
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenRef(c.Cls, "cls")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Type, err)
		}
		sep, err := tokenRef(c.Sep, "sep")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Type, err)
		}
		p.templates = append(p.templates, &template{
			single:  []templatePiece{{special: "cls"}, {}, {special: "sep"}},
			special: map[string][]int32{"cls": {cls}, "sep": {sep}},
		})
		return p, nil
	case "Sequence":
		for i, s := range c.Processors {
			sub, err := parsePostProcessor(s, t)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			if sub != nil {
				p.templates = append(p.templates, sub.templates...)
			}
		}
		return p, nil
	}
	return nil, fmt.Errorf("post-processor type %q is not supported", c.Type)
}

// tokenRef reads a ["token", id] pair.
func tokenRef(r []json.RawMessage, field string) (int32, error) {
	if len(r) != 2 {
		return 0, fmt.Errorf("%s must be [token, id]", field)
	}
	var id int64
	if err := json.Unmarshal(r[1], &id); err != nil || id < 0 || id > math.MaxInt32 {
		return 0, fmt.Errorf("%s has a bad id", field)
	}
	return int32(id), nil
}

func parseTemplate(c *component) (*template, error) {
	tp := &template{special: map[string][]int32{}}
	for name, st := range c.SpecialTokens {
		ids := make([]int32, len(st.IDs))
		for i, id := range st.IDs {
			if id < 0 || id > math.MaxInt32 {
				return nil, fmt.Errorf("TemplateProcessing: special token %q has a bad id %d", name, id)
			}
			ids[i] = int32(id)
		}
		tp.special[name] = ids
	}
	if isNull(c.Single) {
		return nil, fmt.Errorf("TemplateProcessing: no single template")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(c.Single, &items); err != nil {
		// The string form, such as "<bos> $A".
		var s string
		if err2 := json.Unmarshal(c.Single, &s); err2 != nil {
			return nil, fmt.Errorf("TemplateProcessing: single is neither a list nor a string")
		}
		for _, f := range strings.Fields(s) {
			name, _, _ := strings.Cut(f, ":")
			if strings.HasPrefix(name, "$") {
				tp.single = append(tp.single, templatePiece{})
			} else {
				tp.single = append(tp.single, templatePiece{special: name})
			}
		}
	} else {
		for i, it := range items {
			var piece struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			}
			if err := json.Unmarshal(it, &piece); err != nil {
				return nil, fmt.Errorf("TemplateProcessing: single[%d]: %w", i, err)
			}
			switch {
			case piece.SpecialToken != nil:
				tp.single = append(tp.single, templatePiece{special: piece.SpecialToken.ID})
			case piece.Sequence != nil:
				tp.single = append(tp.single, templatePiece{})
			default:
				return nil, fmt.Errorf("TemplateProcessing: single[%d] is neither SpecialToken nor Sequence", i)
			}
		}
	}
	for _, pc := range tp.single {
		if pc.special != "" {
			if _, ok := tp.special[pc.special]; !ok {
				return nil, fmt.Errorf("TemplateProcessing: special token %q is not in special_tokens", pc.special)
			}
		}
	}
	return tp, nil
}

// fastByteLevelVariant recognises the pre-tokenizers Encode can run on its fused byte-level path.
func fastByteLevelVariant(p preTokenizer, m *bpeModel) *gpt2Variant {
	if !m.canEncodeBytes() {
		return nil
	}
	switch x := p.(type) {
	case *byteLevelPre:
		if x.useRegex && !x.addPrefixSpace {
			return knownPatterns[patGPT2]
		}
	case seqPre:
		if len(x) != 2 {
			return nil
		}
		sp, ok1 := x[0].(*splitPre)
		bl, ok2 := x[1].(*byteLevelPre)
		if !ok1 || !ok2 || bl.useRegex || bl.addPrefixSpace || sp.behavior != behaviorIsolated || sp.invert {
			return nil
		}
		if g, ok := sp.m.(gpt2Matcher); ok {
			return g.v
		}
	}
	return nil
}
