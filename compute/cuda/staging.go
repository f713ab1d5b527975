package cuda

import (
	"sync"
	"unsafe"
)

// stagingBytes is the pinned host ring small uploads go through.
const stagingBytes = 32 << 20

// staging turns small uploads (positions, token ids, slot maps) into
// asynchronous copies: the bytes are written into pinned host memory and
// the copy is queued behind the kernels already issued. A plain cuMemcpyHtoD
// from pageable memory waits for every queued kernel first, which stalls
// the host once per op and leaves the GPU idle in between.
type staging struct {
	mu   sync.Mutex
	base unsafe.Pointer // pinned host memory; nil when it could not be allocated
	off  int
}

func newStaging(dev *Device) *staging {
	s := &staging{}
	dev.do(func() error {
		var p unsafe.Pointer
		if dev.d.cuMemAllocHost(&p, stagingBytes) == 0 {
			s.base = p
		}
		return nil
	})
	return s
}

// upload queues a copy of src to device address dst. It reports false when
// src does not fit the ring (the caller copies synchronously instead).
func (s *staging) upload(dev *Device, dst uintptr, src []byte) bool {
	at := s.reserve(dev, len(src))
	if at == nil {
		return false
	}
	copy(unsafe.Slice((*byte)(at), len(src)), src)
	dev.post(func() error { return dev.copyIn(dst, at, len(src)) })
	return true
}

// reserve hands out n bytes of the ring, or nil when n does not fit it.
func (s *staging) reserve(dev *Device, n int) unsafe.Pointer {
	if s.base == nil || n > stagingBytes/4 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off+n > stagingBytes {
		// Wrapping: every copy queued from the ring must have run before
		// its bytes are overwritten.
		if dev.wait() != nil {
			return nil
		}
		s.off = 0
	}
	at := unsafe.Add(s.base, s.off)
	s.off += (n + 255) &^ 255
	return at
}

// copyIn queues the copy of n pinned bytes at src to device address dst.
// Device thread only.
func (dev *Device) copyIn(dst uintptr, src unsafe.Pointer, n int) error {
	return dev.d.check("cuMemcpyHtoDAsync", dev.d.cuMemcpyHtoDAsync(dst, src, uint64(n), dev.stream))
}

// makeRoom waits for the device and rewinds the ring when fewer than n
// bytes are left, so the next n bytes of uploads will not wrap.
func (s *staging) makeRoom(dev *Device, n int) {
	if s.base == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off+n <= stagingBytes {
		return
	}
	if dev.wait() == nil {
		s.off = 0
	}
}
