package cuda

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"tandem/compute"
)

var _ compute.LateUploader = (*Backend)(nil)

// LateI32 implements compute.LateUploader. The copy is queued from the
// staging ring like any small upload, and values fills its bytes: when the
// copy is captured, after the recording's graph is updated and just before
// it launches (the copy node reads the bytes then; see endCapture), and
// otherwise before the copy is queued. Either way values runs on the
// device thread, which waits for it.
func (b *Backend) LateI32(n int, values func() []int32) (*compute.Tensor, func() error) {
	t := b.alloc(compute.I32, n)
	var at unsafe.Pointer
	if n > 0 {
		at = b.stage.reserve(b.dev, 4*n)
	}
	fill := sync.OnceValue(func() error { // on the device thread
		v := values()
		switch {
		case len(v) != n:
			return fmt.Errorf("cuda: LateI32: %d values for %d", len(v), n)
		case n == 0:
			return nil
		case at == nil:
			return b.dev.d.check("cuMemcpyHtoD", b.dev.d.cuMemcpyHtoD(memOf(t).ptr, unsafe.Pointer(unsafe.SliceData(v)), uint64(4*n)))
		}
		copy(unsafe.Slice((*int32)(at), n), v)
		return nil
	})
	got := func() error { return b.dev.do(fill) } // after every call before it
	if at == nil {
		// No room in the ring (or nothing to copy): the values now, ending
		// a recording in progress, before anything reads them.
		b.dev.do(fill)
		return t, got
	}
	dst := memOf(t).ptr
	b.dev.post(func() error {
		if rec := b.dev.graphs.rec; rec != nil {
			rec.gates = append(rec.gates, fill)
		} else if err := fill(); err != nil {
			return err
		}
		return b.dev.copyIn(dst, at, 4*n)
	})
	return t, got
}

// lateRead is the pinned host memory ReadLate's copies land in, one copy
// at a time (another waits for the device instead).
type lateRead struct {
	mu      sync.Mutex
	busy    bool
	base    unsafe.Pointer
	size    int
	pending func() ([][]uint32, error) // the wait of the copy in the buffer
}

// ReadLate implements compute.LateUploader: the copy lands in pinned
// memory, behind the work issued so far, and the wait (on the device
// thread, inside a late upload's values) is an event's.
func (b *Backend) ReadLate(ts ...*compute.Tensor) func() ([][]uint32, error) {
	n := 0
	ts = slices.Clone(ts)
	for i, t := range ts {
		if t.DType().Size() != 4 {
			ts[i] = b.asF32(t)
		}
		n += 4 * ts[i].Len()
	}
	now := func() func() ([][]uint32, error) { // copies waited for here instead
		host := make([][]uint32, len(ts))
		for i, t := range ts {
			host[i] = make([]uint32, t.Len())
			b.download(unsafe.Pointer(unsafe.SliceData(host[i])), 4*t.Len(), t)
		}
		return func() ([][]uint32, error) { return host, nil }
	}
	r := &b.late
	r.mu.Lock()
	if pending := r.pending; r.busy && pending != nil {
		// A wait nobody called (its step failed before its late upload ran
		// its values): take it on the device thread, which frees the buffer.
		r.mu.Unlock()
		b.dev.do(func() error { _, err := pending(); return err })
		r.mu.Lock()
	}
	free := !r.busy && n > 0
	r.busy = r.busy || free
	r.mu.Unlock()
	if !free {
		return now()
	}
	release := func() { r.mu.Lock(); r.busy, r.pending = false, nil; r.mu.Unlock() }
	if r.size < n {
		err := b.dev.do(func() error {
			if r.base != nil {
				b.dev.d.cuMemFreeHost(r.base)
				r.base, r.size = nil, 0
			}
			var p unsafe.Pointer
			if err := b.dev.d.check("cuMemAllocHost", b.dev.d.cuMemAllocHost(&p, uint64(n))); err != nil {
				return err
			}
			r.base, r.size = p, n
			return nil
		})
		if err != nil {
			release()
			return now()
		}
	}
	var ev uintptr
	var queued error
	// Sent, not posted: the copy and its event go on the live stream, so a
	// recording in progress ends first.
	b.dev.send(func() {
		b.dev.endCapture()
		if queued = b.dev.d.check("cuEventCreate", b.dev.d.cuEventCreate(&ev, eventDisableTiming)); queued != nil {
			return
		}
		at := r.base
		for _, t := range ts {
			m := 4 * t.Len()
			if queued = b.dev.d.check("cuMemcpyDtoHAsync", b.dev.d.cuMemcpyDtoHAsync(at, memOf(t).ptr, uint64(m), b.dev.stream)); queued != nil {
				return
			}
			at = unsafe.Add(at, m)
		}
		queued = b.dev.d.check("cuEventRecord", b.dev.d.cuEventRecord(ev, b.dev.stream))
	})
	// Runs on the device thread, after the call sent above (queued and ev
	// are its).
	wait := sync.OnceValues(func() ([][]uint32, error) {
		defer release()
		if ev != 0 {
			defer b.dev.d.cuEventDestroy(ev)
		}
		if queued != nil {
			b.dev.d.cuCtxSynchronize() // a copy queued before the failure must not land in a buffer handed out again
			return nil, queued
		}
		if err := b.dev.d.check("cuEventSynchronize", b.dev.block(func() result { return b.dev.d.cuEventSynchronize(ev) })); err != nil {
			return nil, err
		}
		words := make([]uint32, n/4)
		copy(words, unsafe.Slice((*uint32)(r.base), n/4))
		out := make([][]uint32, len(ts))
		for i, t := range ts {
			out[i], words = words[:t.Len():t.Len()], words[t.Len():]
		}
		return out, nil
	})
	r.mu.Lock()
	r.pending = wait
	r.mu.Unlock()
	return wait
}
