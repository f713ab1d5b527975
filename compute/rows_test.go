package compute_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"tandem/compute"
	"tandem/compute/cpu"
)

// TestAttendRowsApartIsEachRowsAttention protects AttendRows' definition,
// which the CUDA backend's one-pass form is tested against: row b's output
// is Attention of its own queries over its own cache (here a full cache
// and a ring of another capacity, with their positions and first slot),
// placed at row b.
func TestAttendRowsApartIsEachRowsAttention(t *testing.T) {
	b := cpu.New(1)
	r := rand.New(rand.NewPCG(1, 2))
	const L, Hq, Hkv, D = 2, 4, 2, 8
	fill := func(n int) []float32 { return uniform(r, n) }
	ring := []int32{8, 9, 10, 11, 4, 5, 6, 7} // positions 4..11 in 8 slots, oldest at slot 4
	rows := []compute.AttentionRow{
		{K: b.FromF32(fill(12*Hkv*D), 12, Hkv, D), V: b.FromF32(fill(12*Hkv*D), 12, Hkv, D)},
		{K: b.FromF32(fill(8*Hkv*D), 8, Hkv, D), V: b.FromF32(fill(8*Hkv*D), 8, Hkv, D), KeyPos: ring, KeyStart: 4},
	}
	qpos := []int32{10, 11, 10, 11}
	q := b.FromF32(fill(2*L*Hq*D), 2, L, Hq, D)
	opt := compute.AttentionOptions{Scale: 0.5, Mask: compute.Causal, Window: 6, QueryPos: qpos}
	got := b.ToF32(compute.AttendRowsApart(b, q, rows, opt))
	for i, row := range rows {
		o := opt
		o.QueryPos, o.KeyPos, o.KeyStart = qpos[i*L:(i+1)*L], row.KeyPos, []int{row.KeyStart}
		want := b.ToF32(b.Attention(b.Slice(q, i, i+1).Reshape(L, Hq, D), row.K, row.V, o))
		if n := len(want); !slices.Equal(got[i*n:(i+1)*n], want) {
			t.Fatalf("row %d differs from its own Attention", i)
		}
	}
}

// TestAttendRowsRejects protects AttendRows' argument checks: each is an
// error, never a silent default (a causal call without query positions
// would attend every query at position 0).
func TestAttendRowsRejects(t *testing.T) {
	b := cpu.New(1)
	kv := compute.AttentionRow{K: b.Zeros(compute.F32, 4, 1, 8), V: b.Zeros(compute.F32, 4, 1, 8)}
	q := b.Zeros(compute.F32, 2, 1, 2, 8)
	good := compute.AttentionOptions{Mask: compute.Causal, QueryPos: []int32{3, 3}}
	for _, tc := range []struct {
		name string
		q    *compute.Tensor
		rows []compute.AttentionRow
		opt  func(o *compute.AttentionOptions)
		want string
	}{
		{"a row each", q, []compute.AttentionRow{kv}, nil, "a row each"},
		{"3-D queries", b.Zeros(compute.F32, 2, 2, 8), []compute.AttentionRow{kv, kv}, nil, "a row each"},
		{"key positions in the options", q, []compute.AttentionRow{kv, kv}, func(o *compute.AttentionOptions) { o.KeyPos = make([]int32, 8) }, "from the row"},
		{"no query positions for a causal mask", q, []compute.AttentionRow{kv, kv}, func(o *compute.AttentionOptions) { o.QueryPos = nil }, "query positions"},
		{"too few query positions", q, []compute.AttentionRow{kv, kv}, func(o *compute.AttentionOptions) { o.QueryPos = o.QueryPos[:1] }, "query positions"},
		{"an unknown mask", q, []compute.AttentionRow{kv, kv}, func(o *compute.AttentionOptions) { o.Mask = 7 }, "mask"},
		{"a row without values", q, []compute.AttentionRow{kv, {K: kv.K}}, nil, "row 1"},
	} {
		opt := good
		if tc.opt != nil {
			tc.opt(&opt)
		}
		err := compute.CheckAttendRows(tc.q, tc.rows, opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	if err := compute.CheckAttendRows(q, []compute.AttentionRow{kv, kv}, good); err != nil {
		t.Errorf("good arguments: %v", err)
	}
}

// TestQKVNormsIntoRuns protects QKVNorms' writes into runs of cache slots
// (each row of a batch its own cache): every token's keys and values land
// in its run's slot, nothing else is written, and bad runs are errors.
func TestQKVNormsIntoRuns(t *testing.T) {
	b := cpu.New(1)
	r := rand.New(rand.NewPCG(3, 4))
	const T, Hq, Hk, d = 3, 2, 1, 8
	fill := func(n int) []float32 { return uniform(r, n) }
	q, k, v := b.FromF32(fill(T*Hq*d), T, Hq, d), b.FromF32(fill(T*Hk*d), T, Hk, d), b.FromF32(fill(T*Hk*d), T, Hk, d)
	pos := []int32{5, 6, 9}
	rope := compute.DefaultRoPE(d, 10000)
	_, k0, v0 := compute.QKVNorms(b, q, k, v, nil, nil, 1e-6, pos, rope, nil)
	wantK, wantV := b.ToF32(k0), b.ToF32(v0)
	caches := []compute.KVRun{
		{K: b.Zeros(compute.F32, 6, Hk, d), V: b.Zeros(compute.F32, 6, Hk, d)},
		{K: b.Zeros(compute.F32, 4, Hk, d), V: b.Zeros(compute.F32, 4, Hk, d)},
	}
	runs := []compute.KVRun{ // token 0 into slot 5 of the first cache, tokens 1 and 2 into slots 1 and 2 of the second
		{K: caches[0].K, V: caches[0].V, Slot: 5, N: 1},
		{K: caches[1].K, V: caches[1].V, Slot: 1, N: 2},
	}
	_, ko, vo := compute.QKVNorms(b, q, k, v, nil, nil, 1e-6, pos, rope, runs)
	if ko != nil || vo != nil {
		t.Fatalf("written into runs, QKVNorms returned %v and %v, want nil", ko, vo)
	}
	row := Hk * d
	for ci, c := range caches {
		for i, ct := range []*compute.Tensor{c.K, c.V} {
			want := [][]float32{wantK, wantV}[i]
			got := b.ToF32(ct)
			for s := range ct.Dim(0) {
				expect := make([]float32, row)
				switch {
				case ci == 0 && s == 5:
					copy(expect, want[0:row])
				case ci == 1 && (s == 1 || s == 2):
					copy(expect, want[s*row:(s+1)*row]) // tokens 1 and 2 at slots 1 and 2
				}
				if !slices.Equal(got[s*row:(s+1)*row], expect) {
					t.Fatalf("cache %d, output %d, slot %d: %v, want %v", ci, i, s, got[s*row:(s+1)*row], expect)
				}
			}
		}
	}
	for _, tc := range []struct {
		name string
		runs []compute.KVRun
	}{
		{"too few slots", runs[:1]},
		{"past the cache", []compute.KVRun{{K: caches[1].K, V: caches[1].V, Slot: 2, N: 3}}},
		{"keys and values one tensor", []compute.KVRun{{K: caches[0].K, V: caches[0].K, N: 3}}},
		{"another head shape", []compute.KVRun{{K: b.Zeros(compute.F32, 4, 2, d), V: b.Zeros(compute.F32, 4, 2, d), N: 3}}},
	} {
		if err := compute.CheckQKVInto(k, tc.runs); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// uniform is n values drawn uniformly from [−1, 1).
func uniform(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	return x
}
