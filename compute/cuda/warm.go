package cuda

import (
	"errors"

	"tandem/compute"
)

var errNoSide = errors.New("cuda: this driver cannot fork a second stream (cuStreamWaitEvent), or graphs are off")

// Warming L2 ahead of a product (TANDEM_CUDA_WARM_L2=MiB; live; 0, the
// default, warms nothing). A decode step's norms and attention leave the
// memory bus nearly idle: a 31B step spends about 3 ms of its 19.6 in
// them, an E2B step most of its time. The model names the weights of the
// products that come next (compute.WarmL2), and l2_warm asks L2 for a
// share of their bytes meanwhile, so that the product streams that share
// from L2 instead of HBM. Nothing is read into registers or written, so no
// result changes.
//
// The share is spread evenly over each weight (pieces of warmPiece bytes
// every stride bytes), not its first bytes: a product's blocks all run at
// once, each streaming its own rows and K range, and one that found its
// bytes in L2 would only finish early and leave the bus to the others.
//
// The sixteenth session's version asked for the first megabytes of each
// weight with bulk prefetches from one or two blocks, in the main stream,
// and steps took twice as long: one multiprocessor's copy engine served
// every request, and the kernels after it waited. Here the requests are
// plain prefetches spread over the grid, and by default they run on a
// side stream (TANDEM_CUDA_WARM_SIDE=0 puts them in the main one): forked
// behind the product before, joined only where a recording ends, so
// nothing in the step waits for them.
var (
	warmL2MiB int  // read by liveSettings
	warmSide  bool // read by liveSettings
)

// warmPiece is the bytes l2_warm asks for in one run: eight 128-byte
// lines, contiguous so that HBM serves whole bursts.
const warmPiece = 1024

// WarmL2 implements compute.L2Warmer: a share of each model weight in ws,
// warmL2MiB in all, taken in order (the first weight whole before the
// next gets any), is asked of L2.
func (b *Backend) WarmL2(ws ...*compute.Tensor) {
	if warmL2MiB == 0 || len(ws) == 0 {
		return
	}
	k, ok := b.kernel("l2_warm")
	if !ok {
		return
	}
	side := warmSide && b.dev.Graphs()
	left := int64(warmL2MiB) << 20
	for _, w := range ws {
		if w == nil || left <= 0 || !isWeight(w) {
			continue
		}
		m := memOf(w)
		p := (m.ptr + 127) &^ 127
		n := int64(w.Len()*w.DType().Size()) - int64(p-m.ptr)
		if n < warmPiece {
			continue
		}
		take := min(n, left)
		left -= take
		// Pieces of warmPiece every stride bytes, stride a multiple of
		// 128 so that every piece starts on a line.
		stride := (n*warmPiece/take + 127) &^ 127
		lines := (n + stride - 1) / stride * (warmPiece / 128)
		blocks := min((lines+255)/256, int64(2*b.dev.SMs))
		grid, block := [3]uint32{uint32(blocks), 1, 1}, [3]uint32{256, 1, 1}
		args := []any{Buffer{ptr: p, Size: int(n)}, uint64(n), uint64(stride), uint64(lines)}
		var err error
		if side {
			err = b.dev.LaunchSideAsync(k, grid, block, args...)
		} else {
			err = b.dev.LaunchAsync(k, grid, block, 0, args...)
		}
		if err != nil {
			panic(err)
		}
		b.warmN++
	}
}

// LaunchSideAsync is LaunchAsync on the side stream: k runs after the work
// issued so far, beside what is issued after it, and nothing waits for it
// but the end of a recording (and the device's synchronisations).
func (dev *Device) LaunchSideAsync(k Kernel, grid, block [3]uint32, args ...any) error {
	f, err := dev.launcher(k, grid, block, 0, [3]uint32{}, true, args)
	if err != nil {
		return err
	}
	dev.post(f)
	return nil
}

// sideStream is a second stream for work nothing in a step waits on. A
// launch on it is forked behind everything issued on the device's stream
// (an event recorded there, waited for here); while a recording captures,
// the side stream joins the capture that way, and it must join back
// before the capture ends (join). Made at its first use, so a driver
// without it costs only that use.
type sideStream struct {
	stream, forkEv, joinEv uintptr
}

// fork makes the side stream wait for the work issued so far on the
// device's stream and returns it. Device thread only.
func (dev *Device) fork() (uintptr, error) {
	s, d := &dev.side, dev.d
	if s.stream == 0 {
		if d.cuStreamWaitEvent == nil || dev.stream == 0 {
			return 0, errNoSide
		}
		if err := d.check("cuStreamCreate", d.cuStreamCreate(&s.stream, 0)); err != nil {
			return 0, err
		}
		for _, ev := range []*uintptr{&s.forkEv, &s.joinEv} {
			if err := d.check("cuEventCreate", d.cuEventCreate(ev, eventDisableTiming)); err != nil {
				return 0, err
			}
		}
	}
	if err := d.check("cuEventRecord", d.cuEventRecord(s.forkEv, dev.stream)); err != nil {
		return 0, err
	}
	return s.stream, d.check("cuStreamWaitEvent", d.cuStreamWaitEvent(s.stream, s.forkEv, 0))
}

// join makes the device's stream wait for the side stream's work: a
// capture that forked must end so. Device thread only.
func (dev *Device) join() error {
	s, d := &dev.side, dev.d
	if s.stream == 0 {
		return nil
	}
	if err := d.check("cuEventRecord", d.cuEventRecord(s.joinEv, s.stream)); err != nil {
		return err
	}
	return d.check("cuStreamWaitEvent", d.cuStreamWaitEvent(dev.stream, s.joinEv, 0))
}
