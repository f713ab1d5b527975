package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// nvrtcAPI holds the NVRTC functions that compile Tandem's kernels.
type nvrtcAPI struct {
	nvrtcVersion           func(major, minor *int32) int32
	nvrtcCreateProgram     func(prog *uintptr, src, name string, numHeaders int32, headers, includeNames unsafe.Pointer) int32
	nvrtcCompileProgram    func(prog uintptr, numOptions int32, options unsafe.Pointer) int32
	nvrtcGetCUBINSize      func(prog uintptr, n *uint64) int32
	nvrtcGetCUBIN          func(prog uintptr, cubin *byte) int32
	nvrtcGetProgramLogSize func(prog uintptr, n *uint64) int32
	nvrtcGetProgramLog     func(prog uintptr, log *byte) int32
	nvrtcDestroyProgram    func(prog *uintptr) int32
	nvrtcGetErrorString    func(r int32) *byte
}

var (
	nvrtcOnce sync.Once
	nvrtc     *nvrtcAPI
	nvrtcErr  error
)

func loadNVRTC() (*nvrtcAPI, error) {
	nvrtcOnce.Do(func() {
		h, err := openLib("NVRTC", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
		if err != nil {
			nvrtcErr = err
			return
		}
		n := &nvrtcAPI{}
		for name, fn := range map[string]any{
			"nvrtcVersion": &n.nvrtcVersion, "nvrtcCreateProgram": &n.nvrtcCreateProgram,
			"nvrtcCompileProgram": &n.nvrtcCompileProgram, "nvrtcGetCUBINSize": &n.nvrtcGetCUBINSize,
			"nvrtcGetCUBIN": &n.nvrtcGetCUBIN, "nvrtcGetProgramLogSize": &n.nvrtcGetProgramLogSize,
			"nvrtcGetProgramLog": &n.nvrtcGetProgramLog, "nvrtcDestroyProgram": &n.nvrtcDestroyProgram,
			"nvrtcGetErrorString": &n.nvrtcGetErrorString,
		} {
			if _, err := purego.Dlsym(h, name); err != nil {
				nvrtcErr = fmt.Errorf("cuda: NVRTC lacks %s: %v", name, err)
				return
			}
			purego.RegisterLibFunc(fn, h, name)
		}
		nvrtc = n
	})
	return nvrtc, nvrtcErr
}

// compile turns CUDA C++ source into a cubin for sm_<arch>. Compile errors
// come back with NVRTC's log.
func (n *nvrtcAPI) compile(src, name string, arch int) ([]byte, error) {
	var prog uintptr
	if r := n.nvrtcCreateProgram(&prog, src, name, 0, nil, nil); r != 0 {
		return nil, fmt.Errorf("cuda: nvrtcCreateProgram %s: %s", name, goString(n.nvrtcGetErrorString(r)))
	}
	defer n.nvrtcDestroyProgram(&prog)
	opts := []string{fmt.Sprintf("--gpu-architecture=sm_%d", arch), "--std=c++17"}
	cstrs := make([][]byte, len(opts))
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		cstrs[i] = append([]byte(o), 0)
		ptrs[i] = &cstrs[i][0]
	}
	var pin runtime.Pinner
	for _, p := range ptrs {
		pin.Pin(p)
	}
	r := n.nvrtcCompileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0]))
	pin.Unpin()
	if r != 0 {
		var size uint64
		n.nvrtcGetProgramLogSize(prog, &size)
		log := make([]byte, size+1)
		n.nvrtcGetProgramLog(prog, &log[0])
		return nil, fmt.Errorf("cuda: compiling %s for sm_%d: %s\n%s", name, arch, goString(n.nvrtcGetErrorString(r)), goString(&log[0]))
	}
	var size uint64
	if r := n.nvrtcGetCUBINSize(prog, &size); r != 0 || size == 0 {
		return nil, fmt.Errorf("cuda: nvrtcGetCUBINSize %s: %s", name, goString(n.nvrtcGetErrorString(r)))
	}
	cubin := make([]byte, size)
	if r := n.nvrtcGetCUBIN(prog, &cubin[0]); r != 0 {
		return nil, fmt.Errorf("cuda: nvrtcGetCUBIN %s: %s", name, goString(n.nvrtcGetErrorString(r)))
	}
	return cubin, nil
}
