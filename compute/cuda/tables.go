package cuda

import (
	"hash/maphash"
	"slices"
	"sync"
	"unsafe"

	"tandem/compute"
)

// tableMemoSize is how many uploaded index tables are kept for reuse: a
// step uses a few shared by its layers (the positions, each kind of
// layer's attention order) and, with several rows, a table of the rows'
// caches a layer (kvRows), which stay across steps only while a step's
// tables fit; a lookup is a scan of 64-bit sums.
const tableMemoSize = 64

// tableMemo keeps the small index tables ops uploaded most recently
// (positions for RoPE, attention's slot order), so the next op with the
// same table reuses it. A step's layers share a handful of distinct tables,
// so a step queues a few host-to-device copies instead of five a layer: in
// a CUDA graph each copy node left the SMs idle around it. Tables are
// never written after their upload. An evicted table is only dropped: it
// returns to the pool when no tensor refers to it, and the pool hands its
// memory to work queued after the launches that read it. (Callers pass
// ptrOf(b.table(…)) straight to a launch; a collection in between would
// need another goroutine to evict 64 tables in that instant.)
type tableMemo struct {
	mu      sync.Mutex
	seed    maphash.Seed
	entries []tableEntry // least recently used first
}

type tableEntry struct {
	sum  uint64
	host []int32
	t    *compute.Tensor
}

// table returns xs on the device, uploaded now or found in the memo. The
// caller must not recycle it.
func (b *Backend) table(xs []int32) *compute.Tensor {
	m := &b.tables
	m.mu.Lock()
	defer m.mu.Unlock()
	sum := maphash.Bytes(m.seed, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(xs))), 4*len(xs)))
	for i, e := range m.entries {
		if e.sum == sum && slices.Equal(e.host, xs) {
			copy(m.entries[i:], m.entries[i+1:]) // most recently used last, in place
			m.entries[len(m.entries)-1] = e
			return e.t
		}
	}
	t := b.ints(xs)
	if len(m.entries) == tableMemoSize {
		m.entries[0] = tableEntry{}
		m.entries = append(m.entries[:0], m.entries[1:]...)
	}
	m.entries = append(m.entries, tableEntry{sum: sum, host: slices.Clone(xs), t: t})
	return t
}

// kvRows is the device table of rows' caches that the attention and
// qkv_norms kernels take (kvp in ops.cu): each row's key and value
// addresses, each address two int32 words, low first (the GPU is
// little-endian; every allocation starts on 8 bytes). A step's layers each
// have their own, the same every step until a cache grows. They go through
// the memo of 64 (a memo of 256 that kept them across steps coincided with
// a failure under graphs that is not yet understood; docs/gpu.md).
func (b *Backend) kvRows(rows []compute.AttentionRow) *compute.Tensor {
	words := make([]int32, 0, 4*len(rows))
	for _, r := range rows {
		for _, t := range []*compute.Tensor{r.K, r.V} {
			p := uint64(ptrOf(t).ptr)
			words = append(words, int32(uint32(p)), int32(uint32(p>>32)))
		}
	}
	return b.table(words)
}

// at is a view of buf from element i of 4-byte elements on.
func at(buf Buffer, i int) Buffer {
	return Buffer{ptr: buf.ptr + uintptr(4*i), Size: buf.Size - 4*i}
}
