package tokenizer

import (
	"bufio"
	"compress/bzip2"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalizeCases(t *testing.T) {
	for _, c := range []struct {
		in         string
		form       normForm
		want       string
		normalized bool
	}{
		{"e\u0301", formNFC, "\u00e9", false},
		{"\u00e9", formNFD, "e\u0301", false},
		{"\u212b", formNFC, "\u00c5", false},
		{"\u2126", formNFC, "\u03a9", false},
		{"a\u0301\u0323", formNFC, "\u1ea1\u0301", false},
		{"a\u0323\u0301", formNFC, "\u1ea1\u0301", false},
		{"\u1100\u1161\u11a8", formNFC, "\uac01", false},
		{"\uac01", formNFD, "\u1100\u1161\u11a8", false},
		{"\ufb01", formNFC, "\ufb01", true},
		{"\ufb01", formNFKC, "fi", false},
		{"\u3200", formNFKD, "(\u1100)", false},
		{"\u0958", formNFC, "\u0915\u093c", false},
		{"\u0344", formNFC, "\u0308\u0301", false},
		{"hello, world", formNFC, "hello, world", true},
		{"", formNFC, "", true},
		{"\u0301x", formNFC, "\u0301x", false}, // Maybe in the quick check: normalized the slow way
	} {
		normTables.once.Do(loadNormTables)
		if got := normalize(c.in, c.form); got != c.want {
			t.Errorf("normalize(%q, %d) = %q, want %q", c.in, c.form, got, c.want)
		}
		if got := isNormalized(c.in, c.form); got != c.normalized {
			t.Errorf("isNormalized(%q, %d) = %v, want %v", c.in, c.form, got, c.normalized)
		}
	}
}

// TestNormalizationConformance runs the Unicode Consortium's NormalizationTest.txt (Debian's
// unicode-data package, the version of the tables) when it is installed.
func TestNormalizationConformance(t *testing.T) {
	path := os.Getenv("TANDEM_NORMALIZATION_TEST")
	if path == "" {
		path = "/usr/share/unicode/NormalizationTest.txt.bz2"
	}
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("NormalizationTest.txt not available (%v); apt-get install unicode-data or set TANDEM_NORMALIZATION_TEST", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".bz2") {
		r = bzip2.NewReader(f)
	}
	normTables.once.Do(loadNormTables)
	parse := func(field string) string {
		var b strings.Builder
		for _, h := range strings.Fields(field) {
			v, err := strconv.ParseUint(h, 16, 32)
			if err != nil {
				t.Fatalf("bad code point %q", h)
			}
			b.WriteRune(rune(v))
		}
		return b.String()
	}
	sc := bufio.NewScanner(r)
	part1 := map[rune]bool{}
	part, lines, bad := "", 0, 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "@Part") {
			part = strings.Fields(line)[0]
			continue
		}
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		fs := strings.Split(line, ";")
		if len(fs) < 5 {
			continue
		}
		var c [5]string
		for i := range c {
			c[i] = parse(fs[i])
		}
		if part == "@Part1" {
			r, _ := utf8.DecodeRuneInString(c[0])
			part1[r] = true
		}
		lines++
		check := func(form normForm, in, want string) {
			if got := normalize(in, form); got != want {
				bad++
				if bad <= 10 {
					t.Errorf("%s: normalize(%+q, form %d) = %+q, want %+q", part, in, form, got, want)
				}
			}
		}
		for i := 0; i < 3; i++ {
			check(formNFC, c[i], c[1])
			check(formNFD, c[i], c[2])
		}
		for i := 3; i < 5; i++ {
			check(formNFC, c[i], c[3])
			check(formNFD, c[i], c[4])
		}
		for i := 0; i < 5; i++ {
			check(formNFKC, c[i], c[3])
			check(formNFKD, c[i], c[4])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// Code points not in part 1 are their own normal forms.
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if part1[r] || (r >= 0xD800 && r <= 0xDFFF) {
			continue
		}
		s := string(r)
		for _, form := range []normForm{formNFC, formNFD, formNFKC, formNFKD} {
			if got := normalize(s, form); got != s {
				bad++
				if bad <= 10 {
					t.Errorf("normalize(%+q, form %d) = %+q; it is not in part 1, so it should be unchanged", s, form, got)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d failures", bad)
	}
	t.Logf("%d lines of %s", lines, path)
}
