package compute

import (
	"fmt"
	"math"
)

// Backend is the op set the model code is written against. Activations are
// F32; weights may be F32, BF16 or F16 and are widened inside the ops.
//
// Shapes: a "row" is a vector along the last dimension. Ops that take a
// [..., D] tensor treat it as Rows() rows of D values. Every op computes each
// row (and, for attention, each query) with the same sequence of floating-
// point operations whatever the number of rows in the call: results are
// batch-invariant bit for bit.
//
// Ops return new tensors. Misuse by model code (mismatched shapes, wrong
// dtypes) panics: it is a programming error, never a consequence of user
// input, which is validated where it enters (config and checkpoint loading,
// request parsing).
type Backend interface {
	// Name identifies the backend ("cpu", "cuda").
	Name() string

	// Zeros allocates a zero-filled tensor.
	Zeros(dt DType, shape ...int) *Tensor
	// FromF32 and FromI32 copy host data into a new tensor.
	FromF32(data []float32, shape ...int) *Tensor
	FromI32(data []int32, shape ...int) *Tensor
	// Weight makes a read-only tensor from stored little-endian bytes, such
	// as a memory-mapped checkpoint tensor. The CPU backend uses the bytes in
	// place when they are aligned; raw must then outlive the tensor.
	Weight(dt DType, shape []int, raw []byte) (*Tensor, error)
	// ToF32 copies a float tensor to the host, widening BF16/F16.
	ToF32(t *Tensor) []float32
	// ToI32 copies an I32 tensor to the host.
	ToI32(t *Tensor) []int32

	// Index returns the view t[i] along the first dimension (an expert's
	// weights in a stacked [E, N, K] tensor, a batch row).
	Index(t *Tensor, i int) *Tensor
	// Slice returns rows [start, end) along the first dimension as a view.
	Slice(t *Tensor, start, end int) *Tensor
	// Copy writes src into dst at first-dimension offset start
	// (dst[start:start+src.Dim(0)] = src); the trailing dimensions must match.
	Copy(dst *Tensor, start int, src *Tensor)

	// MatMul computes x·wᵀ: x [..., K] F32, w [N, K] → [..., N] F32.
	MatMul(x, w *Tensor) *Tensor
	// Gather picks rows of table [V, D] (any float dtype) → [len(ids), D] F32.
	// An I32 table gives I32 rows (an index table, such as a drafter's
	// cluster ordering).
	Gather(table *Tensor, ids []int32) *Tensor
	// GatherAt is Gather with the ids in an I32 tensor [n] on the backend,
	// such as a token an Argmax chose that the host has not read. The ids
	// are not checked (that would mean reading them): callers guarantee
	// they lie in [0, V).
	GatherAt(table, ids *Tensor) *Tensor
	// AddRows accumulates dst[rows[i]] += scale[i] · src[i] for each i in
	// order; src is [len(rows), D], dst is [R, D]. MoE combines expert
	// outputs with it; a fixed visiting order keeps each row's sum invariant.
	AddRows(dst, src *Tensor, rows []int32, scale []float32)
	// Concat joins a [..., Da] and b [..., Db] along the last dimension.
	Concat(a, b *Tensor) *Tensor

	// RMSNorm normalises each row: x · (mean(x²) + eps)^-½ · w. A nil w is
	// the weightless norm (w = 1).
	RMSNorm(x, w *Tensor, eps float32) *Tensor
	// RoPE rotates x [T, H, d] (rotate-half layout); row t uses position pos[t].
	RoPE(x *Tensor, pos []int32, r *RoPE) *Tensor
	// Attention is scaled dot-product attention with grouped-query heads.
	// q is [B, L, Hq, d]; k and v are [B, S, Hkv, d] with Hq a multiple of
	// Hkv; the result is [B, L, Hq, d]. A 3-D q, k or v means B = 1.
	Attention(q, k, v *Tensor, opt AttentionOptions) *Tensor

	// Add, Mul: elementwise a∘b, where b has a's shape, or is a row
	// broadcast along a's rows (b.Len() == a.Dim(-1)), or is a scalar.
	Add(a, b *Tensor) *Tensor
	Mul(a, b *Tensor) *Tensor
	// Scale multiplies every element by s.
	Scale(x *Tensor, s float32) *Tensor
	// GeluTanh is the tanh approximation of GELU ("gelu_pytorch_tanh").
	GeluTanh(x *Tensor) *Tensor
	// GeluMul computes GeluTanh(gate) · up, the gated MLP's inner product.
	GeluMul(gate, up *Tensor) *Tensor
	// Softcap computes c · tanh(x / c).
	Softcap(x *Tensor, c float32) *Tensor
	// Softmax normalises each row.
	Softmax(x *Tensor) *Tensor
	// Argmax returns the index of each row's largest value (lowest index on
	// ties) as I32 [rows].
	Argmax(x *Tensor) *Tensor
	// ArgmaxKeyed returns, for each row of x [..., D] (F32), the key
	// (keys: I32, x's shape) of the row's largest value, ties going to the
	// smaller key, as I32 [rows]. NaN never wins; a row of NaN gives its
	// first key. (A drafter's head picks among a subset of the vocabulary
	// this way, keys being token ids.)
	ArgmaxKeyed(x, keys *Tensor) *Tensor
	// TopK returns each row's k largest values in descending order, ties by
	// lower index first, as values F32 [..., k] and indices I32 [..., k].
	TopK(x *Tensor, k int) (values, indices *Tensor)
}

// Mask selects which keys a query may see in Attention.
type Mask uint8

const (
	// Causal: a key is visible when its position is ≤ the query's.
	Causal Mask = iota
	// Bidirectional: every valid key is visible.
	Bidirectional
)

// AttentionOptions controls masking and scaling in Backend.Attention.
type AttentionOptions struct {
	// Scale multiplies q·k before the softmax (Gemma 4 uses 1.0; 0 means 1).
	Scale float32
	Mask  Mask
	// Window > 0 also hides keys at positions ≤ qpos − Window, so a query
	// sees at most Window keys ending at its own position (sliding attention).
	// It applies to both mask kinds.
	Window int
	// QueryPos holds the absolute position of each query, [B·L].
	QueryPos []int32
	// KeyPos holds the absolute position of each key slot, [B·S]; a negative
	// value marks an empty slot. Nil means slot s of every row is position s.
	// Ring buffers pass their slots' positions here.
	KeyPos []int32
	// KeyLen, if set, is each batch row's number of valid key slots; slots
	// at or beyond it are ignored.
	KeyLen []int
	// KeyStart, if set, is the slot each batch row's reduction starts at:
	// slots are visited KeyStart, KeyStart+1, …, S−1, 0, …, KeyStart−1.
	// Keys are summed in visiting order, so a ring buffer passes the slot of
	// its oldest entry: keys are then reduced in position order and results
	// do not depend on the ring's capacity or on where it wrapped.
	KeyStart []int
}

// RoPE holds rotary-embedding frequencies for one head dimension. Pair
// (j, j+Dim/2) rotates by position·InvFreq[j]; a zero frequency leaves the
// pair unchanged.
type RoPE struct {
	Dim     int
	InvFreq []float32
}

// DefaultRoPE is the standard rotary table: InvFreq[j] = theta^(−2j/dim).
func DefaultRoPE(dim int, theta float64) *RoPE {
	return ProportionalRoPE(dim, theta, 1)
}

// ProportionalRoPE is Gemma 4's table for full-attention layers: only the
// first floor(fraction·dim/2) pairs rotate, and their exponents still use
// the full dim as the denominator (not the rotated width).
func ProportionalRoPE(dim int, theta float64, fraction float64) *RoPE {
	half := dim / 2
	rotated := int(math.Floor(fraction * float64(dim) / 2))
	r := &RoPE{Dim: dim, InvFreq: make([]float32, half)}
	for j := 0; j < rotated && j < half; j++ {
		// float32 throughout, as the reference computes it.
		exp := float32(2*j) / float32(dim)
		r.InvFreq[j] = float32(1 / math.Pow(theta, float64(exp)))
	}
	return r
}

// MemoryInfo is implemented by backends with memory of their own (GPUs):
// the bytes free and in total now. Callers size caches from it.
type MemoryInfo interface {
	MemInfo() (free, total uint64, err error)
}

// Syncer is implemented by backends whose ops run asynchronously (CUDA):
// Sync waits for every op issued so far and reports an asynchronous
// failure. Timings that must include the device's work call it (a
// prompt's prefill, which otherwise ends when its last op is issued).
type Syncer interface {
	Sync() error
}

// Sync waits for the ops issued on b so far where b runs them
// asynchronously (a no-op otherwise).
func Sync(b Backend) error {
	if s, ok := b.(Syncer); ok {
		return s.Sync()
	}
	return nil
}

// Recycler is implemented by backends that can reuse a tensor's memory
// before the garbage collector finds the tensor dead (CUDA, where a block
// the collector returns costs the host a cleanup's registration when it is
// handed out again). Recycle says that every op reading ts has been
// issued and that the caller keeps no view of their memory: views of one
// allocation (a stacked product's outputs) go back together, and an
// allocation goes back once (after that it may be another tensor's). Only
// tensors made for the caller may go back, never ones it was passed,
// cache views or weights. The backend may give the memory to ops issued
// later; ops already issued still read what they were given, since a
// backend runs its ops in issue order.
// Recycle skips nil tensors.
type Recycler interface {
	Recycle(ts ...*Tensor)
}

// Recycle hands ts back to b where b reuses memory early (a no-op
// otherwise). Nil tensors are skipped.
func Recycle(b Backend, ts ...*Tensor) {
	if r, ok := b.(Recycler); ok {
		r.Recycle(ts...)
	}
}

// Prefetcher is implemented by backends whose ops run asynchronously
// (CUDA). Prefetch queues a copy of t (a small F32 or I32 tensor) to the
// host behind the work issued so far and returns the function that waits
// for that copy alone and returns t's elements as bits, so the host can
// issue more work (the next decode step) before it reads the result.
type Prefetcher interface {
	Prefetch(t *Tensor) (wait func() []uint32)
}

// Recorder is implemented by backends that can record the ops of a step
// and launch them as one unit (CUDA graphs). BeginRecord and EndRecord
// bracket a step; anything that reads a result on the host inside them ends
// the recording early, so any sequence of ops is allowed. site names the
// kind of step (a decode step, a verify pass of k rows), so that steps of
// different shapes keep separate records.
type Recorder interface {
	BeginRecord(site string)
	EndRecord()
}

// Checkpointer is implemented by recorders that can launch what a
// recording has captured so far and go on recording the rest as another
// unit: the device then starts a long step (a verify pass) while the host
// still records its later part. The ops and their order are unchanged.
type Checkpointer interface {
	Checkpoint()
}

// Checkpoint launches b's recording so far and goes on recording, if b
// records (a no-op otherwise, and outside a recording).
func Checkpoint(b Backend) {
	if c, ok := b.(Checkpointer); ok {
		c.Checkpoint()
	}
}

// LateUploader is a backend that can queue an upload before its values are
// known, so the host records the ops that read them while it is still
// computing them (a sampled token, from the logits of the step still
// running).
type LateUploader interface {
	// LateI32 queues an upload of n values that values computes: it is
	// called once, before anything that reads the tensor runs on the
	// device (with a recording, just before its graph launches), and may
	// take its time, but must not panic and must return n values (it may
	// run on the device's own thread). got waits until values has run (not
	// for the device's work) and reports what failed; call it after the
	// recording ends.
	LateI32(n int, values func() []int32) (t *Tensor, got func() error)
	// ReadLate queues copies of ts to the host, behind the work issued so
	// far; the function it returns waits for them, and may be called only
	// from the values of a late upload queued after this ReadLate. Each
	// tensor comes back as its 32-bit words (F32 or I32; BF16 and F16 are
	// widened to F32): see Float32s and Int32s.
	ReadLate(ts ...*Tensor) func() ([][]uint32, error)
}

// Record begins a recording on b if it records, and returns the function
// that ends it (a no-op otherwise).
func Record(b Backend, site string) (end func()) {
	r, ok := b.(Recorder)
	if !ok {
		return func() {}
	}
	r.BeginRecord(site)
	return r.EndRecord
}

// Fused is implemented by backends with fused forms of op sequences the
// models repeat every layer. Each must give exactly the bits of the
// sequence it replaces; the functions below use the fused form when the
// backend has one and the sequence otherwise.
type Fused interface {
	AddRMSNorm(r, x, w *Tensor, eps float32) *Tensor
	RMSNormRoPE(x, w *Tensor, eps float32, pos []int32, rope *RoPE) *Tensor
}

// FusedBoundary is implemented by backends with a layer boundary's norms
// fused (AddRMSNormNorm below); like Fused, it must give the sequence's bits.
type FusedBoundary interface {
	AddRMSNormNorm(r, x, w1, s, w2 *Tensor, eps float32) (y, h *Tensor)
}

// AddRMSNorm is Add(r, RMSNorm(x, w, eps)): a residual stream plus a
// normalised branch.
func AddRMSNorm(b Backend, r, x, w *Tensor, eps float32) *Tensor {
	if f, ok := b.(Fused); ok {
		return f.AddRMSNorm(r, x, w, eps)
	}
	return b.Add(r, b.RMSNorm(x, w, eps))
}

// FusedQKV is implemented by backends with a layer's per-head norms in one
// op (QKVNorms below); it must give the sequence's bits.
type FusedQKV interface {
	QKVNorms(q, k, v, qw, kw *Tensor, eps float32, pos []int32, rope *RoPE, dst []KVRun) (qo, ko, vo *Tensor)
}

// KVRun is N consecutive slots of a cache from Slot on: rows Slot to
// Slot+N−1 of K and V ([slots, heads, d] each).
type KVRun struct {
	K, V    *Tensor
	Slot, N int
}

// QKVNorms is a layer's per-head norms: RMSNormRoPE of the queries q and the
// keys k ([T, heads, d]) with their weights, and RMSNorm of the values v
// without a weight (v may be k). With dst (runs of cache slots whose N sum
// to T: each row of a batch writes its own cache) the keys and values are
// written there, in order, and ko and vo are nil.
func QKVNorms(b Backend, q, k, v, qw, kw *Tensor, eps float32, pos []int32, rope *RoPE, dst []KVRun) (qo, ko, vo *Tensor) {
	if f, ok := b.(FusedQKV); ok {
		return f.QKVNorms(q, k, v, qw, kw, eps, pos, rope, dst)
	}
	return QKVNormsUnfused(b, q, k, v, qw, kw, eps, pos, rope, dst)
}

// QKVNormsUnfused is QKVNorms as its sequence of ops, for a FusedQKV
// backend that does not fuse every case.
func QKVNormsUnfused(b Backend, q, k, v, qw, kw *Tensor, eps float32, pos []int32, rope *RoPE, dst []KVRun) (qo, ko, vo *Tensor) {
	if err := CheckQKVInto(k, dst); err != nil {
		panic(err)
	}
	qo, ko, vo = RMSNormRoPE(b, q, qw, eps, pos, rope), RMSNormRoPE(b, k, kw, eps, pos, rope), b.RMSNorm(v, nil, eps)
	if dst == nil {
		return qo, ko, vo
	}
	t := 0
	for _, d := range dst {
		b.Copy(d.K, d.Slot, b.Slice(ko, t, t+d.N))
		b.Copy(d.V, d.Slot, b.Slice(vo, t, t+d.N))
		t += d.N
	}
	return qo, nil, nil
}

// CheckQKVInto checks QKVNorms' destinations for keys k ([T, heads, d]):
// none, or runs of slots inside distinct F32 tensors of k's row shape,
// their N summing to T.
func CheckQKVInto(k *Tensor, dst []KVRun) error {
	if dst == nil {
		return nil
	}
	rows := 0
	for _, d := range dst {
		if d.K == nil || d.V == nil || d.K == d.V || d.K.DType() != F32 || d.V.DType() != F32 || d.K.Rank() != k.Rank() ||
			!SameShape(d.K.Shape()[1:], k.Shape()[1:]) || !SameShape(d.V.Shape(), d.K.Shape()) ||
			d.Slot < 0 || d.N < 0 || d.Slot+d.N > d.K.Dim(0) {
			return fmt.Errorf("QKVNorms into slots %d..%d of %v and %v, keys %v: want distinct F32 tensors of the keys' rows holding the slots", d.Slot, d.Slot+d.N-1, d.K, d.V, k)
		}
		rows += d.N
	}
	if rows != k.Dim(0) {
		return fmt.Errorf("QKVNorms of %d tokens into %d cache slots", k.Dim(0), rows)
	}
	return nil
}

// AttentionRow is a batch row of AttendRows: keys and values of its own
// ([S, Hkv, D] and [S, Hkv, Dv]: a request's cache) with their slots'
// positions and first slot, as AttentionOptions' KeyPos and KeyStart of a
// call with one row.
type AttentionRow struct {
	K, V     *Tensor
	KeyPos   []int32
	KeyStart int
}

// HeadNorms is a layer's per-head norms as QKVNorms takes them: the raw
// projections Q, K and V ([T, heads, d]; K and V nil for a layer that reads
// another's cache: its queries alone, as RMSNormRoPE) and the caches' slots
// Dst the keys and values go to.
type HeadNorms struct {
	Q, K, V, QW, KW *Tensor
	Eps             float32
	Pos             []int32
	RoPE            *RoPE
	Dst             []KVRun
}

// NormedAttender is implemented by backends that fold a layer's per-head
// norms into its attention where they can (decode rows). The result must be
// NormedAttentionApart's, bit for bit, and the caches must hold the same
// keys and values after it.
type NormedAttender interface {
	NormedAttention(n HeadNorms, rows []AttentionRow, opt AttentionOptions) *Tensor
}

// NormedAttention is a layer's per-head norms and attention for a batch of
// B rows of the same length: QKVNorms writing the keys and values into
// n.Dst (or RMSNormRoPE of the queries alone where n.K is nil), then
// AttendRows of the normalised queries, as [B, T/B, heads, d], over rows,
// which must already name the new keys' positions.
func NormedAttention(b Backend, n HeadNorms, rows []AttentionRow, opt AttentionOptions) *Tensor {
	if f, ok := b.(NormedAttender); ok {
		return f.NormedAttention(n, rows, opt)
	}
	return NormedAttentionApart(b, n, rows, opt)
}

// NormedAttentionApart is NormedAttention as its two ops.
func NormedAttentionApart(b Backend, n HeadNorms, rows []AttentionRow, opt AttentionOptions) *Tensor {
	if err := CheckHeadNorms(n, len(rows)); err != nil {
		panic(err)
	}
	q := NormHeads(b, n)
	T, H, d := q.Dim(0), q.Dim(1), q.Dim(2)
	out := AttendRows(b, q.Reshape(len(rows), T/len(rows), H, d), rows, opt)
	Recycle(b, q)
	return out
}

// NormHeads runs n's norms alone and returns the normalised queries:
// QKVNorms, its keys and values written into n.Dst, or RMSNormRoPE of the
// queries where n.K is nil.
func NormHeads(b Backend, n HeadNorms) *Tensor {
	if n.K == nil {
		return RMSNormRoPE(b, n.Q, n.QW, n.Eps, n.Pos, n.RoPE)
	}
	q, _, _ := QKVNorms(b, n.Q, n.K, n.V, n.QW, n.KW, n.Eps, n.Pos, n.RoPE, n.Dst)
	return q
}

// CheckHeadNorms checks NormedAttention's norms for B rows: queries of
// [T, heads, d] with T a multiple of B, and keys and values only with the
// cache slots they go to.
func CheckHeadNorms(n HeadNorms, B int) error {
	switch {
	case n.Q == nil || n.Q.Rank() != 3 || B == 0 || n.Q.Dim(0)%B != 0:
		return fmt.Errorf("NormedAttention of queries %v for %d rows: want [T, heads, d], T a multiple of the rows", n.Q, B)
	case (n.K == nil) != (n.V == nil) || n.K != nil && n.Dst == nil:
		return fmt.Errorf("NormedAttention with keys %v, values %v and %d cache runs: want keys and values together, written into the caches", n.K, n.V, len(n.Dst))
	case n.K == nil && n.Dst != nil:
		return fmt.Errorf("NormedAttention of queries alone into %d cache runs", len(n.Dst))
	}
	return nil
}

// RowsAttender is implemented by backends that attend the rows of
// AttendRows in one call. Each row's result must be its own Attention's,
// bit for bit.
type RowsAttender interface {
	AttentionRows(q *Tensor, rows []AttentionRow, opt AttentionOptions) *Tensor
}

// AttendRows is Attention over a batch whose rows keep their keys and
// values apart (a serving step's requests, each with its cache): q is
// [B, L, Hq, D], batch row b attends to rows[b], opt.QueryPos holds the
// B·L query positions and its key fields must be unset. The result,
// [B, L, Hq, Dv], is each row's own Attention.
func AttendRows(b Backend, q *Tensor, rows []AttentionRow, opt AttentionOptions) *Tensor {
	if r, ok := b.(RowsAttender); ok {
		return r.AttentionRows(q, rows, opt)
	}
	return AttendRowsApart(b, q, rows, opt)
}

// AttendRowsApart is AttendRows as one Attention a row, for backends (and
// cases) without the one call.
func AttendRowsApart(b Backend, q *Tensor, rows []AttentionRow, opt AttentionOptions) *Tensor {
	if err := CheckAttendRows(q, rows, opt); err != nil {
		panic(err)
	}
	B, L, Hq, D := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	var out *Tensor
	for i, r := range rows {
		o := opt
		if opt.QueryPos != nil {
			o.QueryPos = opt.QueryPos[i*L : (i+1)*L]
		}
		o.KeyPos, o.KeyStart = r.KeyPos, []int{r.KeyStart}
		a := b.Attention(b.Slice(q, i, i+1).Reshape(L, Hq, D), r.K, r.V, o)
		a = a.Reshape(1, L, Hq, a.Dim(-1))
		if B == 1 {
			return a
		}
		if out == nil {
			out = b.Zeros(F32, B, L, Hq, a.Dim(-1))
		}
		b.Copy(out, i, a)
	}
	return out
}

// CheckAttendRows validates AttendRows' arguments; each row's own shapes
// are Attention's to check.
func CheckAttendRows(q *Tensor, rows []AttentionRow, opt AttentionOptions) error {
	switch {
	case q.Rank() != 4 || q.Dim(0) != len(rows) || len(rows) == 0:
		return fmt.Errorf("AttendRows wants q [B, L, Hq, D] with a row each, got %v for %d rows", q, len(rows))
	case opt.KeyPos != nil || opt.KeyLen != nil || opt.KeyStart != nil:
		return fmt.Errorf("AttendRows takes each row's key positions from the row, not the options")
	case opt.Mask != Causal && opt.Mask != Bidirectional:
		return fmt.Errorf("AttendRows with unknown mask %d", opt.Mask)
	case (opt.QueryPos != nil || opt.Mask == Causal || opt.Window > 0) && len(opt.QueryPos) != q.Dim(0)*q.Dim(1):
		return fmt.Errorf("AttendRows needs %d query positions, got %d", q.Dim(0)*q.Dim(1), len(opt.QueryPos))
	}
	for i, r := range rows {
		if r.K == nil || r.V == nil || r.K.Rank() != 3 || r.V.Rank() != 3 {
			return fmt.Errorf("AttendRows row %d: keys %v and values %v, want [S, Hkv, D] each", i, r.K, r.V)
		}
	}
	return nil
}

// AddRMSNormNorm is a layer boundary's two norms: the residual stream
// y = Add(r, RMSNorm(x, w1, eps)), times the one-element tensor s unless s
// is nil, and the next block's input h = RMSNorm(y, w2, eps).
func AddRMSNormNorm(b Backend, r, x, w1, s, w2 *Tensor, eps float32) (y, h *Tensor) {
	if f, ok := b.(FusedBoundary); ok {
		return f.AddRMSNormNorm(r, x, w1, s, w2, eps)
	}
	return AddRMSNormNormUnfused(b, r, x, w1, s, w2, eps)
}

// AddRMSNormNormUnfused is AddRMSNormNorm as its sequence of ops (with
// AddRMSNorm fused where the backend fuses it), for a FusedBoundary backend
// that does not fuse every case.
func AddRMSNormNormUnfused(b Backend, r, x, w1, s, w2 *Tensor, eps float32) (y, h *Tensor) {
	y = AddRMSNorm(b, r, x, w1, eps)
	if s != nil {
		y = b.Mul(y, s)
	}
	return y, b.RMSNorm(y, w2, eps)
}

// RMSNormRoPE is RoPE(RMSNorm(x, w, eps), pos, rope): the per-head query and
// key norms before the rotation.
func RMSNormRoPE(b Backend, x, w *Tensor, eps float32, pos []int32, rope *RoPE) *Tensor {
	if f, ok := b.(Fused); ok {
		return f.RMSNormRoPE(x, w, eps, pos, rope)
	}
	return b.RoPE(b.RMSNorm(x, w, eps), pos, rope)
}

// Stacker is implemented by backends that run the products of one input
// with several weights as a single product when the weights are
// consecutive rows of one tensor (a model loads them so when Stacks
// reports it helps): one launch instead of several, and a K split chosen
// for the whole stack. The results may round differently from separate
// MatMuls, but as with MatMul a row's result never depends on the other
// rows, so a model that uses MatMuls for a group of weights everywhere
// stays batch-invariant.
type Stacker interface {
	MatMuls(x *Tensor, ws ...*Tensor) []*Tensor
}

// Stacks reports whether b computes stacked weights as one product, so a
// loader should stack them.
func Stacks(b Backend) bool {
	_, ok := b.(Stacker)
	return ok
}

// MatMuls returns x·wᵢᵀ for each wᵢ: one product on backends that stack,
// separate MatMuls elsewhere.
func MatMuls(b Backend, x *Tensor, ws ...*Tensor) []*Tensor {
	if s, ok := b.(Stacker); ok {
		return s.MatMuls(x, ws...)
	}
	out := make([]*Tensor, len(ws))
	for i, w := range ws {
		out[i] = b.MatMul(x, w)
	}
	return out
}

// GeluGater is implemented by backends that can run a gated product,
// GeluMul(x·gateᵀ, x·upᵀ) or GeluMul(x·gateᵀ, up), in one pass for some
// shapes.
type GeluGater interface {
	// GeluMatMuls returns GeluMul of MatMuls(x, gate, up)'s two products,
	// with their bits, or ok false where it does not run the pass itself.
	GeluMatMuls(x, gate, up *Tensor) (y *Tensor, ok bool)
	// GeluMatMulBy returns GeluMul(MatMul(x, gate), up) with its bits, or
	// ok false.
	GeluMatMulBy(x, gate, up *Tensor) (y *Tensor, ok bool)
}

// GeluMatMuls returns GeluTanh(x·gateᵀ)·(x·upᵀ): one pass on a backend
// that runs it (GeluGater), else GeluMul of MatMuls. The bits are the same.
func GeluMatMuls(b Backend, x, gate, up *Tensor) *Tensor {
	if g, ok := b.(GeluGater); ok {
		if y, ok := g.GeluMatMuls(x, gate, up); ok {
			return y
		}
	}
	gu := MatMuls(b, x, gate, up)
	return b.GeluMul(gu[0], gu[1])
}

// GeluMatMulBy returns GeluTanh(x·gateᵀ)·up: one pass on a backend that runs
// it (GeluGater), else GeluMul of MatMul. The bits are the same.
func GeluMatMulBy(b Backend, x, gate, up *Tensor) *Tensor {
	if g, ok := b.(GeluGater); ok {
		if y, ok := g.GeluMatMulBy(x, gate, up); ok {
			return y
		}
	}
	return b.GeluMul(b.MatMul(x, gate), up)
}

// RandomFill describes uniform random values as model/gemma4's random
// weights make them on the host (gen-model's values): element e of the N
// from Off is drawn from the stream rand.NewPCG(Key, e / Block) of
// math/rand/v2, advanced to its (e mod Block)th Float64 u, and is
// float32(Center + HalfWidth·(2u − 1)), stored in the tensor's dtype
// (rounded to nearest even).
type RandomFill struct {
	Off, N            int
	Key               uint64
	Block             int
	Center, HalfWidth float64
}

// RandomWeighter is implemented by backends that make such weights
// themselves, so a random model of a published shape need not be made on
// the host and copied (the 31B shape is 62 GB). The values are the host's.
type RandomWeighter interface {
	// RandomWeight returns a weight of dtype dt (F32, BF16 or F16) and
	// shape, each element filled as the one fill that covers it says; the
	// fills must cover every element once.
	RandomWeight(dt DType, shape []int, fills []RandomFill) (*Tensor, error)
}

// Router is implemented by backends that run a token's mixture-of-experts
// layer without the host: the router's choice stays on the device and
// picks the expert weights there, so a decode step needs no read-back per
// layer (and can be recorded whole). Each op gives the bits of the host's
// way of doing the same (named below).
type Router interface {
	// Routes reports whether the backend routes a pass of tokens tokens on
	// the device with expert weights w ([E, rows, K]); the host path is
	// taken otherwise. Each token is routed as a lone one.
	Routes(w *Tensor, tokens int) bool
	// RouteExperts takes each token's top-k router probabilities vals and
	// expert ids idx ([N, k], TopK's order) to its experts in ascending id
	// (I32 [N, k]) and their scales (F32 [N, k]): vals[j] / Σ vals ·
	// perExpert[idx[j]] in float32, the sum in j order.
	RouteExperts(vals, idx, perExpert *Tensor) (experts, scales *Tensor)
	// MatMulAt gives, for each token row r of x [N, K], row r of its result
	// [N, n] as MatMul(x[r], Slice(Index(w, experts[r, slot]), off, off+n))
	// of that row alone.
	MatMulAt(x, w, experts *Tensor, slot, off, n int) *Tensor
	// AddRowAt is AddRows(dst, src, {0, …, N−1}, {scales[r, slot]}) for
	// dst and src [N, D].
	AddRowAt(dst, src, scales *Tensor, slot int)
}

// ExpertBatcher is a Router that also runs every expert choice of a pass
// at once: one launch for all k choices of all N tokens instead of one per
// slot. Results are the bits of the Router's per-slot ops.
type ExpertBatcher interface {
	Router
	// BatchesExperts reports whether the batched ops below should be used.
	BatchesExperts() bool
	// MatMulExperts gives row n·k + j of its result [N·k, cols] as MatMul
	// of one row with rows [off, off+cols) of expert experts[n, j] of w
	// (experts [N, k]): row n of x when x is [N, K], row n·k + j when x is
	// [N·k, K] (an input a choice).
	MatMulExperts(x, w, experts *Tensor, off, cols int) *Tensor
	// SumExperts gives row n of its result [N, D] as rows n·k … n·k+k−1
	// of y [N·k, D] scaled by scales[n, j] and added in j order from zero:
	// AddRows into Zeros(N, D) with rows {0 (k times), 1 (k times), …}.
	SumExperts(y, scales *Tensor) *Tensor
}

// ExpertGrouper is an ExpertBatcher that also runs a long pass's expert
// products grouped by expert: each expert's weights read once for all the
// choices that name it, in one launch for all the experts, where a prompt
// pass would otherwise make a product of each expert's tokens.
type ExpertGrouper interface {
	ExpertBatcher
	// GroupsExperts reports whether MatMulGrouped takes expert weights w
	// ([E, rows, K]) in this backend's current precision.
	GroupsExperts(w *Tensor) bool
	// GroupExperts lists a pass's choices experts ([N, k], each row
	// ascending: RouteExperts') by expert, among E, for MatMulGrouped.
	GroupExperts(experts *Tensor, E int) *Tensor
	// MatMulGrouped is MatMulExperts for the choices groups lists (row n·k
	// + j of its result [N·k, cols] is MatMul of row n of x [N, K], or row
	// n·k + j of x [N·k, K], with rows [off, off+cols) of expert
	// experts[n, j] of w). Each row's bits are its own, whatever else the
	// pass holds: exact, those MatMul gives it alone; at bf16 those of
	// the backend's own product kernels on its rounded activations.
	MatMulGrouped(x, w, groups *Tensor, off, cols int) *Tensor
}

// Precision is what a product does with its f32 activations.
type Precision uint8

const (
	// PrecisionExact products take the activations as they are: every decode and
	// verify pass, and by default prompt passes too.
	PrecisionExact Precision = iota
	// PrecisionBF16 products round each activation to bf16 (to nearest, ties to
	// even) first, as HF transformers in bf16, vLLM and llama.cpp compute
	// a prompt: the tensor cores' rate. A row's result still never depends
	// on the other rows, and equals an exact product of the rounded row.
	PrecisionBF16
)

func (p Precision) String() string {
	switch p {
	case PrecisionExact:
		return "exact"
	case PrecisionBF16:
		return "bf16"
	}
	return fmt.Sprintf("Precision(%d)", uint8(p))
}

// ParsePrecision reads "exact" or "bf16".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "exact":
		return PrecisionExact, nil
	case "bf16":
		return PrecisionBF16, nil
	}
	return PrecisionExact, fmt.Errorf("unknown precision %q (want exact or bf16)", s)
}

// Precisioner is implemented by backends whose products can round their
// activations (see Precision). The setting is the backend's, not a
// goroutine's: like a recording, it belongs to the one pass being issued.
type Precisioner interface {
	// SetPrecision sets the precision of every product issued after it
	// (MatMul, Stacker, GeluGater, Router and ExpertBatcher products) and
	// returns the one before.
	SetPrecision(p Precision) Precision
}

// SetPrecision sets b's product precision and returns the one before; a
// backend that is not a Precisioner takes only PrecisionExact.
func SetPrecision(b Backend, p Precision) (Precision, error) {
	if s, ok := b.(Precisioner); ok {
		return s.SetPrecision(p), nil
	}
	if p != PrecisionExact {
		return PrecisionExact, fmt.Errorf("the %s backend computes products only at precision exact, not %s", b.Name(), p)
	}
	return PrecisionExact, nil
}
