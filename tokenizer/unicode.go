package tokenizer

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Unicode normalization forms (UAX #15) on the tables of unicode_tables.go.

type normForm int

const (
	formNFC normForm = iota
	formNFD
	formNFKC
	formNFKD
)

type cccRange struct {
	lo, hi rune
	ccc    uint8
}

type qcRange struct {
	lo, hi rune
	v      byte // 'N' or 'M'
}

var normTables struct {
	once   sync.Once
	ccc    []cccRange
	canon  map[rune][]rune
	compat map[rune][]rune
	comp   map[uint64]rune
	nfcQC  []qcRange
	nfkcQC []qcRange
}

func loadNormTables() {
	t := &normTables
	parseLines(cccData, func(f []string) {
		c, _ := strconv.Atoi(f[2])
		t.ccc = append(t.ccc, cccRange{hexRune(f[0]), hexRune(f[1]), uint8(c)})
	})
	t.canon = map[rune][]rune{}
	parseLines(canonData, func(f []string) { t.canon[hexRune(f[0])] = hexRunes(f[1:]) })
	t.compat = map[rune][]rune{}
	parseLines(compatData, func(f []string) { t.compat[hexRune(f[0])] = hexRunes(f[1:]) })
	t.comp = map[uint64]rune{}
	parseLines(compData, func(f []string) { t.comp[pairKey(hexRune(f[0]), hexRune(f[1]))] = hexRune(f[2]) })
	parseLines(nfcQCData, func(f []string) { t.nfcQC = append(t.nfcQC, qcRange{hexRune(f[0]), hexRune(f[1]), f[2][0]}) })
	parseLines(nfkcQCData, func(f []string) { t.nfkcQC = append(t.nfkcQC, qcRange{hexRune(f[0]), hexRune(f[1]), f[2][0]}) })
	for _, rs := range [][]qcRange{t.nfcQC, t.nfkcQC} {
		sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	}
	sort.Slice(t.ccc, func(i, j int) bool { return t.ccc[i].lo < t.ccc[j].lo })
}

func parseLines(data string, f func([]string)) {
	for _, line := range strings.Split(data, "\n") {
		if fs := strings.Fields(line); len(fs) > 0 {
			f(fs)
		}
	}
}

func hexRune(s string) rune {
	v, _ := strconv.ParseUint(s, 16, 32)
	return rune(v)
}

func hexRunes(fs []string) []rune {
	r := make([]rune, len(fs))
	for i, f := range fs {
		r[i] = hexRune(f)
	}
	return r
}

func pairKey(a, b rune) uint64 { return uint64(a)<<32 | uint64(uint32(b)) }

func combiningClass(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	t := normTables.ccc
	i := sort.Search(len(t), func(i int) bool { return t[i].hi >= r })
	if i < len(t) && t[i].lo <= r {
		return t[i].ccc
	}
	return 0
}

func quickCheck(t []qcRange, r rune) byte {
	i := sort.Search(len(t), func(i int) bool { return t[i].hi >= r })
	if i < len(t) && t[i].lo <= r {
		return t[i].v
	}
	return 'Y'
}

// Hangul syllable constants (Unicode §3.12).
const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

// normalize returns s in the given normalization form. s must be valid UTF-8.
func normalize(s string, form normForm) string {
	normTables.once.Do(loadNormTables)
	compose := form == formNFC || form == formNFKC
	compat := form == formNFKC || form == formNFKD
	if isNormalized(s, form) {
		return s
	}
	// Decompose.
	buf := make([]rune, 0, len(s)+8)
	for _, r := range s {
		buf = decompose(buf, r, compat)
	}
	// Canonical ordering: stable sort of each run of non-starters by combining class.
	for i := 0; i < len(buf); {
		if combiningClass(buf[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(buf) && combiningClass(buf[j]) != 0 {
			j++
		}
		run := buf[i:j]
		sort.SliceStable(run, func(a, b int) bool { return combiningClass(run[a]) < combiningClass(run[b]) })
		i = j
	}
	if compose {
		buf = composeRunes(buf)
	}
	out := make([]byte, 0, len(s)+8)
	for _, r := range buf {
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

// isNormalized is the quick check: true means s is certainly in the form already.
func isNormalized(s string, form normForm) bool {
	var qc []qcRange
	switch form {
	case formNFC:
		qc = normTables.nfcQC
	case formNFKC:
		qc = normTables.nfkcQC
	}
	// Below fast, every code point is its own normal form with combining class 0.
	fast := rune(0x300)
	switch form {
	case formNFD:
		fast = 0xC0
	case formNFKC, formNFKD:
		fast = 0xA0
	}
	last := uint8(0)
	for _, r := range s {
		if r < fast {
			last = 0
			continue
		}
		c := combiningClass(r)
		if c != 0 && last > c {
			return false
		}
		last = c
		switch form {
		case formNFC, formNFKC:
			if quickCheck(qc, r) != 'Y' {
				return false
			}
		case formNFD:
			if _, ok := normTables.canon[r]; ok || (r >= hangulSBase && r < hangulSBase+hangulSCount) {
				return false
			}
		case formNFKD:
			_, ok1 := normTables.canon[r]
			_, ok2 := normTables.compat[r]
			if ok1 || ok2 || (r >= hangulSBase && r < hangulSBase+hangulSCount) {
				return false
			}
		}
	}
	return true
}

func decompose(dst []rune, r rune, compat bool) []rune {
	if r >= hangulSBase && r < hangulSBase+hangulSCount {
		si := r - hangulSBase
		dst = append(dst, hangulLBase+si/hangulNCount, hangulVBase+(si%hangulNCount)/hangulTCount)
		if t := si % hangulTCount; t != 0 {
			dst = append(dst, hangulTBase+t)
		}
		return dst
	}
	if compat {
		if d, ok := normTables.compat[r]; ok {
			// A compatibility decomposition may contain Hangul syllables (e.g. U+3200 ㈀).
			for _, c := range d {
				if c >= hangulSBase && c < hangulSBase+hangulSCount {
					dst = decompose(dst, c, true)
				} else {
					dst = append(dst, c)
				}
			}
			return dst
		}
	}
	if d, ok := normTables.canon[r]; ok {
		return append(dst, d...)
	}
	return append(dst, r)
}

// composeRunes applies canonical composition to a decomposed, canonically ordered sequence.
func composeRunes(buf []rune) []rune {
	out := buf[:0]
	starter := -1 // index in out of the last starter
	lastCC := -1  // combining class of the last rune appended after the starter; -1: none
	for _, r := range buf {
		cc := int(combiningClass(r))
		if starter >= 0 && (lastCC == -1 || lastCC < cc) {
			if c, ok := composePair(out[starter], r); ok {
				out[starter] = c
				continue
			}
		}
		if cc == 0 {
			starter = len(out)
			lastCC = -1
		} else {
			lastCC = cc
		}
		out = append(out, r)
	}
	return out
}

func composePair(a, b rune) (rune, bool) {
	// Hangul L+V and LV+T.
	if a >= hangulLBase && a < hangulLBase+hangulLCount && b >= hangulVBase && b < hangulVBase+hangulVCount {
		return hangulSBase + ((a-hangulLBase)*hangulVCount+(b-hangulVBase))*hangulTCount, true
	}
	if a >= hangulSBase && a < hangulSBase+hangulSCount && (a-hangulSBase)%hangulTCount == 0 && b > hangulTBase && b < hangulTBase+hangulTCount {
		return a + (b - hangulTBase), true
	}
	c, ok := normTables.comp[pairKey(a, b)]
	return c, ok
}
