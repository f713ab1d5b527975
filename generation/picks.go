package generation

import (
	"math"

	"tandem/compute"
)

// Picks are the device's picks of a step's logits rows, TopK 1 (the
// maximum, lowest index on ties, as sample.Argmax; a NaN wins), on their
// way to the host. Idx ([rows] I32) stays on the device to feed the next
// step (gemma4.Row.Next) before the host has read it. Read must be called
// once: it waits for the readbacks and frees them.
type Picks struct {
	Logits, Idx *compute.Tensor
	val, which  func() []uint32
	read        bool
}

// PickOnDevice picks logits' rows on the device and starts reading the
// picks back.
func PickOnDevice(b compute.Backend, pf compute.Prefetcher, logits *compute.Tensor) *Picks {
	v, i := b.TopK(logits, 1)
	return &Picks{Logits: logits, Idx: i.Reshape(i.Len()), val: pf.Prefetch(v), which: pf.Prefetch(i)}
}

// Read waits for the picks: each row's maximum (NaN where the row holds
// one) and its index.
func (p *Picks) Read() (vals []float32, toks []int32) {
	p.read = true
	bits, ids := p.val(), p.which()
	for j := range bits {
		vals = append(vals, math.Float32frombits(bits[j]))
		toks = append(toks, int32(ids[j]))
	}
	return vals, toks
}

// Pending reports whether Read is still to be called.
func (p *Picks) Pending() bool { return !p.read }
