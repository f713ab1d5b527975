package cuda

import (
	"os"
	"path/filepath"
	"testing"
)

// The cache key must change with everything that changes the cubin, and a
// stored entry must read back whole.
func TestCubinCache(t *testing.T) {
	base := cubinKey("src", "ops.cu", 90, 13000)
	for _, other := range []string{
		cubinKey("src2", "ops.cu", 90, 13000),
		cubinKey("src", "matmul.cu", 90, 13000),
		cubinKey("src", "ops.cu", 100, 13000),
		cubinKey("src", "ops.cu", 90, 13010),
	} {
		if other == base {
			t.Fatalf("key %s does not depend on every input", base)
		}
	}
	c := cubinCache{filepath.Join(t.TempDir(), "cubin")}
	if c.get(base) != nil {
		t.Fatal("empty cache returned an entry")
	}
	c.put(base, []byte("cubin bytes"))
	if got := c.get(base); string(got) != "cubin bytes" {
		t.Fatalf("get = %q", got)
	}
	c.drop(base)
	if c.get(base) != nil {
		t.Fatal("dropped entry still returned")
	}
	if entries, _ := os.ReadDir(c.dir); len(entries) != 0 {
		t.Fatalf("left files behind: %v", entries)
	}
	off := cubinCache{}
	off.put(base, []byte("x"))
	if off.get(base) != nil {
		t.Fatal("a disabled cache stored an entry")
	}
	t.Setenv(CacheEnv, "off")
	if defaultCubinCache().dir != "" {
		t.Fatalf("%s=off should disable the cache", CacheEnv)
	}
	t.Setenv(CacheEnv, "/some/dir")
	if defaultCubinCache().dir != "/some/dir" {
		t.Fatalf("%s should name the directory", CacheEnv)
	}
}
