package cuda

import (
	"hash/maphash"
	"slices"
	"sync"
	"unsafe"

	"tandem/compute"
)

// tableMemoSize is how many uploaded index tables are kept for reuse: a
// step of B rows uses about 2B + 1 (each row's sliding and full attention
// order, the positions), and with several rows a table of the rows' caches
// a layer (kvRows), which this keeps uploaded across steps; a lookup is a
// hash of the contents and a map lookup.
const tableMemoSize = 256

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
	entries map[uint64][]*tableEntry // by the contents' sum
	n       int                      // tables held
	clock   uint64                   // counts lookups: each entry's last use
}

type tableEntry struct {
	host []int32
	t    *compute.Tensor
	used uint64
}

// table returns xs on the device, uploaded now or found in the memo. The
// caller must not recycle it. A hit costs a hash and a map lookup; a miss
// in a full memo scans it for the least recently used table.
func (b *Backend) table(xs []int32) *compute.Tensor {
	m := &b.tables
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clock++
	sum := maphash.Bytes(m.seed, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(xs))), 4*len(xs)))
	for _, e := range m.entries[sum] {
		if slices.Equal(e.host, xs) {
			e.used = m.clock
			return e.t
		}
	}
	t := b.ints(xs)
	if m.entries == nil {
		m.entries = map[uint64][]*tableEntry{}
	}
	if m.n == tableMemoSize {
		m.evictOldest()
	}
	m.entries[sum] = append(m.entries[sum], &tableEntry{host: slices.Clone(xs), t: t, used: m.clock})
	m.n++
	return t
}

// evictOldest drops the least recently used table.
func (m *tableMemo) evictOldest() {
	var oldSum uint64
	oldest := -1
	for sum, es := range m.entries {
		for i, e := range es {
			if oldest < 0 || e.used < m.entries[oldSum][oldest].used {
				oldSum, oldest = sum, i
			}
		}
	}
	if oldest < 0 {
		return
	}
	es := m.entries[oldSum]
	if es = slices.Delete(es, oldest, oldest+1); len(es) == 0 {
		delete(m.entries, oldSum)
	} else {
		m.entries[oldSum] = es
	}
	m.n--
}

// kvRows is the device table of rows' caches that the attention and
// qkv_norms kernels take (kvp in ops.cu): each row's key and value
// addresses, each address two int32 words, low first (the GPU is
// little-endian; every allocation starts on 8 bytes). A step's layers each
// have their own, the same every step until a cache grows, so the memo
// keeps them. (A hit records no upload node, so a step's recording can have
// another model's topology under the same site name; graph.go instantiates
// a site again when its launches' shapes change, which TestGraphsFollowClusterSizes
// pins.)
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
