package cuda

import (
	"maps"
	"os"
	"strings"
	"time"
	"unsafe"
)

// CUDA graphs. Between BeginRecord and EndRecord the work queued on the
// device's stream is captured into a graph instead of launched, then the
// graph is launched as one unit: the GPU runs its kernels without waiting
// for each launch, and a site's graph is updated in place when the next
// step's capture has the same shape. A synchronous call inside a recording
// (a download, a synchronous upload, a Sync) ends it early and launches
// what was captured so far, so any sequence of ops is allowed; if capture
// or launch fails, the recorded calls run directly, so nothing is lost.
//
// On by default; TANDEM_CUDA_GRAPHS=0 launches every op directly (the
// tests in graph_test.go compare recorded steps with direct ones).
var graphsEnabled = os.Getenv("TANDEM_CUDA_GRAPHS") != "0"

const captureModeRelaxed = 2 // CU_STREAM_CAPTURE_MODE_RELAXED: allocation is allowed while capturing

// maxGraphs bounds the executable graphs kept, one per site (or part of
// a checkpointed site).
const maxGraphs = 256

// graphState is the device thread's record of graphs.
type graphState struct {
	execs  map[string]uintptr     // instantiated graph per site
	shapes map[string]uint64      // each exec's launches' kernels, clusters and PDL (recording.shape)
	rec    *recording             // non-nil while capturing
	prev   map[string][]launchSig // each site's last recording's launches
	stats  GraphStats
}

// GraphStats counts what became of recordings.
type GraphStats struct {
	Launched     int // recordings launched as graphs
	Fallbacks    int // recordings that ran op by op after a failed capture or launch
	Instantiated int // graphs instantiated (a new site, or an update refused)
	// Reinstantiated counts executable graphs dropped, not updated, for a
	// recording of other kernels, clusters or programmatic waits.
	Reinstantiated int
	Build          time.Duration // ending captures, updating and instantiating: host time on the device thread

	// Every launch of a recording is compared with the same launch of its
	// site's previous recording: Compared counts them by kernel and
	// Changed those whose grid or arguments differed, which a graph
	// captured once and replayed would have to read from device memory.
	// Reshaped counts recordings whose kernels differed from the site's
	// previous ones (not compared).
	Compared, Changed map[string]int
	Reshaped          int
}

// launchSig identifies a launch within a recording: its kernel, and a hash
// of its grid, block and arguments.
type launchSig struct {
	kernel string
	sum    uint64
}

// compareLaunches counts cur's launches into compared and those that
// differ from prev's into changed, by kernel; it reports false, counting
// nothing, when the two do not launch the same kernels in the same order.
func compareLaunches(prev, cur []launchSig, compared, changed map[string]int) bool {
	if len(prev) != len(cur) {
		return false
	}
	for i := range cur {
		if cur[i].kernel != prev[i].kernel {
			return false
		}
	}
	for i, l := range cur {
		compared[l.kernel]++
		if l.sum != prev[i].sum {
			changed[l.kernel]++
		}
	}
	return true
}

// maxComparedSites bounds the sites whose last launches are kept.
const maxComparedSites = 1024

// compare records rec's launches against its site's previous recording.
// Device thread only.
func (g *graphState) compare(rec *recording) {
	if g.prev == nil || len(g.prev) >= maxComparedSites {
		g.prev = map[string][]launchSig{}
	}
	if g.stats.Compared == nil {
		g.stats.Compared, g.stats.Changed = map[string]int{}, map[string]int{}
	}
	if prev, ok := g.prev[rec.site]; ok && !compareLaunches(prev, rec.sigs, g.stats.Compared, g.stats.Changed) {
		g.stats.Reshaped++
	}
	g.prev[rec.site] = rec.sigs
}

type recording struct {
	site  string
	sigs  []launchSig    // the launches captured, in order
	calls []func() error // the captured calls, to run directly if the graph fails
	err   error          // the first call that failed while capturing
	gates []func() error // run before the graph launches (or its calls rerun): late uploads' values
	// shape sums each launch's kernel, cluster dimensions and programmatic
	// launch: what an executable graph is updated in place only if it
	// matches (see launchGraph).
	shape uint64
	// stampMark is how many launches step stamps had logged when the
	// recording began: a recording that falls back runs its calls again,
	// and the captured launches, never run, come off the log.
	stampMark int
}

// launchShape is the part of a launch's configuration that an executable
// graph keeps from its instantiation: its cluster dimensions and whether
// it waits programmatically.
func launchShape(cluster [3]uint32, pdl bool) uint64 {
	v := uint64(cluster[0]) | uint64(cluster[1])<<21 | uint64(cluster[2])<<42
	if pdl {
		v |= 1 << 63
	}
	return v
}

// Graphs reports whether recordings become graphs on this device.
func (dev *Device) Graphs() bool { return dev.stream != 0 }

// beginRecord starts capturing the stream's work for site.
func (dev *Device) beginRecord(site string) {
	if !dev.Graphs() || dev.closed.Load() {
		return
	}
	dev.send(func() {
		dev.endCapture() // a checkpoint's first part, or one a panicking step left open
		if dev.asyncErr != nil {
			return
		}
		if dev.d.cuStreamBeginCapture(dev.stream, captureModeRelaxed) != 0 {
			dev.graphs.stats.Fallbacks++
			return
		}
		dev.graphs.rec = &recording{site: site, stampMark: len(dev.stamps.log)}
		dev.pdlRec = pdlDecode && pdlFor(site)
	})
}

// endRecord ends a recording and launches it.
func (dev *Device) endRecord() {
	if !dev.Graphs() || dev.closed.Load() {
		return
	}
	dev.send(dev.endCapture)
}

// dropGraphs destroys the executable graphs. Device thread only.
func (dev *Device) dropGraphs() {
	for site, exec := range dev.graphs.execs {
		dev.d.cuGraphExecDestroy(exec)
		delete(dev.graphs.execs, site)
		delete(dev.graphs.shapes, site)
	}
}

// runCall runs one posted call; while capturing it is also kept for a
// direct rerun, and its failure is the capture's, not the device's.
func (dev *Device) runCall(f func() error) {
	if rec := dev.graphs.rec; rec != nil {
		rec.calls = append(rec.calls, f)
		if err := f(); err != nil && rec.err == nil {
			rec.err = err
		}
		return
	}
	if err := f(); err != nil && dev.asyncErr == nil {
		dev.asyncErr = err
	}
}

// endCapture ends the capture in progress, if any, and launches the graph;
// on any failure the recorded calls run directly. Device thread only.
func (dev *Device) endCapture() {
	rec := dev.graphs.rec
	if rec == nil {
		return
	}
	dev.graphs.rec = nil
	dev.pdlRec = false
	start := time.Now()
	var gated time.Duration // waiting for late uploads' values is not building
	defer func() { dev.graphs.stats.Build += time.Since(start) - gated }()
	dev.graphs.compare(rec)
	var g uintptr
	ok := dev.d.cuStreamEndCapture(dev.stream, &g) == 0 && rec.err == nil
	if ok && g != 0 {
		// A late upload's copy node reads its bytes when the graph runs:
		// they must be final before it launches, which may wait for the
		// host. The graph is updated first, while the host computes them.
		ok = dev.launchGraph(rec.site, rec.shape, g, func() bool {
			t0 := time.Now()
			defer func() { gated += time.Since(t0) }()
			for _, gate := range rec.gates {
				if err := gate(); err != nil {
					return false // the calls rerun directly, and fail there
				}
			}
			return true
		})
	}
	if g != 0 {
		dev.d.cuGraphDestroy(g)
	}
	if ok {
		dev.graphs.stats.Launched++
		return
	}
	dev.graphs.stats.Fallbacks++
	if rec.stampMark <= len(dev.stamps.log) {
		dev.stamps.log = dev.stamps.log[:rec.stampMark]
	}
	for _, f := range rec.calls {
		if err := f(); err != nil && dev.asyncErr == nil {
			dev.asyncErr = err
		}
	}
}

// launchGraph updates site's executable graph to g (or instantiates one
// when the update is refused: a different topology) and launches it, once
// ready reports true. An executable graph whose launches had other
// kernels, cluster dimensions or programmatic waits than g's (shape) is
// instantiated again instead: the driver's update documents no such
// limits, and a kernel's cluster dimensions change with its pass's shared
// memory (attn_cluster over more keys), or a site's name is shared by
// another model's graph.
func (dev *Device) launchGraph(site string, shape uint64, g uintptr, ready func() bool) bool {
	if dev.graphs.execs == nil {
		dev.graphs.execs, dev.graphs.shapes = map[string]uintptr{}, map[string]uint64{}
	}
	exec := dev.graphs.execs[site]
	if exec != 0 && dev.graphs.shapes[site] != shape {
		dev.d.cuGraphExecDestroy(exec)
		exec = 0
		delete(dev.graphs.execs, site)
		dev.graphs.stats.Reinstantiated++
	}
	if exec != 0 {
		var info struct { // CUgraphExecUpdateResultInfo
			result           int32
			_                int32
			errNode, errFrom uintptr
		}
		if dev.d.cuGraphExecUpdate(exec, g, unsafe.Pointer(&info)) != 0 {
			dev.d.cuGraphExecDestroy(exec)
			exec = 0
			delete(dev.graphs.execs, site)
		}
	}
	if exec == 0 {
		if len(dev.graphs.execs) >= maxGraphs {
			// Many shapes (a serving engine's batches): start over rather
			// than hold an executable graph for each.
			dev.dropGraphs()
		}
		if dev.d.cuGraphInstantiateWithFlags(&exec, g, 0) != 0 {
			return false
		}
		dev.graphs.stats.Instantiated++
		dev.graphs.execs[site], dev.graphs.shapes[site] = exec, shape
	}
	if !ready() {
		return false
	}
	p := dev.prof
	if p == nil || !p.graphs {
		return dev.d.cuGraphLaunch(exec, dev.stream) == 0
	}
	// Graph profile: a mark around the launch (which it includes while the
	// device waits for it), only for a graph that did launch.
	p.site, _, _ = strings.Cut(site, "/") // a checkpoint's part counts under its step's site
	done := p.around(dev.d, dev.stream, site)
	if dev.d.cuGraphLaunch(exec, dev.stream) != 0 {
		return false
	}
	done()
	return true
}

// GraphStats reports what became of the recordings so far.
func (dev *Device) GraphStats() GraphStats {
	var s GraphStats
	dev.do(func() error {
		s = dev.graphs.stats
		s.Compared, s.Changed = maps.Clone(s.Compared), maps.Clone(s.Changed)
		return nil
	})
	return s
}
