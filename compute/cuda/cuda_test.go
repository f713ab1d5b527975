package cuda

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// openOrSkip opens device 0, skipping the test where no driver exists (CI).
func openOrSkip(t *testing.T) *Device {
	t.Helper()
	dev, err := Open(0)
	if errors.Is(err, ErrNoDriver) {
		t.Skipf("no GPU here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.Close)
	return dev
}

func TestOpenWithoutDriverIsAClearError(t *testing.T) {
	dev, err := Open(0)
	if err == nil {
		dev.Close()
		t.Skip("a CUDA driver is present")
	}
	if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "libcuda.so.1") || !strings.Contains(err.Error(), LibDirEnv) {
		t.Fatalf("error %q should wrap ErrNoDriver and name libcuda.so.1 and %s", err, LibDirEnv)
	}
}

const addSrc = `extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) c[i] = a[i] + b[i];
}`

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestVectorAddThroughNVRTC(t *testing.T) {
	dev := openOrSkip(t)
	free, total, err := dev.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s, sm_%d, driver %d, %.1f of %.1f GiB free", dev.Name, dev.Arch, dev.DriverVersion, gib(free), gib(total))
	ks, err := dev.Compile(addSrc, "add.cu", "add")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100003
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i), float32(2*i)+0.5
	}
	bufs := make([]Buffer, 3)
	for i := range bufs {
		if bufs[i], err = dev.Alloc(4 * n); err != nil {
			t.Fatal(err)
		}
		defer dev.Free(bufs[i])
	}
	if err := dev.Upload(bufs[0], f32bytes(a)); err != nil {
		t.Fatal(err)
	}
	if err := dev.Upload(bufs[1], f32bytes(b)); err != nil {
		t.Fatal(err)
	}
	if err := dev.Launch(ks["add"], [3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, bufs[0], bufs[1], bufs[2], n); err != nil {
		t.Fatal(err)
	}
	if err := dev.Sync(); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*n)
	if err := dev.Download(out, bufs[2]); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); got != a[i]+b[i] {
			t.Fatalf("c[%d] = %v, want %v", i, got, a[i]+b[i])
		}
	}
}

func TestCompileErrorCarriesTheLog(t *testing.T) {
	dev := openOrSkip(t)
	_, err := dev.Compile(`extern "C" __global__ void broken( { }`, "broken.cu", "broken")
	if err == nil || !strings.Contains(err.Error(), "broken.cu") {
		t.Fatalf("error %v should name the file and carry NVRTC's log", err)
	}
}

func TestOutOfMemoryIsAClearError(t *testing.T) {
	dev := openOrSkip(t)
	_, err := dev.Alloc(1 << 50)
	if err == nil || !strings.Contains(err.Error(), "GiB free") {
		t.Fatalf("error %v should say how much was asked and what is free", err)
	}
}
