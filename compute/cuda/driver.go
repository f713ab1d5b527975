package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// result is a CUresult.
type result int32

// driverAPI holds the driver functions Tandem calls.
type driverAPI struct {
	cuInit                   func(flags uint32) result
	cuDriverGetVersion       func(v *int32) result
	cuDeviceGetCount         func(n *int32) result
	cuDeviceGet              func(dev *int32, ordinal int32) result
	cuDeviceGetName          func(name *byte, n int32, dev int32) result
	cuDeviceGetAttribute     func(v *int32, attrib int32, dev int32) result
	cuDevicePrimaryCtxRetain func(ctx *uintptr, dev int32) result
	cuCtxSetCurrent          func(ctx uintptr) result
	cuCtxSynchronize         func() result
	cuMemAlloc               func(p *uintptr, n uint64) result
	cuMemFree                func(p uintptr) result
	cuMemcpyHtoD             func(dst uintptr, src unsafe.Pointer, n uint64) result
	cuMemcpyDtoH             func(dst unsafe.Pointer, src uintptr, n uint64) result
	cuMemGetInfo             func(free, total *uint64) result
	cuMemsetD8Async          func(dst uintptr, v uint8, n uint64, stream uintptr) result
	cuMemAllocHost           func(p *unsafe.Pointer, n uint64) result
	cuMemFreeHost            func(p unsafe.Pointer) result
	cuMemcpyHtoDAsync        func(dst uintptr, src unsafe.Pointer, n uint64, stream uintptr) result
	cuMemcpyDtoD             func(dst, src uintptr, n uint64) result
	cuMemcpyDtoDAsync        func(dst, src uintptr, n uint64, stream uintptr) result
	cuMemcpyDtoHAsync        func(dst unsafe.Pointer, src uintptr, n uint64, stream uintptr) result
	cuModuleLoadData         func(mod *uintptr, image unsafe.Pointer) result
	cuModuleGetFunction      func(fn *uintptr, mod uintptr, name string) result
	cuLaunchKernel           func(f uintptr, gx, gy, gz, bx, by, bz, shmem uint32, stream uintptr, params, extra unsafe.Pointer) result
	cuGetErrorString         func(r result, s **byte) result
	cuFuncGetAttribute       func(v *int32, attrib int32, fn uintptr) result
	cuFuncSetAttribute       func(fn uintptr, attrib int32, v int32) result // optional: nil where the driver lacks it
	// optional: nil where the driver lacks it (CUDA 12+)
	cuOccupancyMaxActiveClusters func(n *int32, fn uintptr, cfg unsafe.Pointer) result
	cuModuleGetGlobal            func(ptr *uintptr, bytes *uint64, mod uintptr, name string) result
	cuEventCreate                func(ev *uintptr, flags uint32) result
	cuEventRecord                func(ev, stream uintptr) result
	cuEventElapsedTime           func(ms *float32, start, end uintptr) result
	cuEventDestroy               func(ev uintptr) result
	cuEventSynchronize           func(ev uintptr) result
	// Graphs (optional: nil when the driver lacks them).
	cuStreamCreate              func(s *uintptr, flags uint32) result
	cuStreamBeginCapture        func(s uintptr, mode int32) result
	cuStreamEndCapture          func(s uintptr, g *uintptr) result
	cuGraphInstantiateWithFlags func(exec *uintptr, g uintptr, flags uint64) result
	cuGraphExecUpdate           func(exec, g uintptr, info unsafe.Pointer) result
	cuGraphLaunch               func(exec, s uintptr) result
	cuGraphDestroy              func(g uintptr) result
	cuGraphExecDestroy          func(exec uintptr) result
	graphs                      bool // every graph call above resolved
	// launchFn is cuLaunchKernel's address, called through SyscallN on the
	// hot path (RegisterLibFunc's reflection costs microseconds per call).
	launchFn uintptr
	// launchExFn is cuLaunchKernelEx's (CUDA 12+; zero where the driver
	// lacks it), for launches with attributes.
	launchExFn uintptr
}

const (
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	attrMultiprocessorCount    = 16
)

var (
	driverOnce sync.Once
	driver     *driverAPI
	driverErr  error
)

// loadDriver opens libcuda and resolves the driver API once per process.
func loadDriver() (*driverAPI, error) {
	driverOnce.Do(func() {
		h, err := openLib("the CUDA driver library", "libcuda.so.1", "libcuda.so")
		if err != nil {
			driverErr = fmt.Errorf("%w: %v", ErrNoDriver, err)
			return
		}
		d := &driverAPI{}
		for name, fn := range map[string]any{
			"cuInit": &d.cuInit, "cuDriverGetVersion": &d.cuDriverGetVersion,
			"cuDeviceGetCount": &d.cuDeviceGetCount, "cuDeviceGet": &d.cuDeviceGet,
			"cuDeviceGetName": &d.cuDeviceGetName, "cuDeviceGetAttribute": &d.cuDeviceGetAttribute,
			"cuDevicePrimaryCtxRetain": &d.cuDevicePrimaryCtxRetain, "cuCtxSetCurrent": &d.cuCtxSetCurrent,
			"cuCtxSynchronize": &d.cuCtxSynchronize, "cuMemAlloc_v2": &d.cuMemAlloc, "cuMemFree_v2": &d.cuMemFree,
			"cuMemcpyHtoD_v2": &d.cuMemcpyHtoD, "cuMemcpyDtoH_v2": &d.cuMemcpyDtoH, "cuMemGetInfo_v2": &d.cuMemGetInfo,
			"cuMemAllocHost_v2": &d.cuMemAllocHost, "cuMemFreeHost": &d.cuMemFreeHost, "cuMemcpyHtoDAsync_v2": &d.cuMemcpyHtoDAsync, "cuMemcpyDtoD_v2": &d.cuMemcpyDtoD,
			"cuMemcpyDtoDAsync_v2": &d.cuMemcpyDtoDAsync, "cuMemsetD8Async": &d.cuMemsetD8Async,
			"cuModuleLoadData": &d.cuModuleLoadData, "cuModuleGetFunction": &d.cuModuleGetFunction,
			"cuLaunchKernel": &d.cuLaunchKernel, "cuGetErrorString": &d.cuGetErrorString,
			"cuFuncGetAttribute": &d.cuFuncGetAttribute, "cuEventCreate": &d.cuEventCreate, "cuEventRecord": &d.cuEventRecord,
			"cuEventDestroy_v2": &d.cuEventDestroy, "cuEventSynchronize": &d.cuEventSynchronize,
			"cuMemcpyDtoHAsync_v2": &d.cuMemcpyDtoHAsync,
		} {
			if _, err := purego.Dlsym(h, name); err != nil {
				driverErr = fmt.Errorf("cuda: the driver library lacks %s: %v", name, err)
				return
			}
			purego.RegisterLibFunc(fn, h, name)
		}
		d.graphs = true
		for name, fn := range map[string]any{
			"cuStreamCreate": &d.cuStreamCreate, "cuStreamBeginCapture_v2": &d.cuStreamBeginCapture,
			"cuStreamEndCapture": &d.cuStreamEndCapture, "cuGraphInstantiateWithFlags": &d.cuGraphInstantiateWithFlags,
			"cuGraphExecUpdate_v2": &d.cuGraphExecUpdate, "cuGraphLaunch": &d.cuGraphLaunch,
			"cuGraphDestroy": &d.cuGraphDestroy, "cuGraphExecDestroy": &d.cuGraphExecDestroy,
		} {
			if _, err := purego.Dlsym(h, name); err != nil {
				d.graphs = false
				continue
			}
			purego.RegisterLibFunc(fn, h, name)
		}
		for name, fn := range map[string]any{"cuFuncSetAttribute": &d.cuFuncSetAttribute,
			"cuOccupancyMaxActiveClusters": &d.cuOccupancyMaxActiveClusters, "cuModuleGetGlobal_v2": &d.cuModuleGetGlobal} {
			if _, err := purego.Dlsym(h, name); err == nil {
				purego.RegisterLibFunc(fn, h, name)
			}
		}
		// Newer drivers export the timing call with a _v2 suffix as well.
		for _, name := range []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"} {
			if _, err := purego.Dlsym(h, name); err == nil {
				purego.RegisterLibFunc(&d.cuEventElapsedTime, h, name)
				break
			}
		}
		if r := d.cuInit(0); r != 0 {
			driverErr = fmt.Errorf("cuda: cuInit: %s", d.errorString(r))
			return
		}
		if d.launchFn, err = purego.Dlsym(h, "cuLaunchKernel"); err != nil {
			driverErr = fmt.Errorf("cuda: the driver library lacks cuLaunchKernel: %v", err)
			return
		}
		d.launchExFn, _ = purego.Dlsym(h, "cuLaunchKernelEx")
		driver = d
	})
	return driver, driverErr
}

func (d *driverAPI) errorString(r result) string {
	var s *byte
	if d.cuGetErrorString(r, &s) != 0 || s == nil {
		return fmt.Sprintf("CUDA error %d", r)
	}
	return fmt.Sprintf("%s (CUDA error %d)", goString(s), r)
}

// check turns a CUresult into an error naming the call.
func (d *driverAPI) check(call string, r result) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s", call, d.errorString(r))
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for ptr := unsafe.Pointer(p); *(*byte)(ptr) != 0; ptr = unsafe.Add(ptr, 1) {
		b = append(b, *(*byte)(ptr))
	}
	return string(b)
}
