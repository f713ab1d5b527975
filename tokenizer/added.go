package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int32
	content    string
	special    bool
	lstrip     bool
	rstrip     bool
	normalized bool
	singleWord bool
}

// addedMatcher finds added tokens in text the way HF's AddedVocabulary does: leftmost-longest
// matches (an Aho-Corasick automaton in HF, a byte trie here), single_word/lstrip/rstrip applied
// to each match.
type addedMatcher struct {
	tokens []*addedToken
	first  [256]bool
	next   map[uint64]int32 // node<<8 | byte -> child node
	term   []int32          // node -> index in tokens, or -1
}

func newAddedMatcher(toks []*addedToken, key func(*addedToken) string) *addedMatcher {
	m := &addedMatcher{next: map[uint64]int32{}, term: []int32{-1}}
	for _, t := range toks {
		k := key(t)
		if k == "" {
			continue
		}
		node := int32(0)
		for i := 0; i < len(k); i++ {
			e := uint64(node)<<8 | uint64(k[i])
			child, ok := m.next[e]
			if !ok {
				child = int32(len(m.term))
				m.term = append(m.term, -1)
				m.next[e] = child
			}
			node = child
		}
		if m.term[node] < 0 { // the first token with this content wins
			m.term[node] = int32(len(m.tokens))
			m.tokens = append(m.tokens, t)
		}
		m.first[k[0]] = true
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.tokens) == 0 }

// longestAt returns the longest token that starts at byte i of s, and its end.
func (m *addedMatcher) longestAt(s string, i int) (*addedToken, int) {
	node := int32(0)
	var best *addedToken
	bestEnd := -1
	for j := i; j < len(s); j++ {
		child, ok := m.next[uint64(node)<<8|uint64(s[j])]
		if !ok {
			break
		}
		node = child
		if t := m.term[node]; t >= 0 {
			best, bestEnd = m.tokens[t], j+1
		}
	}
	return best, bestEnd
}

// split calls emit for the pieces of s in order: text between added tokens (tok nil, never
// empty) and the added tokens (with the text they consume, which includes stripped spaces).
func (m *addedMatcher) split(s string, emit func(text string, tok *addedToken)) {
	if m.empty() {
		if s != "" {
			emit(s, nil)
		}
		return
	}
	prev := 0 // end of the last match
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		t, end := m.longestAt(s, i)
		if t == nil {
			i++
			continue
		}
		start := i
		if t.singleWord {
			if (start > 0 && endsWithWordChar(s[:start])) || (end < len(s) && startsWithWordChar(s[end:])) {
				i++
				continue
			}
		}
		if t.lstrip {
			for start > prev {
				r, w := utf8.DecodeLastRuneInString(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		if t.rstrip {
			for end < len(s) {
				r, w := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
		}
		if start > prev {
			emit(s[prev:start], nil)
		}
		emit(s[start:end], t)
		prev, i = end, end
	}
	if prev < len(s) {
		emit(s[prev:], nil)
	}
}

func isWordChar(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) || r == '_' }

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordChar(r)
}
