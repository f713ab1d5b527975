package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
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
	Arch          int   // compute capability, e.g. 90 for sm_90
	DriverVersion int   // e.g. 13000
	asyncErr      error // first failure of an asynchronous call; device thread only
	closed        atomic.Bool
}

// Open makes device ordinal's primary context current on a dedicated,
// locked thread. Without a driver it returns an error wrapping ErrNoDriver.
func Open(ordinal int) (*Device, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	dev := &Device{d: d, work: make(chan func())}
	ready := make(chan error)
	go dev.loop(ordinal, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
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
		d.cuDriverGetVersion(&v)
		dev.DriverVersion = int(v)
		if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&dev.ctx, h)); err != nil {
			return err
		}
		return d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(dev.ctx))
	}()
	ready <- err
	if err != nil {
		return
	}
	for f := range dev.work {
		if f == nil {
			return
		}
		f()
	}
}

// do runs f on the device's thread.
func (dev *Device) do(f func() error) error {
	if dev.closed.Load() {
		return errClosed
	}
	done := make(chan error, 1)
	dev.work <- func() { done <- f() }
	return <-done
}

var errClosed = errors.New("cuda: the device is closed")

// Close stops the device's thread; later calls fail (cleanups of tensors
// that outlive the device become no-ops).
func (dev *Device) Close() {
	if dev.closed.CompareAndSwap(false, true) {
		dev.work <- nil
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
	err := dev.do(func() error {
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

// Download copies b into dst.
func (dev *Device) Download(dst []byte, b Buffer) error {
	if len(dst) > b.Size {
		return fmt.Errorf("cuda: download of %d bytes from a %d-byte buffer", len(dst), b.Size)
	}
	if len(dst) == 0 {
		return nil
	}
	return dev.do(func() error {
		return dev.d.check("cuMemcpyDtoH", dev.d.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), b.ptr, uint64(len(dst))))
	})
}

// Kernel is a compiled __global__ function.
type Kernel struct{ fn uintptr }

// Compile builds CUDA C++ source with NVRTC for this device's architecture
// and loads the named extern "C" kernels.
func (dev *Device) Compile(src, name string, kernels ...string) (map[string]Kernel, error) {
	n, err := loadNVRTC()
	if err != nil {
		return nil, err
	}
	cubin, err := n.compile(src, name, dev.Arch)
	if err != nil {
		return nil, err
	}
	out := map[string]Kernel{}
	err = dev.do(func() error {
		var mod uintptr
		if err := dev.d.check("cuModuleLoadData "+name, dev.d.cuModuleLoadData(&mod, unsafe.Pointer(&cubin[0]))); err != nil {
			return err
		}
		for _, k := range kernels {
			var fn uintptr
			if err := dev.d.check("cuModuleGetFunction "+k, dev.d.cuModuleGetFunction(&fn, mod, k)); err != nil {
				return err
			}
			out[k] = Kernel{fn}
		}
		return nil
	})
	return out, err
}

// Launch runs k over grid × block threads. Arguments may be Buffers,
// int (passed as int32), int32, uint32, float32 or float64 (as float32).
func (dev *Device) Launch(k Kernel, grid, block [3]uint32, shmem uint32, args ...any) error {
	f, err := dev.launcher(k, grid, block, shmem, args)
	if err != nil {
		return err
	}
	return dev.do(f)
}

// LaunchAsync queues the launch without waiting for the driver to accept
// it; a failure is reported by the next Sync. Launches and copies run in
// the order they are issued.
func (dev *Device) LaunchAsync(k Kernel, grid, block [3]uint32, shmem uint32, args ...any) error {
	f, err := dev.launcher(k, grid, block, shmem, args)
	if err != nil {
		return err
	}
	dev.post(f)
	return nil
}

// post runs f on the device's thread without waiting; the first error is
// kept for Sync.
func (dev *Device) post(f func() error) {
	if dev.closed.Load() {
		return
	}
	dev.work <- func() {
		if err := f(); err != nil && dev.asyncErr == nil {
			dev.asyncErr = err
		}
	}
}

func (dev *Device) launcher(k Kernel, grid, block [3]uint32, shmem uint32, args []any) (func() error, error) {
	params := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case Buffer:
			p := new(uintptr)
			*p = v.ptr
			params[i] = unsafe.Pointer(p)
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("cuda: kernel argument %d (%d) does not fit an int32", i, v)
			}
			p := new(int32)
			*p = int32(v)
			params[i] = unsafe.Pointer(p)
		case int32:
			p := new(int32)
			*p = v
			params[i] = unsafe.Pointer(p)
		case uint32:
			p := new(uint32)
			*p = v
			params[i] = unsafe.Pointer(p)
		case float32:
			p := new(float32)
			*p = v
			params[i] = unsafe.Pointer(p)
		case float64:
			p := new(float32)
			*p = float32(v)
			params[i] = unsafe.Pointer(p)
		case nil:
			params[i] = unsafe.Pointer(new(uintptr)) // a null pointer argument
		default:
			return nil, fmt.Errorf("cuda: kernel argument %d has unsupported type %T", i, a)
		}
	}
	return func() error {
		var pin runtime.Pinner
		defer pin.Unpin()
		var pp unsafe.Pointer
		if len(params) > 0 {
			for _, p := range params {
				pin.Pin(p)
			}
			pin.Pin(&params[0])
			pp = unsafe.Pointer(&params[0])
		}
		return dev.d.check("cuLaunchKernel", dev.d.cuLaunchKernel(k.fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem, 0, pp, nil))
	}, nil
}

// Sync waits for all work on the device.
func (dev *Device) Sync() error {
	return dev.do(func() error {
		if err := dev.asyncErr; err != nil {
			dev.asyncErr = nil
			return err
		}
		return dev.d.check("cuCtxSynchronize", dev.d.cuCtxSynchronize())
	})
}
