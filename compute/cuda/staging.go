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
	n := len(src)
	if s.base == nil || n > stagingBytes/4 {
		return false
	}
	s.mu.Lock()
	if s.off+n > stagingBytes {
		// Wrapping: every copy queued from the ring must have run before
		// its bytes are overwritten.
		if dev.wait() != nil {
			s.mu.Unlock()
			return false
		}
		s.off = 0
	}
	at := unsafe.Add(s.base, s.off)
	s.off += (n + 255) &^ 255
	s.mu.Unlock()
	copy(unsafe.Slice((*byte)(at), n), src)
	dev.post(func() error {
		return dev.d.check("cuMemcpyHtoDAsync", dev.d.cuMemcpyHtoDAsync(dst, at, uint64(n), dev.stream))
	})
	return true
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
