package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"tandem/compute"
	"tandem/compute/cpu"
	"tandem/compute/cuda"
)

// openBackend selects the compute backend. auto takes the GPU when a CUDA
// driver is present and the CPU otherwise.
func openBackend(device string, threads int) (compute.Backend, error) {
	switch device {
	case "cpu":
		return cpu.New(threads), nil
	case "auto":
		b, err := cuda.New(0)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, cuda.ErrNoDriver) {
			slog.Warn("a CUDA driver is present but the GPU could not be used; running on the CPU", "err", err)
		}
		return cpu.New(threads), nil
	case "cuda":
		b, err := cuda.New(0)
		if err != nil {
			return nil, fmt.Errorf("--device cuda: %w (use --device cpu to run on the CPU)", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("--device %q: want auto, cpu or cuda", device)
}

// copyBandwidth measures the roofline's memory bandwidth on b's device:
// memcpy on the CPU, a device-to-device copy on the GPU (bytes read plus
// bytes written per second).
func copyBandwidth(b compute.Backend) float64 {
	if g, ok := b.(*cuda.Backend); ok {
		if bw, err := g.CopyBandwidth(); err == nil {
			return bw
		}
	}
	return cpu.CopyBandwidth()
}

// deviceName describes b's device for reports: the GPU's name, compute
// capability and driver, or the CPU's thread count.
func deviceName(b compute.Backend) string {
	switch g := b.(type) {
	case *cuda.Backend:
		d := g.Device()
		return fmt.Sprintf("cuda (%s, sm_%d, driver %d)", d.Name, d.Arch, d.DriverVersion)
	case *cpu.Backend:
		return fmt.Sprintf("cpu (%d threads)", g.Threads())
	}
	return b.Name()
}

// bf16Peaks are the dense bf16 tensor-core peaks (FLOP/s, without
// sparsity; NVIDIA's datasheets) of the GPUs bench knows by name, the more
// specific names first. A MIG slice or a cut-down part reports its
// whole part's name, so its share reads low: --bf16-peak corrects it.
var bf16Peaks = []struct {
	name  string
	flops float64
}{
	{"H100 PCIe", 756.5e12},
	{"H100 NVL", 835.5e12},
	{"H100", 989.5e12},
	{"H200 NVL", 835.5e12},
	{"GH200", 989.5e12},
	{"H200", 989.5e12},
	{"A100", 312e12},
}

// bf16Peak is b's dense bf16 tensor-core peak in FLOP/s where bench knows
// its GPU (0 on the CPU or an unknown GPU).
func bf16Peak(b compute.Backend) float64 {
	if g, ok := b.(*cuda.Backend); ok {
		return peakByName(g.Device().Name)
	}
	return 0
}

// peakByName is the peak of the first of bf16Peaks in the device's name.
func peakByName(name string) float64 {
	for _, p := range bf16Peaks {
		if strings.Contains(name, p.name) {
			return p.flops
		}
	}
	return 0
}
