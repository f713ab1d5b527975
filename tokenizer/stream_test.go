package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamDecode feeds ids one at a time and checks every chunk is valid UTF-8.
func streamDecode(t *testing.T, tok *Tokenizer, ids []int32, skip bool, what string) string {
	t.Helper()
	d := tok.NewDecoder(skip)
	var b strings.Builder
	for i, id := range ids {
		chunk := d.Add(id)
		if !utf8.ValidString(chunk) {
			t.Fatalf("%s: chunk after id %d (index %d) is not valid UTF-8: %q", what, id, i, chunk)
		}
		b.WriteString(chunk)
	}
	chunk := d.Flush()
	if !utf8.ValidString(chunk) {
		t.Fatalf("%s: Flush chunk is not valid UTF-8: %q", what, chunk)
	}
	b.WriteString(chunk)
	return b.String()
}

func TestStreamingDecoderCorpus(t *testing.T) {
	for _, name := range refTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := refTokenizer(t, name)
			for _, e := range corpus(t) {
				ids := tok.Encode(e.Text, true)
				for _, skip := range []bool{false, true} {
					want := tok.Decode(ids, skip)
					if got := streamDecode(t, tok, ids, skip, name+" "+e.Name); got != want {
						t.Errorf("%s %s skip=%v: streamed %s, Decode %s", name, e.Name, skip, quoteShort(got), quoteShort(want))
					}
				}
			}
		})
	}
}

// TestStreamingDecoderRandomIDs streams random id sequences, which contain the cases encoding
// never produces: byte-fallback runs that are not valid UTF-8, byte-level tokens that split or
// break UTF-8 sequences, special tokens between the bytes of a character.
func TestStreamingDecoderRandomIDs(t *testing.T) {
	for _, name := range refTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := refTokenizer(t, name)
			rng := rand.New(rand.NewPCG(1, 2))
			// Pools that make awkward sequences likely: byte tokens, single bytes of the byte-level
			// alphabet, specials, and some ordinary ids.
			var pool []int32
			for b := 0; b < 256; b++ {
				if id, ok := tok.ID(byteTokenName(byte(b))); ok {
					pool = append(pool, id)
				}
				if id, ok := tok.ID(byteToString[b]); ok {
					pool = append(pool, id)
				}
			}
			pool = append(pool, tok.SpecialTokens()...)
			for i := 0; i < 300; i++ {
				pool = append(pool, int32(rng.IntN(tok.VocabSize())))
			}
			for it := 0; it < 400; it++ {
				ids := make([]int32, rng.IntN(40))
				for i := range ids {
					ids[i] = pool[rng.IntN(len(pool))]
				}
				skip := it%2 == 1
				want := tok.Decode(ids, skip)
				if got := streamDecode(t, tok, ids, skip, name); got != want {
					t.Fatalf("%s ids %v skip=%v: streamed %q, Decode %q", name, ids, skip, got, want)
				}
			}
		})
	}
}
