package cuda

import "time"

const copyBytes = 2 << 30 // far larger than the 60 MB L2

// CopyBandwidth measures, once per backend, a device-to-device copy's
// memory traffic in bytes per second (bytes read plus bytes written, best
// of five): the roofline decode benchmarks report against, since a decode
// step streams every weight once.
func (b *Backend) CopyBandwidth() (float64, error) {
	b.bwOnce.Do(func() { b.bw, b.bwErr = b.measureCopy() })
	return b.bw, b.bwErr
}

func (b *Backend) measureCopy() (float64, error) {
	src, err := b.dev.Alloc(copyBytes)
	if err != nil {
		return 0, err
	}
	defer b.dev.Free(src)
	dst, err := b.dev.Alloc(copyBytes)
	if err != nil {
		return 0, err
	}
	defer b.dev.Free(dst)
	cp := func() error {
		return b.dev.do(func() error { return b.dev.d.check("cuMemcpyDtoD", b.dev.d.cuMemcpyDtoD(dst.ptr, src.ptr, copyBytes)) })
	}
	if err := cp(); err != nil {
		return 0, err
	}
	best := time.Duration(1 << 62)
	for range 5 {
		if err := b.dev.Sync(); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := cp(); err != nil {
			return 0, err
		}
		if err := b.dev.Sync(); err != nil {
			return 0, err
		}
		best = min(best, time.Since(start))
	}
	return 2 * copyBytes / best.Seconds(), nil
}
