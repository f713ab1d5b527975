package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebitengine/purego"
	"unsafe"
)

// Device is one GPU with its primary context. Every CUDA call runs on one
// goroutine locked to its OS thread: a context is current per thread, and a
// call from another thread fails with CUDA_ERROR_INVALID_CONTEXT.
type Device struct {
	d             *driverAPI
	work          chan func()
	ctx           uintptr
	Name          string
	Arch          int          // compute capability, e.g. 90 for sm_90
	SMs           int          // multiprocessors, e.g. 132 on the H200
	DriverVersion int          // e.g. 13000
	asyncErr      error        // first failure of an asynchronous call; device thread only
	prof          *profiler    // non-nil while profiling; device thread only
	pdlRec        bool         // the recording in progress launches with PDL (pdlDecode); device thread only
	stream        uintptr      // the stream all work goes to: 0 (legacy) unless graphs are on
	graphs        graphState   // device thread only
	stamps        stampState   // step stamps (stamps.go); device thread only
	profiling     atomic.Bool  // a kernel profile runs (prof != nil, not graphs), for the host side
	callNames     atomic.Bool  // a profile of either kind runs: name the device thread's synchronous calls
	busy, blocked atomic.Int64 // nanoseconds the device thread spent in calls, and of that in waits for the device (HostTime)
	closed        atomic.Bool
	mu            sync.Mutex
	pending       []func() error // posted, not yet handed to the thread
	rb            *readback      // pinned slots for DownloadAsync
	stopped       bool           // the thread has been sent its stop; under mu
}

// Open makes device ordinal's primary context current on a dedicated,
// locked thread. Without a driver it returns an error wrapping ErrNoDriver.
func Open(ordinal int) (*Device, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	dev := &Device{d: d, work: make(chan func(), 64)}
	ready := make(chan error)
	go dev.loop(ordinal, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	dev.rb = newReadback(dev)
	return dev, nil
}

func (dev *Device) loop(ordinal int, ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread dies with the device
	d := dev.d
	err := func() error {
		var n, v int32
		if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
			return err
		}
		if ordinal < 0 || int(ordinal) >= int(n) {
			return fmt.Errorf("cuda: device %d requested, %d present", ordinal, n)
		}
		var h int32
		if err := d.check("cuDeviceGet", d.cuDeviceGet(&h, int32(ordinal))); err != nil {
			return err
		}
		name := make([]byte, 256)
		if err := d.check("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), h)); err != nil {
			return err
		}
		dev.Name = goString(&name[0])
		var major, minor int32
		d.cuDeviceGetAttribute(&major, attrComputeCapabilityMajor, h)
		d.cuDeviceGetAttribute(&minor, attrComputeCapabilityMinor, h)
		dev.Arch = int(major*10 + minor)
		var sms int32
		d.cuDeviceGetAttribute(&sms, attrMultiprocessorCount, h)
		dev.SMs = int(sms)
		d.cuDriverGetVersion(&v)
		dev.DriverVersion = int(v)
		if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&dev.ctx, h)); err != nil {
			return err
		}
		if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(dev.ctx)); err != nil {
			return err
		}
		if graphsEnabled && d.graphs {
			// Capture needs a stream of its own (the legacy stream cannot
			// be captured); a blocking one, so the synchronous copies on
			// the legacy stream still wait for it.
			if err := d.check("cuStreamCreate", d.cuStreamCreate(&dev.stream, 0)); err != nil {
				return err
			}
		}
		return nil
	}()
	ready <- err
	if err != nil {
		return
	}
	for f := range dev.work {
		if f == nil {
			dev.endCapture() // run what a recording left open
			dev.dropGraphs()
			return
		}
		t0 := time.Now()
		f()
		dev.busy.Add(int64(time.Since(t0)))
	}
}

// block runs a call that waits for the device (a synchronisation), counting
// its time as blocked rather than as the thread's own work (HostTime).
func (dev *Device) block(f func() result) result {
	t0 := time.Now()
	r := f()
	dev.blocked.Add(int64(time.Since(t0)))
	return r
}

// HostTime reports the device thread's time so far: in the driver calls
// it made for the host (launches, graph capture and update, copies), and
// of that the time it waited for the device to finish work. Their
// difference is the host side's cost on that thread; next to the caller's
// (generation.Result.IssueTimes), it says whether the host bounds decoding.
func (dev *Device) HostTime() (busy, blocked time.Duration) {
	return time.Duration(dev.busy.Load()), time.Duration(dev.blocked.Load())
}

// do runs f on the device's thread. A synchronous call cannot join a
// capture, so a recording in progress is launched first.
func (dev *Device) do(f func() error) error { return dev.run(f, true) }

// doKeep is do for calls a capture allows (allocation, in relaxed mode):
// a recording in progress goes on.
func (dev *Device) doKeep(f func() error) error { return dev.run(f, false) }

func (dev *Device) run(f func() error, endCapture bool) error {
	if dev.closed.Load() {
		return errClosed
	}
	done := make(chan error, 1)
	name := ""
	if dev.callNames.Load() {
		name = callerName(2) // do's or doKeep's caller
	}
	if !dev.send(func() {
		if endCapture {
			dev.endCapture()
		}
		done <- dev.timed(name, f)
	}) {
		return errClosed
	}
	return <-done
}

// timed runs f, recording it in the profile when one is running.
func (dev *Device) timed(name string, f func() error) error {
	if dev.prof != nil && name != "" {
		return dev.prof.call(name, f)
	}
	return f()
}

var errClosed = errors.New("cuda: the device is closed")

// Close stops the device's thread; later calls fail (cleanups of tensors
// that outlive the device become no-ops).
func (dev *Device) Close() {
	if dev.closed.CompareAndSwap(false, true) {
		dev.send(nil)
	}
}

// MemInfo reports free and total device memory in bytes.
func (dev *Device) MemInfo() (free, total uint64, err error) {
	err = dev.do(func() error { return dev.d.check("cuMemGetInfo", dev.d.cuMemGetInfo(&free, &total)) })
	return free, total, err
}

// Buffer is device memory.
type Buffer struct {
	ptr  uintptr
	Size int
}

// Alloc reserves n bytes. Out of memory is an error saying how much was
// asked and how much is free.
func (dev *Device) Alloc(n int) (Buffer, error) {
	var p uintptr
	err := dev.doKeep(func() error {
		if r := dev.d.cuMemAlloc(&p, uint64(n)); r != 0 {
			var free, total uint64
			dev.d.cuMemGetInfo(&free, &total)
			return fmt.Errorf("cuda: allocating %d bytes (%.2f GiB) with %.2f of %.2f GiB free: %s",
				n, gib(uint64(n)), gib(free), gib(total), dev.d.errorString(r))
		}
		return nil
	})
	return Buffer{ptr: p, Size: n}, err
}

func gib(n uint64) float64 { return float64(n) / (1 << 30) }

// Free releases b.
func (dev *Device) Free(b Buffer) error {
	return dev.do(func() error { return dev.d.check("cuMemFree", dev.d.cuMemFree(b.ptr)) })
}

// Upload copies src into b.
func (dev *Device) Upload(b Buffer, src []byte) error {
	if len(src) > b.Size {
		return fmt.Errorf("cuda: upload of %d bytes into a %d-byte buffer", len(src), b.Size)
	}
	if len(src) == 0 {
		return nil
	}
	return dev.do(func() error {
		return dev.d.check("cuMemcpyHtoD", dev.d.cuMemcpyHtoD(b.ptr, unsafe.Pointer(&src[0]), uint64(len(src))))
	})
}

// Download copies b into dst. An asynchronous call that failed since the
// last report (a launch the driver refused) fails the download too: what
// dst would hold may not be what the work would have written.
func (dev *Device) Download(dst []byte, b Buffer) error {
	if len(dst) > b.Size {
		return fmt.Errorf("cuda: download of %d bytes from a %d-byte buffer", len(dst), b.Size)
	}
	if len(dst) == 0 {
		return nil
	}
	return dev.do(func() error {
		if err := dev.takeAsyncErr(); err != nil {
			return err
		}
		return dev.d.check("cuMemcpyDtoH", dev.d.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), b.ptr, uint64(len(dst))))
	})
}

// takeAsyncErr returns the first failure of an asynchronous call since the
// last one was reported, and forgets it. Device thread only.
func (dev *Device) takeAsyncErr() error {
	err := dev.asyncErr
	dev.asyncErr = nil
	return err
}

// Kernel is a compiled __global__ function.
type Kernel struct {
	fn   uintptr
	name string
	mod  uintptr // its module: where its step stamps' globals are (stamps.go)
}

// funcAttrNumRegs is CU_FUNC_ATTRIBUTE_NUM_REGS, for FuncAttribute.
const funcAttrNumRegs = 4

// funcAttrLocalBytes is CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: a kernel's
// local memory per thread, where its register spills go.
const funcAttrLocalBytes = 3

// funcAttrNonPortableCluster is
// CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: set to 1, clusters
// of up to 16 blocks instead of 8.
const funcAttrNonPortableCluster = 14

// funcAttrMaxDynamicShared is
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: the most dynamic shared
// memory a launch of the kernel may ask for (48 KiB unless raised).
const funcAttrMaxDynamicShared = 8

// SetFuncAttribute sets one of k's CUfunction_attribute values.
func (dev *Device) SetFuncAttribute(k Kernel, attr, v int32) error {
	if dev.d.cuFuncSetAttribute == nil {
		return errors.New("cuda: the driver library lacks cuFuncSetAttribute")
	}
	return dev.do(func() error { return dev.d.check("cuFuncSetAttribute", dev.d.cuFuncSetAttribute(k.fn, attr, v)) })
}

// MaxActiveClusters is how many clusters of the given dimensions, of k's
// blocks of block threads with shmem bytes of dynamic shared memory, the
// device holds at once.
func (dev *Device) MaxActiveClusters(k Kernel, block, cluster [3]uint32, shmem uint32) (int, error) {
	if dev.d.cuOccupancyMaxActiveClusters == nil {
		return 0, errors.New("cuda: the driver library lacks cuOccupancyMaxActiveClusters")
	}
	attr := clusterAttr(cluster)
	cfg := &launchConfig{grid: cluster, block: block, shmem: shmem, stream: dev.stream, attrs: &attr, nattrs: 1}
	var n int32
	err := dev.do(func() error {
		return dev.d.check("cuOccupancyMaxActiveClusters", dev.d.cuOccupancyMaxActiveClusters(&n, k.fn, unsafe.Pointer(cfg)))
	})
	runtime.KeepAlive(cfg)
	runtime.KeepAlive(&attr)
	return int(n), err
}

// Clusters reports whether kernels can be launched as thread block
// clusters: sm_90 or later, and a driver with cuLaunchKernelEx.
func (dev *Device) Clusters() bool { return dev.Arch >= 90 && dev.d.launchExFn != 0 }

// FuncAttribute reads one of k's CUfunction_attribute values.
func (dev *Device) FuncAttribute(k Kernel, attr int32) (int, error) {
	var v int32
	err := dev.do(func() error { return dev.d.check("cuFuncGetAttribute", dev.d.cuFuncGetAttribute(&v, attr, k.fn)) })
	return int(v), err
}

// Compile builds CUDA C++ source with NVRTC for this device's architecture
// and loads the named extern "C" kernels.
func (dev *Device) Compile(src, name string, kernels ...string) (map[string]Kernel, error) {
	cache := defaultCubinCache()
	key := cubinKey(src, name, dev.Arch, dev.DriverVersion)
	if cubin := cache.get(key); cubin != nil {
		if ks, err := dev.load(cubin, name, kernels); err == nil {
			return ks, nil
		}
		cache.drop(key) // compile afresh below
	}
	n, err := loadNVRTC()
	if err != nil {
		return nil, err
	}
	cubin, err := n.compile(src, name, dev.Arch)
	if err != nil {
		return nil, err
	}
	ks, err := dev.load(cubin, name, kernels)
	if err == nil {
		cache.put(key, cubin)
	}
	return ks, err
}

// load loads a cubin and looks up the named kernels.
func (dev *Device) load(cubin []byte, name string, kernels []string) (map[string]Kernel, error) {
	out := map[string]Kernel{}
	err := dev.do(func() error {
		var mod uintptr
		if err := dev.d.check("cuModuleLoadData "+name, dev.d.cuModuleLoadData(&mod, unsafe.Pointer(&cubin[0]))); err != nil {
			return err
		}
		for _, k := range kernels {
			var fn uintptr
			if err := dev.d.check("cuModuleGetFunction "+k, dev.d.cuModuleGetFunction(&fn, mod, k)); err != nil {
				return err
			}
			out[k] = Kernel{fn, k, mod}
		}
		return nil
	})
	return out, err
}

// Launch runs k over grid × block threads. Arguments may be Buffers,
// int (passed as int32), int32, uint32, float32 or float64 (as float32).
func (dev *Device) Launch(k Kernel, grid, block [3]uint32, shmem uint32, args ...any) error {
	f, err := dev.launcher(k, grid, block, shmem, [3]uint32{}, args)
	if err != nil {
		return err
	}
	return dev.do(f)
}

// LaunchAsync queues the launch without waiting for the driver to accept
// it; a failure is reported by the next Sync or download. Launches and
// copies run in the order they are issued.
func (dev *Device) LaunchAsync(k Kernel, grid, block [3]uint32, shmem uint32, args ...any) error {
	f, err := dev.launcher(k, grid, block, shmem, [3]uint32{}, args)
	if err != nil {
		return err
	}
	dev.post(f)
	return nil
}

// LaunchClusterAsync is LaunchAsync with the grid's blocks in thread block
// clusters of the given dimensions (Clusters must report true).
func (dev *Device) LaunchClusterAsync(k Kernel, grid, block, cluster [3]uint32, shmem uint32, args ...any) error {
	if !dev.Clusters() {
		return fmt.Errorf("cuda: %s: this device cannot launch thread block clusters", k.name)
	}
	f, err := dev.launcher(k, grid, block, shmem, cluster, args)
	if err != nil {
		return err
	}
	dev.post(f)
	return nil
}

// postBatch is how many posted calls are handed to the device thread at
// once: one wake-up of that thread per batch instead of per kernel.
const postBatch = 32

// post runs f on the device's thread without waiting; the first error is
// kept for Sync or the next download. Posted calls run in order, before any
// later do.
func (dev *Device) post(f func() error) {
	if dev.closed.Load() {
		return
	}
	// dev.mu is held across taking a batch and sending it, so batches
	// (and the calls sent after a flush) reach the thread in issue order
	// even when several goroutines use the device.
	dev.mu.Lock()
	defer dev.mu.Unlock()
	dev.pending = append(dev.pending, f)
	if len(dev.pending) >= postBatch {
		dev.flushLocked()
	}
}

// flush hands the posted calls not yet sent to the device thread.
func (dev *Device) flush() {
	dev.mu.Lock()
	defer dev.mu.Unlock()
	dev.flushLocked()
}

func (dev *Device) flushLocked() {
	if dev.stopped { // the thread is gone: posted calls are dropped
		dev.pending = nil
		return
	}
	if batch := dev.pending; len(batch) > 0 {
		dev.pending = nil
		dev.work <- func() { dev.runAll(batch) }
	}
}

// send hands the posted calls and then f to the device's thread, in that
// order whatever other goroutines do. After Close has sent the thread its
// stop (a nil f) nothing more is sent, and send reports false: a call that
// raced Close fails instead of waiting forever for a thread that is gone.
func (dev *Device) send(f func()) bool {
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.stopped {
		return false
	}
	dev.flushLocked()
	dev.work <- f
	dev.stopped = f == nil
	return true
}

func (dev *Device) runAll(batch []func() error) {
	for _, f := range batch {
		dev.runCall(f)
	}
}

// programmaticLaunch launches every kernel with programmatic stream
// serialization (TANDEM_CUDA_PDL=1): the device may schedule a kernel's
// blocks while the kernel before it finishes, hiding the gap between
// kernels. Every kernel starts with pdl_start (kernels/*.cu), which waits
// for its predecessor before touching memory, so results cannot change.
// Off: on the H200 it sped decode up 1-8% but slowed the 31B shape's
// speculative round by 1.8 ms (docs/gpu.md).
var programmaticLaunch = os.Getenv("TANDEM_CUDA_PDL") == "1"

// pdlDecode launches the kernels of plain decode steps and of speculative
// rounds' verifies and drafts with programmatic stream serialization (the
// default; TANDEM_CUDA_PDL=verify leaves drafts out, =decode verifies too,
// =0 turns PDL off everywhere).
// Decode steps are issued one ahead of the device, so whatever PDL costs a
// graph launched onto an idle device stays off the critical path: on the
// H200 decode E2B +4.5%, 26B-A4B +4.7%, 31B +0.8%. A verify starts behind
// its round's drafts, and in the fourteenth to sixteenth sessions PDL took
// 0.12-0.18 ms off the 31B round at P = 0 (23.37-23.41 -> 23.23-23.26 ms)
// and 0.3 ms off the E2B round at P = 0.8 (6.10 -> 5.80 ms); in the sixth
// session, before kernels waited with pdl_start, it had cost 2 ms.
var pdlDecode = os.Getenv("TANDEM_CUDA_PDL") != "0" && os.Getenv("TANDEM_CUDA_PDL") != "1"

// pdlVerify adds a speculative round's verify (its parts too) to the sites
// pdlFor takes; TANDEM_CUDA_PDL=decode leaves it out.
var pdlVerify = os.Getenv("TANDEM_CUDA_PDL") != "decode"

// pdlDrafts adds the draft steps of a greedy round kept on the device,
// issued behind the last verify or ahead of it ("draft-at",
// "draft-ahead-at"; the engine's "draft-picks" steps gained nothing): on the H200
// (eighteenth session) the 31B round at P = 0 went 23.17-23.18 -> 23.06-23.09
// ms and E2B's 4.74 -> 4.61-4.63 ms, P = 0.8 unchanged. TANDEM_CUDA_PDL=verify
// leaves them out (=decode too).
var pdlDrafts = os.Getenv("TANDEM_CUDA_PDL") != "decode" && os.Getenv("TANDEM_CUDA_PDL") != "verify"

// pdlFor reports whether the kernels recorded for site are launched with
// programmatic stream serialization under pdlDecode: the plain decode step
// (generation's "decode"), a round's verify and a greedy round's drafts,
// not an engine step, nor a sampled step or sampled drafts (which start on
// an idle device).
func pdlFor(site string) bool {
	return site == "decode" || pdlVerify && strings.HasPrefix(site, "verify") ||
		pdlDrafts && (strings.HasPrefix(site, "draft-at") || strings.HasPrefix(site, "draft-ahead-at"))
}

// launchConfig is CUlaunchConfig (cuda.h), launchAttr CUlaunchAttribute: an
// id and a 64-byte value union.
type launchConfig struct {
	grid, block [3]uint32
	shmem       uint32
	_           uint32
	stream      uintptr
	attrs       *launchAttr
	nattrs      uint32
	_           uint32
}

type launchAttr struct {
	id    uint32
	_     uint32
	value [64]byte
}

// mixSig folds v into the FNV-1a-style hash h, a word at a time.
func mixSig(h, v uint64) uint64 { return (h ^ v) * 1099511628211 }

const fnvOffset = 14695981039346656037

// pdlAttr is CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6) with
// programmaticStreamSerializationAllowed = 1.
var pdlAttr = launchAttr{id: 6, value: [64]byte{1}}

// clusterAttr is CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (4) with the
// cluster's x, y and z.
func clusterAttr(c [3]uint32) launchAttr {
	a := launchAttr{id: 4}
	for i, v := range c {
		binary.LittleEndian.PutUint32(a.value[4*i:], v)
	}
	return a
}

// launcher returns the call that launches k; a cluster of zeros launches
// plain blocks.
func (dev *Device) launcher(k Kernel, grid, block [3]uint32, shmem uint32, cluster [3]uint32, args []any) (func() error, error) {
	// One 8-byte slot per argument and one array of pointers to the slots,
	// two allocations per launch, both made here so that the closure holds
	// them on the heap: Go's collector does not move heap objects, and the
	// closure keeps both alive until the driver has copied the arguments,
	// so no pinning is needed for the raw call. (The pointer array used to
	// be made inside the closure, where the compiler kept a short one on
	// the device thread's stack; a stack that grew or shrank before the
	// call left the driver reading the argument pointers from freed
	// memory: a SIGSEGV inside cuLaunchKernelEx, once in about twenty
	// engine suite runs on the H200.)
	vals := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case Buffer:
			vals[i] = uint64(v.ptr)
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("cuda: kernel argument %d (%d) does not fit an int32", i, v)
			}
			vals[i] = uint64(uint32(int32(v)))
		case int32:
			vals[i] = uint64(uint32(v))
		case uint32:
			vals[i] = uint64(v)
		case uint64: // an unsigned long long (or a double's bits)
			vals[i] = v
		case float32:
			vals[i] = uint64(math.Float32bits(v))
		case float64:
			vals[i] = uint64(math.Float32bits(float32(v)))
		case nil:
			vals[i] = 0 // a null pointer argument
		default:
			return nil, fmt.Errorf("cuda: kernel argument %d has unsupported type %T", i, a)
		}
	}
	// A recording's launches are compared step to step (graph.go).
	sum := mixSig(mixSig(mixSig(fnvOffset, uint64(k.fn)), uint64(grid[0])|uint64(grid[1])<<32),
		uint64(grid[2])|uint64(block[0])<<32|uint64(shmem)<<48)
	if cluster != [3]uint32{} {
		sum = mixSig(sum, uint64(cluster[0])|uint64(cluster[1])<<21|uint64(cluster[2])<<42)
	}
	for _, v := range vals {
		sum = mixSig(sum, v)
	}
	var params []uintptr
	if len(vals) > 0 {
		params = make([]uintptr, len(vals))
		for i := range vals {
			params[i] = uintptr(unsafe.Pointer(&vals[i]))
		}
	}
	sig := launchSig{k.name, sum}
	// Read at issue, not when the device thread runs the call: a test that
	// turns programmaticLaunch on for a few launches and off again would
	// otherwise race with the batched posts (and its launches run plain).
	pdl := programmaticLaunch
	// A cluster launch's attributes: PDL's, then the cluster's, so that the
	// cluster's alone are the last one (made only for cluster launches:
	// plain ones, nearly all, allocate nothing more).
	var clAttrs []launchAttr
	clustered := cluster != [3]uint32{}
	if clustered {
		clAttrs = []launchAttr{pdlAttr, clusterAttr(cluster)}
	}
	return func() error {
		withPDL := pdl || dev.pdlRec
		if rec := dev.graphs.rec; rec != nil {
			rec.sigs = append(rec.sigs, sig)
			rec.shape = mixSig(mixSig(rec.shape, uint64(k.fn)), launchShape(cluster, withPDL))
		}
		var pp uintptr // the heap array's address: stable, unlike a stack slot's
		if len(params) > 0 {
			pp = uintptr(unsafe.Pointer(&params[0]))
		}
		if dev.prof != nil && !dev.prof.graphs {
			defer dev.prof.around(dev.d, dev.stream, k.name)()
		}
		if clustered || withPDL && dev.d.launchExFn != 0 {
			cfg := &launchConfig{grid: grid, block: block, shmem: shmem, stream: dev.stream, attrs: &pdlAttr, nattrs: 1}
			switch {
			case clustered && withPDL:
				cfg.attrs, cfg.nattrs = &clAttrs[0], 2
			case clustered:
				cfg.attrs = &clAttrs[1]
			}
			r, _, _ := purego.SyscallN(dev.d.launchExFn, uintptr(unsafe.Pointer(cfg)), k.fn, pp, 0)
			runtime.KeepAlive(cfg)
			runtime.KeepAlive(clAttrs)
			runtime.KeepAlive(vals)
			runtime.KeepAlive(params)
			return dev.stamps.launched(k, launchErr(k, grid, block, cluster, shmem, dev.d.check("cuLaunchKernelEx", result(int32(r)))))
		}
		r, _, _ := purego.SyscallN(dev.d.launchFn, k.fn, uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
			uintptr(block[0]), uintptr(block[1]), uintptr(block[2]), uintptr(shmem), dev.stream, pp, 0)
		runtime.KeepAlive(vals)
		runtime.KeepAlive(params)
		return dev.stamps.launched(k, launchErr(k, grid, block, cluster, shmem, dev.d.check("cuLaunchKernel", result(int32(r)))))
	}, nil
}

// launchErr names the launch the driver refused, if it did: an
// asynchronous one is reported later, far from where it was issued.
func launchErr(k Kernel, grid, block, cluster [3]uint32, shmem uint32, err error) error {
	if err == nil {
		return nil
	}
	cl := ""
	if cluster != [3]uint32{} {
		cl = fmt.Sprintf(", clusters %v", cluster)
	}
	return fmt.Errorf("cuda: launch of %s (grid %v, block %v%s, %d bytes of dynamic shared memory): %w", k.name, grid, block, cl, shmem, err)
}

// wait waits for all work on the device, leaving an asynchronous failure
// for Sync or the next download to report.
func (dev *Device) wait() error {
	return dev.do(func() error { return dev.d.check("cuCtxSynchronize", dev.block(dev.d.cuCtxSynchronize)) })
}

// Sync waits for all work on the device.
func (dev *Device) Sync() error {
	return dev.do(func() error {
		if err := dev.takeAsyncErr(); err != nil {
			return err
		}
		return dev.d.check("cuCtxSynchronize", dev.block(dev.d.cuCtxSynchronize))
	})
}
