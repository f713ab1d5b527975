// Package cuda is the beginning of Tandem's CUDA backend, in pure Go: the
// CUDA driver API and NVRTC are opened at run time with purego (no cgo), and
// all CUDA work runs on one goroutine locked to its OS thread, since CUDA
// contexts are per thread.
//
// Libraries are found by soname on the loader path, or in
// $TANDEM_CUDA_LIB_DIR first when it is set. A missing library is an error
// that names what was tried, so callers (and tests) can skip cleanly on
// machines without a GPU.
package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ebitengine/purego"
)

// LibDirEnv names a directory searched before the loader path.
const LibDirEnv = "TANDEM_CUDA_LIB_DIR"

// ErrNoDriver reports that the CUDA driver library is not present.
var ErrNoDriver = errors.New("cuda: no CUDA driver (libcuda.so.1) found")

// openLib dlopens the first of sonames that loads.
func openLib(what string, sonames ...string) (uintptr, error) {
	var tried []string
	dir := os.Getenv(LibDirEnv)
	for _, so := range sonames {
		paths := []string{so}
		if dir != "" {
			paths = append([]string{filepath.Join(dir, so)}, paths...)
		}
		for _, p := range paths {
			h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				return h, nil
			}
			tried = append(tried, p)
		}
	}
	return 0, fmt.Errorf("cuda: %s not found (tried %s; set %s to its directory)", what, strings.Join(tried, ", "), LibDirEnv)
}
