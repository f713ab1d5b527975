package tokenizer

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the committed synthetic tokenizer files in testdata/tokenizer/")

// The synthetic tokenizers of vocabulary 512 are committed, so that reference.mjs can encode the
// corpus with them in tokenizers.js, and so that a change to Synthetic's output shows up here.
var syntheticGolden = map[string]string{"gemma": "synthetic-gemma512", "qwen": "synthetic-qwen512"}

func TestSyntheticGolden(t *testing.T) {
	for fam, dir := range syntheticGolden {
		tj, cj, err := Synthetic(fam, 512)
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(testdataDir, dir)
		if *update {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(d, "tokenizer.json"), tj, 0o644)
			os.WriteFile(filepath.Join(d, "tokenizer_config.json"), cj, 0o644)
			continue
		}
		for name, got := range map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": cj} {
			want, err := os.ReadFile(filepath.Join(d, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Synthetic(%s, 512) %s differs from %s: run go test ./tokenizer -run TestSyntheticGolden -update, then node scripts/tokenizer/reference.mjs", fam, name, d)
			}
		}
	}
}

func TestSynthetic(t *testing.T) {
	for _, c := range []struct {
		family string
		sizes  []int
	}{
		{"gemma", []int{400, 512, 1000, 4096, 262144}},
		{"qwen", []int{300, 512, 1000, 4096}},
	} {
		for _, n := range c.sizes {
			tj, cj, err := Synthetic(c.family, n)
			if err != nil {
				t.Fatalf("Synthetic(%s, %d): %v", c.family, n, err)
			}
			tok, err := Parse(tj, cj)
			if err != nil {
				t.Fatalf("Synthetic(%s, %d) does not load: %v", c.family, n, err)
			}
			if tok.VocabSize() != n {
				t.Fatalf("Synthetic(%s, %d): VocabSize %d", c.family, n, tok.VocabSize())
			}
			for id := int32(0); id < int32(n); id++ {
				if _, ok := tok.Token(id); !ok {
					t.Fatalf("Synthetic(%s, %d): id %d has no token", c.family, n, id)
				}
			}
			// Merges happen: ids above the first merged token appear when encoding prose.
			firstMerged := int32(256)
			if c.family == "gemma" {
				firstMerged = gemmaFirstByte + 256
			}
			merged, bytesSeen := 0, 0
			roundTrip := 0
			for _, e := range corpus(t) {
				ids := tok.Encode(e.Text, false)
				for _, id := range ids {
					p, _ := tok.Token(id)
					if id >= firstMerged && utf8.RuneCountInString(p) > 1 && !tok.IsSpecial(id) {
						merged++
					}
					if _, ok := byteToken(p); ok {
						bytesSeen++
					}
				}
				got := tok.Decode(ids, false)
				if c.family == "gemma" {
					// Byte fallback covers every character; only a literal '▁' comes back as ' '.
					want := e.Text
					if !utf8.ValidString(want) {
						want = validString(want)
					}
					want = replaceAll(want, "\u2581", nil, " ")
					if got != want {
						t.Fatalf("Synthetic(gemma, %d): %s: decode(encode(%s)) = %s", n, e.Name, quoteShort(e.Text), quoteShort(got))
					}
				}
				if got == e.Text {
					roundTrip++
				}
			}
			if merged == 0 {
				t.Errorf("Synthetic(%s, %d): no merged tokens in the encoded corpus", c.family, n)
			}
			if c.family == "gemma" && bytesSeen == 0 {
				t.Errorf("Synthetic(gemma, %d): no byte-fallback tokens in the encoded corpus", n)
			}
			bos, okB := tok.BOS()
			eos, okE := tok.EOS()
			switch c.family {
			case "gemma":
				if !okB || bos != 2 || !okE || eos != 1 {
					t.Errorf("Synthetic(gemma): BOS %d %v, EOS %d %v; want 2 and 1", bos, okB, eos, okE)
				}
				for id, want := range map[int32]string{0: "<pad>", 3: "<unk>", 46: "<|tool>", 52: "<|\"|>", 98: "<|think|>", 100: "<|channel>", 105: "<|turn>", 106: "<turn|>", 107: "\n", 108: "<0x00>", 363: "<0xFF>"} {
					if p, _ := tok.Token(id); p != want {
						t.Errorf("Synthetic(gemma): id %d is %q, want %q", id, p, want)
					}
				}
				if ids := tok.Encode("hi", true); ids[0] != 2 {
					t.Errorf("Synthetic(gemma): encode with specials does not start with BOS: %v", ids)
				}
				if ids := tok.Encode("<|turn>user\nhi<turn|>", false); ids[0] != 105 || ids[1] == 105 || ids[len(ids)-1] != 106 {
					t.Errorf("Synthetic(gemma): special tokens in text not split out: %v", ids)
				}
			case "qwen":
				if okB || !okE {
					t.Errorf("Synthetic(qwen): BOS %v (want none), EOS %v", okB, okE)
				}
				if p, _ := tok.Token(eos); p != "<|im_end|>" {
					t.Errorf("Synthetic(qwen): EOS is %q", p)
				}
			}
			t.Logf("Synthetic(%s, %d): %d merged tokens, %d byte tokens in the corpus encoding, %d strings round-trip", c.family, n, merged, bytesSeen, roundTrip)
		}
	}
	if _, _, err := Synthetic("gemma", 100); err == nil {
		t.Error("Synthetic(gemma, 100) should fail")
	}
	if _, _, err := Synthetic("llama", 512); err == nil {
		t.Error("Synthetic(llama) should fail")
	}
}
