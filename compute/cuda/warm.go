package cuda

import (
	"log/slog"

	"tandem/compute"
)

// warmL2MiB is how many MiB of the next product's weights WarmL2 asks L2
// for (TANDEM_CUDA_WARM_L2; live; 0, the default, asks for none). A 31B
// decode step spends about 3 ms of its 19.6 in norms and attention, with
// the memory bus nearly idle; the product after them could find its
// first megabytes in L2 (50 MB on the H200) instead of HBM; past about
// 32 MiB the prefetches would evict each other. Written in the fifteenth
// session without a GPU: not yet measured.
var warmL2MiB int // read by liveSettings

// compileWarm compiles l2_warm (kernels/warm.cu) apart from the other
// kernels, so that a driver or compiler without the bulk prefetch costs
// only WarmL2, not New.
func (b *Backend) compileWarm() {
	ks, err := b.dev.Compile(warmSource, "warm.cu", kernelNames["warm.cu"]...)
	if err != nil {
		slog.Warn("cuda: l2_warm did not compile; TANDEM_CUDA_WARM_L2 will do nothing", "err", err)
		return
	}
	for n, k := range ks {
		b.k[n] = k
	}
}

// WarmL2 implements compute.L2Warmer: l2_warm asks L2 for the first bytes
// of each of ws (model weights only: an activation is not written yet),
// warmL2MiB in all, shared between them.
func (b *Backend) WarmL2(ws ...*compute.Tensor) {
	if warmL2MiB == 0 || dropped["l2_warm"] {
		return
	}
	k, ok := b.k["l2_warm"]
	if !ok {
		return
	}
	var weights []*compute.Tensor
	for _, w := range ws {
		if w != nil && isWeight(w) {
			weights = append(weights, w)
		}
	}
	if len(weights) == 0 {
		return
	}
	per := (warmL2MiB << 20) / len(weights)
	for _, w := range weights {
		m := memOf(w)
		p := (m.ptr + 15) &^ 15
		n := min(w.Len()*w.DType().Size()-int(p-m.ptr), per) &^ 15
		if n <= 0 {
			continue
		}
		pieces := (n + warmPiece - 1) / warmPiece
		blocks := (pieces + 255) / 256
		if err := b.dev.LaunchAsync(k, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{256, 1, 1}, 0, Buffer{ptr: p, Size: n}, uint64(n)); err != nil {
			panic(err)
		}
		b.warmN++
	}
}

// warmPiece is WARM_PIECE in warm.cu: the bytes one prefetch asks for.
const warmPiece = 32768
