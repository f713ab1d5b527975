package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// CacheEnv names the directory compiled kernels are cached in; "off"
// disables the cache. The default is the user cache directory's
// tandem/cubin.
const CacheEnv = "TANDEM_CUDA_CACHE"

// cubinCache keeps NVRTC's output on disk, keyed by everything that
// changes it (source, name, GPU architecture, driver version), so start-up
// skips the compile (about a second) after the first run.
type cubinCache struct{ dir string }

func defaultCubinCache() cubinCache {
	switch dir := os.Getenv(CacheEnv); dir {
	case "off":
		return cubinCache{}
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return cubinCache{}
		}
		return cubinCache{filepath.Join(base, "tandem", "cubin")}
	default:
		return cubinCache{dir}
	}
}

func cubinKey(src, name string, arch, driver int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00sm_%d\x00driver %d\x00", name, arch, driver)
	h.Write([]byte(src))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (c cubinCache) path(key string) string { return filepath.Join(c.dir, key+".cubin") }

// get returns the cached cubin, or nil.
func (c cubinCache) get(key string) []byte {
	if c.dir == "" {
		return nil
	}
	b, err := os.ReadFile(c.path(key))
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// put stores a cubin; failures only cost the next start-up a compile.
func (c cubinCache) put(key string, cubin []byte) {
	if c.dir == "" || os.MkdirAll(c.dir, 0o755) != nil {
		return
	}
	tmp, err := os.CreateTemp(c.dir, key+".*.tmp")
	if err != nil {
		return
	}
	_, werr := tmp.Write(cubin)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), c.path(key)) != nil {
		os.Remove(tmp.Name())
	}
}

// drop removes an entry the driver refused (a truncated or stale file).
func (c cubinCache) drop(key string) {
	if c.dir != "" {
		os.Remove(c.path(key))
	}
}
