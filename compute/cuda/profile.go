package cuda

import (
	"errors"
	"sort"
	"time"
)

// Profiling brackets every kernel launch with two events and sums the time
// between them by kernel name. The events cost host time, so a profiled
// run is slower than a plain one; what it is for is where the device time
// goes, and how much of the wall time the device is busy at all.

// KernelTime is one kernel's device time within a profile.
type KernelTime struct {
	Name  string
	Calls int
	Time  time.Duration
}

// Profile is the device time between StartProfile and StopProfile.
type Profile struct {
	Kernels []KernelTime  // longest total first
	Busy    time.Duration // the kernels' total
	Wall    time.Duration // host time from start to stop
	Issue   time.Duration // filled by callers that measure it (bench: host time to issue a step)
}

type profiler struct {
	start time.Time
	marks []profMark
	free  []uintptr // events to reuse
	err   error
}

type profMark struct {
	name       string
	start, end uintptr
}

func (p *profiler) event(d *driverAPI) uintptr {
	if n := len(p.free); n > 0 {
		ev := p.free[n-1]
		p.free = p.free[:n-1]
		return ev
	}
	var ev uintptr
	if err := d.check("cuEventCreate", d.cuEventCreate(&ev, 0)); err != nil && p.err == nil {
		p.err = err
	}
	return ev
}

// around records an event before a launch and returns the function that
// records the one after it.
func (p *profiler) around(d *driverAPI, name string) func() {
	a := p.event(d)
	d.cuEventRecord(a, 0)
	return func() {
		b := p.event(d)
		d.cuEventRecord(b, 0)
		p.marks = append(p.marks, profMark{name, a, b})
	}
}

// StartProfile starts timing every kernel the device runs.
func (dev *Device) StartProfile() error {
	if dev.d.cuEventElapsedTime == nil {
		return errors.New("cuda: the driver has no cuEventElapsedTime; profiling is unavailable")
	}
	return dev.do(func() error {
		if err := dev.d.check("cuCtxSynchronize", dev.d.cuCtxSynchronize()); err != nil {
			return err
		}
		dev.prof = &profiler{start: time.Now()}
		return nil
	})
}

// StopProfile waits for the device and reports the kernel times since
// StartProfile.
func (dev *Device) StopProfile() (Profile, error) {
	var out Profile
	err := dev.do(func() error {
		p := dev.prof
		if p == nil {
			return errors.New("cuda: StopProfile without StartProfile")
		}
		dev.prof = nil
		if err := dev.d.check("cuCtxSynchronize", dev.d.cuCtxSynchronize()); err != nil {
			return err
		}
		out.Wall = time.Since(p.start)
		by := map[string]*KernelTime{}
		for _, m := range p.marks {
			var ms float32
			if err := dev.d.check("cuEventElapsedTime", dev.d.cuEventElapsedTime(&ms, m.start, m.end)); err != nil {
				return err
			}
			k := by[m.name]
			if k == nil {
				k = &KernelTime{Name: m.name}
				by[m.name] = k
			}
			k.Calls++
			d := time.Duration(float64(ms) * float64(time.Millisecond))
			k.Time += d
			out.Busy += d
			p.free = append(p.free, m.start, m.end)
		}
		for _, ev := range p.free {
			dev.d.cuEventDestroy(ev)
		}
		for _, k := range by {
			out.Kernels = append(out.Kernels, *k)
		}
		sort.Slice(out.Kernels, func(i, j int) bool { return out.Kernels[i].Time > out.Kernels[j].Time })
		return p.err
	})
	return out, err
}
