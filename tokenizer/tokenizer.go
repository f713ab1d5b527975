// Package tokenizer implements Hugging Face tokenizer.json tokenizers exactly as HF's
// `tokenizers` library encodes and decodes them, for the BPE families Tandem serves: the Gemma
// family (SentencePiece-style BPE with byte fallback and '▁' for spaces) and the Qwen family
// (GPT-2 byte-level BPE behind a look-ahead regex pre-tokenizer).
//
// Supported components: model BPE (vocab, merges as "a b" strings or pairs, byte_fallback,
// unk_token, fuse_unk, ignore_merges, continuing_subword_prefix, end_of_word_suffix);
// normalizers Replace, NFC, NFD, NFKC, NFKD, Prepend, Strip, Sequence; pre-tokenizers Split
// (string or regex pattern, all five behaviors, invert), ByteLevel, Metaspace, Sequence;
// decoders Replace, ByteFallback, Fuse, Strip, ByteLevel, Metaspace, Sequence; post-processors
// TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence; added tokens with
// special, lstrip, rstrip, normalized and single_word. Anything else is a load error naming it.
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Tokenizer encodes text to token ids and decodes ids to text.
type Tokenizer struct {
	model      *bpeModel
	normalizer normalizer
	pre        preTokenizer
	post       *postProcessor
	decoder    decoderStep

	pieces  []string // id -> piece (model vocabulary, then added tokens)
	known   []bool   // id -> the id has a piece
	special []bool   // id -> special added token

	added          []*addedToken
	addedByContent map[string]int32
	addedRaw       *addedMatcher // normalized=false tokens, matched before normalization
	addedNorm      *addedMatcher // normalized=true tokens, matched in normalized text

	// fastByteLevel is set when the pre-tokenizer is a GPT-2-family split followed by a plain
	// ByteLevel mapping (Qwen, GPT-2, Llama 3): Encode then splits with the hand-written matcher
	// and feeds raw bytes to the model, skipping the intermediate strings. Same result as the
	// general path (TestFastByteLevelPath).
	fastByteLevel *gpt2Variant

	bos, eos int32 // -1: none
	addBOS   bool  // tokenizer_config.json's add_bos_token (informational: the post-processor decides)
	cleanup  bool  // clean_up_tokenization_spaces
}

// Load reads a tokenizer.json file, and tokenizer_config.json from the same folder if present.
func Load(path string) (*Tokenizer, error) {
	tj, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	cj, err := os.ReadFile(cfgPath)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parseTokenizer(tj, cj)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// LoadDir loads the tokenizer of a model directory (its tokenizer.json and, if present,
// tokenizer_config.json).
func LoadDir(dir string) (*Tokenizer, error) {
	return Load(filepath.Join(dir, "tokenizer.json"))
}

// Parse builds a tokenizer from the contents of tokenizer.json and tokenizer_config.json (which
// may be nil or empty).
func Parse(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	t, err := parseTokenizer(tokenizerJSON, tokenizerConfigJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// Encode returns the token ids of text. With addSpecial, the post-processor adds its special
// tokens (Gemma's BOS), as HF's encode(add_special_tokens=True) does; without a post-processor
// nothing is added, whatever tokenizer_config.json's add_bos_token says (as in HF tokenizers, and
// in transformers 5.17's GemmaTokenizer and PreTrainedTokenizerFast). Special tokens written in
// the text are always recognised (HF's split_special_tokens=False).
// Invalid UTF-8 in text is first replaced with U+FFFD, one per maximal ill-formed subpart.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	text = validString(text)
	ids := make([]int32, 0, len(text)/3+4)
	var pieces []string
	offset := 0
	t.addedRaw.split(text, func(seg string, tok *addedToken) {
		start := offset
		offset += len(seg)
		if tok != nil {
			ids = append(ids, tok.id)
			return
		}
		if t.normalizer != nil {
			seg = t.normalizer.normalize(seg)
		}
		first := start == 0
		t.addedNorm.split(seg, func(s string, tok *addedToken) {
			if tok != nil {
				ids = append(ids, tok.id)
				first = false
				return
			}
			if v := t.fastByteLevel; v != nil {
				for i := 0; i < len(s); {
					e := v.matchAt(s, i)
					ids = t.model.encodeBytes(s[i:e], ids)
					i = e
				}
				first = false
				return
			}
			pieces = append(pieces[:0], s)
			if t.pre != nil {
				pieces = t.pre.pretokenize(pieces, first)
			}
			first = false
			for _, p := range pieces {
				ids = t.model.encode(p, ids)
			}
		})
	})
	if addSpecial && t.post != nil {
		return t.post.apply(ids)
	}
	return ids
}

// decodeToken is the piece Decode uses for id: false for unknown ids (HF skips them) and, with
// skipSpecial, for special tokens.
func (t *Tokenizer) decodeToken(id int32, skipSpecial bool) (string, bool) {
	if id < 0 || int(id) >= len(t.pieces) || !t.known[id] {
		return "", false
	}
	if skipSpecial && t.special[id] {
		return "", false
	}
	return t.pieces[id], true
}

// Decode returns the text of ids, as HF's decode: pieces through the decoder pipeline (joined
// with spaces when there is none), ids outside the vocabulary skipped, special tokens dropped
// with skipSpecial, then transformers' clean-up when tokenizer_config.json sets
// clean_up_tokenization_spaces.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if p, ok := t.decodeToken(id, skipSpecial); ok {
			toks = append(toks, p)
		}
	}
	var s string
	if t.decoder == nil {
		s = strings.Join(toks, " ")
	} else {
		s = strings.Join(t.decoder.decodeChain(toks), "")
	}
	if t.cleanup {
		s = cleanUpTokenization(s)
	}
	return s
}

// Token returns the piece of id (an added token's content or a vocabulary entry).
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.pieces) || !t.known[id] {
		return "", false
	}
	return t.pieces[id], true
}

// ID returns the id of a piece: an added token's content or a vocabulary entry.
func (t *Tokenizer) ID(piece string) (int32, bool) {
	if id, ok := t.addedByContent[piece]; ok {
		return id, true
	}
	id, ok := t.model.vocab[piece]
	return id, ok
}

// VocabSize is one more than the largest token id (model vocabulary and added tokens), the
// number of rows an embedding table needs.
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// BOS returns the beginning-of-sequence token: tokenizer_config.json's bos_token, else the
// special token the post-processor puts before the text.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// EOS returns tokenizer_config.json's eos_token.
func (t *Tokenizer) EOS() (int32, bool) { return t.eos, t.eos >= 0 }

// AddBOSToken reports tokenizer_config.json's add_bos_token (false when absent). Encode does not
// consult it (the post-processor decides, as in HF); it tells a caller that renders a chat
// template whether the model expects BOS first.
func (t *Tokenizer) AddBOSToken() bool { return t.addBOS }

// SpecialTokens returns the ids of the added tokens marked special, in id order.
func (t *Tokenizer) SpecialTokens() []int32 {
	var ids []int32
	for id, s := range t.special {
		if s {
			ids = append(ids, int32(id))
		}
	}
	return ids
}
