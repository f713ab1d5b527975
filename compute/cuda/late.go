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

// lateRead is the pinned host memory ReadLate's copies land in: a few
// buffers, one copy each, so that a pipeline can queue its next read
// before the last one's wait has run (with none free, a copy is waited for
// at once instead).
type lateRead struct {
	mu    sync.Mutex
	slots [lateSlots]lateSlot
}

const lateSlots = 4

type lateSlot struct {
	busy    bool
	base    unsafe.Pointer
	size    int
	pending func() ([][]uint32, error) // the wait of the copy in the buffer
	seq     uint64                     // when it was taken: the oldest is reclaimed first
}

// ReadLate implements compute.LateUploader: the copies land in pinned
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
	if n == 0 {
		return now()
	}
	r := b.lateSlot()
	if r == nil {
		return now()
	}
	release := func() { b.late.mu.Lock(); r.busy, r.pending = false, nil; b.late.mu.Unlock() }
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
		if err := b.dev.takeAsyncErr(); err != nil { // as Download: a queued call failed
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
	b.late.mu.Lock()
	r.pending = wait
	b.late.mu.Unlock()
	return wait
}

// lateSlot takes a free buffer, or nil. With none free it first takes back
// the oldest wait nobody called yet (a step that failed before its late
// upload ran its values leaves one; so does a pipeline deeper than the
// buffers), waiting for it on the device thread, which frees its buffer.
func (b *Backend) lateSlot() *lateSlot {
	l := &b.late
	l.mu.Lock()
	defer l.mu.Unlock()
	var oldest *lateSlot
	var last uint64
	for i := range l.slots {
		s := &l.slots[i]
		last = max(last, s.seq)
		switch {
		case !s.busy && (oldest == nil || oldest.busy):
			oldest = s
		case s.busy && s.pending != nil && oldest == nil:
			oldest = s
		case s.busy && s.pending != nil && oldest.busy && s.seq < oldest.seq:
			oldest = s
		}
	}
	if oldest == nil {
		return nil // every buffer taken by a ReadLate still being set up
	}
	if oldest.busy {
		pending := oldest.pending
		l.mu.Unlock()
		b.dev.do(func() error {
			// Its owner never read it: a failure it holds (a queued
			// call's, or its own copy's) goes to the next read instead.
			if _, err := pending(); err != nil && b.dev.asyncErr == nil {
				b.dev.asyncErr = err
			}
			return nil
		})
		l.mu.Lock()
		if oldest.busy {
			return nil
		}
	}
	oldest.busy, oldest.seq = true, last+1
	return oldest
}
