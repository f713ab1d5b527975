//go:build !unix

package safetensors

import (
	"io"
	"os"
)

// mapFile reads the file into memory where mmap is unavailable. Tandem runs
// on Unix; this fallback only keeps the package building elsewhere.
func mapFile(f *os.File, size int) ([]byte, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, int64(size)), b); err != nil {
		return nil, err
	}
	return b, nil
}

func unmapFile([]byte) error { return nil }
