package cuda

import (
	"errors"
	"runtime"
	"sort"
	"strings"
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
	Kernels []KernelTime // longest total first
	// Sites is the same time by the recording site the kernels were
	// issued in (compute.Record: "verify-at4", "draft-at0", …; "" outside
	// any), longest first: which part of a step or round takes it.
	Sites []KernelTime
	// SiteKernels is each site's time by kernel, longest first: what a
	// draft step or a verify spends its time on.
	SiteKernels map[string][]KernelTime
	Busy        time.Duration // the kernels' total
	Wall        time.Duration // host time from start to stop
	Issue       time.Duration // filled by callers that measure it (bench: host time to issue a step)

	// Idle is the device's idle time between the first kernel's start
	// and the last one's end; HostBound the part of it spent waiting for
	// a kernel the host had not issued yet. Gaps are the longest idle
	// stretches, with what the device thread did just before.
	Idle, HostBound time.Duration
	Gaps            []Gap
}

// Gap is one stretch of device idle time between two kernels.
type Gap struct {
	After, Before string        // the kernels around it
	Idle          time.Duration // device idle
	HostLate      time.Duration // how long after the previous kernel ended the host issued the next
	HostCalls     string        // synchronous device-thread calls issued in between, with their times
}

type profiler struct {
	graphs bool   // StartGraphProfile: whole graphs, not kernels
	site   string // the recording site being issued
	start  time.Time
	base   uintptr // event recorded at start: device time zero
	marks  []profMark
	calls  []hostCall
	free   []uintptr // events to reuse
	err    error
}

type profMark struct {
	name, site string
	start, end uintptr
	issued     time.Duration // host time (since start) when the launch returned
}

// hostCall is a synchronous call the device thread ran (Download,
// Alloc, Sync, …), by host time since start.
type hostCall struct {
	name       string
	start, end time.Duration
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
func (p *profiler) around(d *driverAPI, stream uintptr, name string) func() {
	a := p.event(d)
	d.cuEventRecord(a, stream)
	return func() {
		b := p.event(d)
		d.cuEventRecord(b, stream)
		p.marks = append(p.marks, profMark{name, p.site, a, b, time.Since(p.start)})
	}
}

// call times a synchronous device-thread call.
func (p *profiler) call(name string, f func() error) error {
	t := time.Since(p.start)
	err := f()
	p.calls = append(p.calls, hostCall{name, t, time.Since(p.start)})
	return err
}

// callerName names the function skip frames up, without its package path.
func callerName(skip int) string {
	pc, _, _, ok := runtime.Caller(skip + 1)
	if !ok {
		return "?"
	}
	fn := runtime.FuncForPC(pc)
	if fn == nil {
		return "?"
	}
	name := fn.Name()
	return name[strings.LastIndex(name, "/")+1:]
}

// StartProfile starts timing every kernel the device runs. Recordings run
// as their calls, not as graphs, so that each kernel can be bracketed.
func (dev *Device) StartProfile() error { return dev.startProfile(false) }

// StartGraphProfile starts timing every CUDA graph the device launches, as
// a whole: the timeline of real steps and rounds, graphs and checkpoints
// as they run, with no events between kernels (whose cost to the host
// StartProfile pays). Each graph is a mark named by its site and part
// ("verify-at4/3") and summed by its site; work outside recordings is not
// timed, and shows as idle time between graphs. StopProfile ends it.
func (dev *Device) StartGraphProfile() error { return dev.startProfile(true) }

func (dev *Device) startProfile(graphs bool) error {
	if dev.d.cuEventElapsedTime == nil {
		return errors.New("cuda: the driver has no cuEventElapsedTime; profiling is unavailable")
	}
	return dev.do(func() error {
		if err := dev.d.check("cuCtxSynchronize", dev.d.cuCtxSynchronize()); err != nil {
			return err
		}
		p := &profiler{start: time.Now(), graphs: graphs}
		p.base = p.event(dev.d)
		dev.d.cuEventRecord(p.base, dev.stream)
		dev.prof = p
		if !graphs { // the kernel profile runs recordings as calls
			dev.profiling.Store(true)
		}
		dev.callNames.Store(true)
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
		dev.profiling.Store(false)
		dev.callNames.Store(false)
		if err := dev.d.check("cuCtxSynchronize", dev.d.cuCtxSynchronize()); err != nil {
			return err
		}
		out.Wall = time.Since(p.start)
		times := make([]time.Duration, len(p.marks))
		names := make([]string, len(p.marks))
		var sites []string // the spin that holds kernels back is no site's work
		var siteTimes []time.Duration
		var siteNames []string // the kernels of sites, for SiteKernels
		for i, m := range p.marks {
			var ms float32
			if err := dev.d.check("cuEventElapsedTime", dev.d.cuEventElapsedTime(&ms, m.start, m.end)); err != nil {
				return err
			}
			times[i] = time.Duration(float64(ms) * float64(time.Millisecond))
			names[i] = m.name
			out.Busy += times[i]
			if m.name != "spin" {
				sites, siteTimes = append(sites, m.site), append(siteTimes, times[i])
				siteNames = append(siteNames, m.name)
			}
		}
		out.Kernels, out.Sites = sumBy(names, times), sumBy(sites, siteTimes)
		out.SiteKernels = sumBySite(sites, siteNames, siteTimes)
		if err := p.timeline(dev.d, &out); err != nil {
			return err
		}
		for _, m := range p.marks {
			p.free = append(p.free, m.start, m.end)
		}
		p.free = append(p.free, p.base)
		for _, ev := range p.free {
			dev.d.cuEventDestroy(ev)
		}
		return p.err
	})
	return out, err
}

// sumBy totals times[i] and counts the calls under keys[i], longest total
// first (ties by key, so the order is stable).
func sumBy(keys []string, times []time.Duration) []KernelTime {
	by := map[string]*KernelTime{}
	for i, key := range keys {
		k := by[key]
		if k == nil {
			k = &KernelTime{Name: key}
			by[key] = k
		}
		k.Calls++
		k.Time += times[i]
	}
	out := make([]KernelTime, 0, len(by))
	for _, k := range by {
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Time != out[j].Time {
			return out[i].Time > out[j].Time
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// sumBySite is sumBy of the kernels (names) within each site.
func sumBySite(sites, names []string, times []time.Duration) map[string][]KernelTime {
	idx := map[string][]int{}
	for i, site := range sites {
		idx[site] = append(idx[site], i)
	}
	out := make(map[string][]KernelTime, len(idx))
	for site, is := range idx {
		ns, ts := make([]string, len(is)), make([]time.Duration, len(is))
		for j, i := range is {
			ns[j], ts[j] = names[i], times[i]
		}
		out[site] = sumBy(ns, ts)
	}
	return out
}

// profileSite names the recording site the kernels issued from now on
// belong to, while profiling (which runs unrecorded).
func (dev *Device) profileSite(site string) {
	if dev.profiling.Load() {
		dev.send(func() {
			if dev.prof != nil {
				dev.prof.site = site
			}
		})
	}
}

// timeline places every kernel on the device's clock (relative to the base
// event) and analyses the gaps (gapsOf).
func (p *profiler) timeline(d *driverAPI, out *Profile) error {
	at := func(ev uintptr) (time.Duration, error) {
		var ms float32
		err := d.check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, p.base, ev))
		return time.Duration(float64(ms) * float64(time.Millisecond)), err
	}
	spans := make([]span, len(p.marks))
	for i, m := range p.marks {
		start, err := at(m.start)
		if err != nil {
			return err
		}
		end, err := at(m.end)
		if err != nil {
			return err
		}
		spans[i] = span{m.name, start, end, m.issued}
	}
	gapsOf(spans, p.calls, out)
	return nil
}

// span is one kernel on the device's clock, with the host time its launch
// was issued; both clocks start at StartProfile (the device's to within
// the base event's latency, microseconds).
type span struct {
	name               string
	start, end, issued time.Duration
}

// gapsOf measures the device's idle time between consecutive kernels and
// tells which of it the host caused: the next kernel was issued after the
// previous one had ended. Each gap lists the synchronous device-thread
// calls that ran between the two launches.
func gapsOf(spans []span, calls []hostCall, out *Profile) {
	var gaps []Gap
	var prevEnd time.Duration
	ci := 0
	for i, k := range spans {
		if i > 0 && k.start > prevEnd {
			idle := k.start - prevEnd
			out.Idle += idle
			g := Gap{After: spans[i-1].name, Before: k.name, Idle: idle}
			if k.issued > prevEnd {
				g.HostLate = min(k.issued-prevEnd, idle)
				out.HostBound += g.HostLate
			}
			var names []string
			for ; ci < len(calls) && calls[ci].start < k.issued; ci++ {
				if c := calls[ci]; c.end > spans[i-1].issued {
					names = append(names, c.name+" "+(c.end-c.start).Round(time.Microsecond).String())
				}
			}
			g.HostCalls = strings.Join(names, ", ")
			gaps = append(gaps, g)
		}
		prevEnd = max(prevEnd, k.end)
	}
	sort.SliceStable(gaps, func(i, j int) bool { return gaps[i].Idle > gaps[j].Idle })
	out.Gaps = gaps[:min(len(gaps), maxGaps)]
}

// maxGaps is how many idle stretches a profile lists.
const maxGaps = 12
