package cuda

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"
)

// Step stamps: where a real step's time goes, kernel by kernel, with
// programmatic launch and graphs as they run. A kernel profile times each
// kernel back to back, without the overlap PDL gives, and a graph profile
// times whole graphs; neither says what one kernel costs the step. With
// TANDEM_CUDA_STAMPS=1 (read at start-up) the kernels are compiled with
// stamp() in pdl_start (kernels/common.cuh): thread 0 of block (0, 0, 0)
// writes the global timer as it passes its wait for the kernel before,
// one slot a launch. That moment is when the kernel before has finished,
// so the time from one kernel's stamp to the next one's is the first
// kernel's share of the step: its work on the critical path, with whatever
// of it PDL hid left out. Without the build flag the kernels have no
// stamp code at all, so the default build pays nothing.
var stampsBuild = os.Getenv("TANDEM_CUDA_STAMPS") == "1"

// StampsBuilt reports whether the kernels are built with step stamps
// (TANDEM_CUDA_STAMPS=1 at start-up).
func StampsBuilt() bool { return stampsBuild }

// errNoStamps is StartStamps' error where the kernels were built without
// stamps.
var errNoStamps = errors.New("cuda: the kernels were built without step stamps: set TANDEM_CUDA_STAMPS=1 before the backend starts")

// StepStamp is one launch of a stamped run: its kernel, when it passed its
// wait (from the first launch's), and its share of the run (until the
// next launch passed its own; the last launch's is zero).
type StepStamp struct {
	Name      string
	At, Share time.Duration
}

// StampKernels sums a stamped run's shares by kernel, longest first.
func StampKernels(st []StepStamp) []KernelTime {
	names, shares := make([]string, len(st)), make([]time.Duration, len(st))
	for i, s := range st {
		names[i], shares[i] = s.Name, s.Share
	}
	return sumBy(names, shares)
}

// stampLaunch is a launch logged while stamping, in issue order.
type stampLaunch struct {
	name string
	mod  uintptr
}

// stampState is the device thread's stamping: each module's globals and
// buffer, and the launches logged (stamping is on while mods is set).
type stampState struct {
	mods []stampModule
	log  []stampLaunch
}

type stampModule struct {
	mod            uintptr
	buf, ptr, n, c uintptr // the buffer; tandem_stamps, tandem_stamp_n, tandem_stamp_cap
	size           int     // the buffer's slots
}

// launched logs a launch of k the driver took (err nil) where stamping is
// on and k's module stamps: a launch refused never runs, so never stamps.
func (s *stampState) launched(k Kernel, err error) error {
	if err != nil || s.mods == nil {
		return err
	}
	for _, m := range s.mods {
		if m.mod == k.mod {
			s.log = append(s.log, stampLaunch{k.name, k.mod})
			break
		}
	}
	return nil
}

// StartStamps starts stamping every launch of the backend's kernels, with
// room for capacity stamps in each of its two modules. StopStamps ends it.
func (b *Backend) StartStamps(capacity int) error {
	if !stampsBuild {
		return errNoStamps
	}
	dev := b.dev
	if dev.d.cuModuleGetGlobal == nil {
		return errors.New("cuda: the driver lacks cuModuleGetGlobal; no step stamps")
	}
	mods := map[uintptr]bool{}
	for _, k := range b.k {
		mods[k.mod] = true
	}
	var sm []stampModule
	free := func() {
		for _, m := range sm {
			dev.Free(Buffer{ptr: m.buf, Size: 8 * m.size})
		}
	}
	for mod := range mods {
		buf, err := dev.Alloc(8 * capacity)
		if err != nil {
			free()
			return fmt.Errorf("step stamps: %w", err)
		}
		sm = append(sm, stampModule{mod: mod, buf: buf.ptr, size: capacity})
	}
	err := dev.do(func() error {
		d := dev.d
		for i := range sm {
			m := &sm[i]
			for _, g := range []struct {
				name  string
				at    *uintptr
				bytes uint64
			}{{"tandem_stamps", &m.ptr, 8}, {"tandem_stamp_n", &m.n, 4}, {"tandem_stamp_cap", &m.c, 4}} {
				var bytes uint64
				if err := d.check("cuModuleGetGlobal "+g.name, d.cuModuleGetGlobal(g.at, &bytes, m.mod, g.name)); err != nil {
					return err
				}
				if bytes != g.bytes {
					return fmt.Errorf("step stamps: %s is %d bytes, want %d", g.name, bytes, g.bytes)
				}
			}
			size, zero := int32(m.size), int32(0)
			if err := d.check("cuMemcpyHtoD", d.cuMemcpyHtoD(m.c, unsafe.Pointer(&size), 4)); err != nil {
				return err
			}
			if err := d.check("cuMemcpyHtoD", d.cuMemcpyHtoD(m.n, unsafe.Pointer(&zero), 4)); err != nil {
				return err
			}
		}
		// The pointers last, every module's or none: the kernels stamp from here on.
		for i, m := range sm {
			buf := uint64(m.buf)
			if err := d.check("cuMemcpyHtoD", d.cuMemcpyHtoD(m.ptr, unsafe.Pointer(&buf), 8)); err != nil {
				var null uint64
				for _, m := range sm[:i] {
					d.cuMemcpyHtoD(m.ptr, unsafe.Pointer(&null), 8)
				}
				return err
			}
		}
		dev.stamps = stampState{mods: sm}
		return nil
	})
	if err != nil {
		free()
	}
	return err
}

// StopStamps waits for the device, ends stamping and returns the stamped
// launches in issue order.
func (b *Backend) StopStamps() ([]StepStamp, error) {
	dev := b.dev
	stamps := map[uintptr][]uint64{}
	var log []stampLaunch
	var mods []stampModule
	err := dev.do(func() error {
		d := dev.d
		mods, log = dev.stamps.mods, dev.stamps.log
		dev.stamps = stampState{}
		if err := d.check("cuCtxSynchronize", dev.block(d.cuCtxSynchronize)); err != nil {
			return err
		}
		for _, m := range mods {
			var null uint64
			if err := d.check("cuMemcpyHtoD", d.cuMemcpyHtoD(m.ptr, unsafe.Pointer(&null), 8)); err != nil {
				return err
			}
			var n int32
			if err := d.check("cuMemcpyDtoH", d.cuMemcpyDtoH(unsafe.Pointer(&n), m.n, 4)); err != nil {
				return err
			}
			if int(n) > m.size {
				return fmt.Errorf("step stamps: %d launches overflowed the %d slots", n, m.size)
			}
			s := make([]uint64, n)
			if n > 0 {
				if err := d.check("cuMemcpyDtoH", d.cuMemcpyDtoH(unsafe.Pointer(&s[0]), m.buf, uint64(8*n))); err != nil {
					return err
				}
			}
			stamps[m.mod] = s
		}
		return nil
	})
	for _, m := range mods {
		dev.Free(Buffer{ptr: m.buf, Size: 8 * m.size})
	}
	if err != nil {
		return nil, err
	}
	return attributeStamps(log, stamps)
}

// attributeStamps pairs the launches with their modules' stamps, in order
// (a module's kernels stamp in the order they were issued: each waits for
// the one before), and gives each launch its share.
func attributeStamps(log []stampLaunch, stamps map[uintptr][]uint64) ([]StepStamp, error) {
	// A module by a kernel of it, for the errors.
	label := func(mod uintptr) string {
		for _, l := range log {
			if l.mod == mod {
				return "the module of " + l.name
			}
		}
		return "a module without launches"
	}
	next := map[uintptr]int{}
	at := make([]uint64, len(log))
	for i, l := range log {
		s, j := stamps[l.mod], next[l.mod]
		if j >= len(s) {
			return nil, fmt.Errorf("step stamps: launch %d (%s) is launch %d of %s, which stamped %d times (a kernel that skips pdl_start, or a launch logged that never ran)",
				i, l.name, j+1, label(l.mod), len(s))
		}
		at[i], next[l.mod] = s[j], j+1
	}
	for mod, s := range stamps {
		if next[mod] != len(s) {
			return nil, fmt.Errorf("step stamps: %s stamped %d times for %d launches logged (a kernel that stamps twice, or one run that was not logged)",
				label(mod), len(s), next[mod])
		}
	}
	out := make([]StepStamp, len(log))
	for i, l := range log {
		out[i] = StepStamp{Name: l.name, At: time.Duration(int64(at[i]) - int64(at[0]))}
		if i+1 < len(log) {
			out[i].Share = time.Duration(int64(at[i+1]) - int64(at[i]))
		}
	}
	return out, nil
}
