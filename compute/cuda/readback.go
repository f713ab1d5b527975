package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// Prefetched results land in pinned host memory, readSlots slots of
// readSlot bytes, so the copy can be queued on the stream like a kernel.
const (
	readSlot  = 256
	readSlots = 64
)

// readback hands out the pinned slots asynchronous downloads land in. A
// slot may be handed out again while an earlier copy into it is still
// queued (its waiter gave up on an error): that is safe because every copy
// goes to the device's one stream in issue order, so the new copy, and
// the event its waiter waits for, come after the old one. Moving readbacks
// to another stream, or freeing the pinned memory, would break that.
type readback struct {
	mu   sync.Mutex
	base unsafe.Pointer // nil when pinned memory could not be had
	next int
	busy [readSlots]bool
}

func newReadback(dev *Device) *readback {
	r := &readback{}
	dev.do(func() error {
		var p unsafe.Pointer
		if dev.d.cuMemAllocHost(&p, readSlot*readSlots) == 0 {
			r.base = p
		}
		return nil
	})
	return r
}

// take reserves a free slot, or reports -1 when none is (each slot is
// held from the copy's queuing until its waiter has read it).
func (r *readback) take() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.base == nil {
		return -1
	}
	for range readSlots {
		i := r.next
		r.next = (r.next + 1) % readSlots
		if !r.busy[i] {
			r.busy[i] = true
			return i
		}
	}
	return -1
}

func (r *readback) release(i int) {
	r.mu.Lock()
	r.busy[i] = false
	r.mu.Unlock()
}

const eventDisableTiming = 2 // CU_EVENT_DISABLE_TIMING

// DownloadAsync queues a copy of n bytes of b to the host behind the work
// issued so far and returns the function that waits for that copy alone
// (work issued later keeps running) and writes the bytes into dst. The
// returned function must be called once. Copies larger than a slot, or
// made while every slot is held, are done synchronously now instead.
// Calls of wait after the first return an error and touch nothing.
func (dev *Device) DownloadAsync(b Buffer, n int) (wait func(dst []byte) error) {
	now := func() func([]byte) error {
		buf := make([]byte, n)
		err := dev.Download(buf, b)
		return func(dst []byte) error {
			copy(dst, buf)
			return err
		}
	}
	if n > b.Size {
		err := fmt.Errorf("cuda: download of %d bytes from a %d-byte buffer", n, b.Size)
		return func([]byte) error { return err }
	}
	if n > readSlot || dev.closed.Load() {
		return now()
	}
	slot := dev.rb.take()
	if slot < 0 {
		return now()
	}
	host := unsafe.Add(dev.rb.base, slot*readSlot)
	var ev uintptr
	var queued error
	// Sent, not posted: a copy to the host ends a recording in progress
	// (the event must be recorded on the live stream), and the host does
	// not wait here.
	dev.send(func() {
		dev.endCapture()
		if err := dev.d.check("cuEventCreate", dev.d.cuEventCreate(&ev, eventDisableTiming)); err != nil {
			queued = err
			return
		}
		if err := dev.d.check("cuMemcpyDtoHAsync", dev.d.cuMemcpyDtoHAsync(host, b.ptr, uint64(n), dev.stream)); err != nil {
			queued = err
			return
		}
		queued = dev.d.check("cuEventRecord", dev.d.cuEventRecord(ev, dev.stream))
	})
	var once sync.Once
	return func(dst []byte) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return fmt.Errorf("cuda: a download waited for twice")
		}
		defer dev.rb.release(slot)
		if len(dst) < n {
			return fmt.Errorf("cuda: download of %d bytes into %d", n, len(dst))
		}
		// The closures run on the device thread in order, so queued and
		// ev are set by the time this one runs.
		return dev.do(func() error {
			if ev != 0 {
				defer dev.d.cuEventDestroy(ev)
			}
			if queued != nil {
				return queued
			}
			if err := dev.d.check("cuEventSynchronize", dev.block(func() result { return dev.d.cuEventSynchronize(ev) })); err != nil {
				return err
			}
			if err := dev.takeAsyncErr(); err != nil { // as Download: a queued call failed
				return err
			}
			copy(dst[:n], unsafe.Slice((*byte)(host), n))
			return nil
		})
	}
}
