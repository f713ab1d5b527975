package cuda

import (
	"encoding/binary"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"tandem/compute"
)

// A recorded step (captured into a CUDA graph and launched as one unit)
// must give the bits the same ops give launched one by one: across steps
// with new inputs (the graph is updated in place), with a K split, uploads
// and attention, when a download inside the recording ends it early, and
// across a checkpoint (the step launched as two graphs).
func TestGraphsMatchDirect(t *testing.T) {
	direct := backendOrSkip(t)
	defer func(on bool) { checkpoints = on }(checkpoints)
	checkpoints = true
	g := graphsBackend(t)
	const M, K, N, S, H, D = 1, 1536, 2048, 40, 4, 64
	r := rand.New(rand.NewPCG(13, 14))
	wv, nv := randF32(r, N*K), randF32(r, K)
	ks, vs := randF32(r, S*H*D), randF32(r, S*H*D)
	type state struct {
		b          *Backend
		w, norm    *compute.Tensor
		keys, vals *compute.Tensor
	}
	states := []state{}
	for _, be := range []*Backend{direct, g} {
		states = append(states, state{be, weight(be, compute.BF16, wv, N, K), be.FromF32(nv, K),
			be.FromF32(ks, S, H, D), be.FromF32(vs, S, H, D)})
	}
	step := func(s state, x []float32, pos int, peek bool) *compute.Tensor {
		b := s.b
		h := b.RMSNorm(b.FromF32(x, M, K), s.norm, 1e-6)
		y := b.MatMul(h, s.w) // split over K: partials summed by the last block
		if peek {
			b.ToF32(y) // a download inside the recording ends it early
		}
		compute.Checkpoint(b) // the rest is the recording's next part
		q := y.Reshape(M, N)
		q = b.Slice(q.Reshape(M*N/(H*D), H, D), 0, 1)
		a := b.Attention(q, s.keys, s.vals, compute.AttentionOptions{Mask: compute.Causal, QueryPos: []int32{int32(pos)}})
		return b.Add(a, a)
	}
	for i := range 6 {
		x := randF32(r, M*K)
		peek := i == 4
		want := direct.ToF32(step(states[0], x, 10+5*i, peek))
		end := compute.Record(g, "step")
		out := step(states[1], x, 10+5*i, peek)
		end()
		got := g.ToF32(out)
		if err := sameBits(got, want); err != nil {
			t.Fatalf("step %d (download inside: %v): recorded differs from direct: %v", i, peek, err)
		}
	}
	// A site is recorded from its second step on, each step in two parts
	// (the checkpoint); a download ends the first part early.
	s := g.dev.GraphStats()
	if s.Launched < 9 || s.Fallbacks != 0 {
		t.Fatalf("%d recordings launched as graphs, %d ran directly; want at least 9 and none", s.Launched, s.Fallbacks)
	}
}

// TestGraphProfile protects StartGraphProfile (bench --graph-profile): a
// recorded step runs as its graphs, checkpoints included, and each graph
// is one mark, named by its site and part and summed under its site,
// rather than its kernels being timed one by one.
func TestGraphProfile(t *testing.T) {
	g := backendOrSkip(t)
	if !g.dev.Graphs() {
		t.Skip("CUDA graphs are off")
	}
	defer func(on bool) { checkpoints = on }(checkpoints)
	checkpoints = true
	r := rand.New(rand.NewPCG(51, 52))
	x := g.FromF32(randF32(r, 4*256), 4, 256)
	step := func() {
		end := compute.Record(g, "probe")
		y := g.Add(x, x)
		compute.Checkpoint(g) // the step's second part
		g.Add(y, y)
		end()
	}
	step() // the site's first recording
	if err := g.dev.StartGraphProfile(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		step()
	}
	p, err := g.dev.StopProfile()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, k := range p.Kernels {
		names[k.Name] = k.Calls
	}
	if names["probe"] != 3 || names["probe/1"] != 3 || len(names) != 2 {
		t.Fatalf("graph marks %v, want probe and probe/1 three times each", names)
	}
	if len(p.Sites) != 1 || p.Sites[0].Name != "probe" || p.Sites[0].Calls != 6 || p.Busy <= 0 {
		t.Fatalf("sites %+v (busy %v), want probe's six graphs", p.Sites, p.Busy)
	}
}

// TestProgrammaticLaunchWaits protects pdl_start (TANDEM_CUDA_PDL): a
// kernel launched while the one before it still writes must not read
// early. A 256 MB copy on one block per multiprocessor starts all its
// blocks at once, and their launch_dependents lets the next kernel be
// scheduled at once too; the copy writes its last word at its very end.
// A one-word copy of that word launched right behind it must read the
// written value. The same copy by a test kernel without the wait must read
// the zero that was there, or the launches did not overlap and the test
// would prove nothing.
func TestProgrammaticLaunchWaits(t *testing.T) {
	b := backendOrSkip(t)
	if b.dev.d.launchExFn == 0 {
		t.Skip("the driver lacks cuLaunchKernelEx")
	}
	early := earlyReader(t, b)
	defer func(on bool) { programmaticLaunch = on }(programmaticLaunch)
	programmaticLaunch = true
	race, want := lastWordRace(t, b)
	read := func(reader Kernel) uint32 { return race(nil, reader) }
	stale := 0
	for trial := range 4 {
		if g := read(b.k["copy_words"]); g != want {
			t.Fatalf("trial %d: the second kernel read %#x, want %#x (it ran before the first had written)", trial, g, want)
		}
		if read(early) != want {
			stale++
		}
	}
	if stale == 0 {
		t.Fatal("a reader without griddepcontrol.wait never read early: the launches did not overlap, so the wait went untested")
	}
	t.Logf("the reader without the wait read early in %d of 4 trials", stale)
}

// earlyReader is copy_words without griddepcontrol.wait: a reader that
// may run before the kernel ahead of it has written, so that a test can
// show the launches it races really overlap.
func earlyReader(t *testing.T, b *Backend) Kernel {
	ks, err := b.dev.Compile(`extern "C" __global__ void copy_early(unsigned* dst, const unsigned* src, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}`, "early.cu", "copy_early")
	if err != nil {
		t.Fatal(err)
	}
	return ks["copy_early"]
}

// lastWordRace sets up TestProgrammaticLaunchWaits' race: race(between,
// reader) zeroes a 256 MB buffer, copies into it on one block a
// multiprocessor (its last word written at the very end), issues between
// (when given), launches the one-block reader of the copy's last word right
// behind, and returns what the reader read; want is the copied word.
func lastWordRace(t *testing.T, b *Backend) (race func(between func(), reader Kernel) uint32, want uint32) {
	const n = 64 << 20
	src := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(src[4*i:], uint32(i)|1)
	}
	dev := b.dev
	var bufs [3]Buffer
	for i, size := range []int{4 * n, 4 * n, 4} {
		buf, err := dev.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Free(buf) })
		bufs[i] = buf
	}
	s, d, out := bufs[0], bufs[1], bufs[2]
	if err := dev.Upload(s, src); err != nil {
		t.Fatal(err)
	}
	last := Buffer{ptr: d.ptr + 4*(n-1), Size: 4}
	zeros := make([]byte, 4*n)
	race = func(between func(), reader Kernel) uint32 {
		t.Helper()
		if err := dev.Upload(d, zeros); err != nil {
			t.Fatal(err)
		}
		if err := dev.LaunchAsync(b.k["copy_words"], [3]uint32{132, 1, 1}, [3]uint32{256, 1, 1}, 0, d, s, n); err != nil {
			t.Fatal(err)
		}
		if between != nil {
			between()
		}
		if err := dev.LaunchAsync(reader, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, out, last, 1); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if err := dev.Download(got, out); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint32(got)
	}
	return race, uint32(n-1) | 1
}

// copyBuffers sets up the early-load tests: a source and a destination
// of n words each for a 256 MB copy_words, freed when the test ends (with
// programmaticLaunch restored), or a skip where the driver cannot launch
// with PDL.
func copyBuffers(t *testing.T, b *Backend) (s, d Buffer, n int) {
	t.Helper()
	if b.dev.d.launchExFn == 0 {
		t.Skip("the driver lacks cuLaunchKernelEx")
	}
	on := programmaticLaunch
	t.Cleanup(func() { programmaticLaunch = on })
	n = 64 << 20
	for _, buf := range []*Buffer{&s, &d} {
		var err error
		if *buf, err = b.dev.Alloc(4 * n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.dev.Free(*buf) })
	}
	return s, d, n
}

// copyAhead zeroes d and out, then launches copy_words of s into d, n
// words, with programmatic launch for what follows as pdl asks; without
// it, it waits for the copy, so the next launch is the reference that
// reads what the copy wrote.
func copyAhead(t *testing.T, b *Backend, d, s Buffer, n int, pdl bool, out Buffer) {
	t.Helper()
	for _, buf := range []Buffer{d, out} {
		if err := b.dev.Upload(buf, make([]byte, buf.Size)); err != nil {
			t.Fatal(err)
		}
	}
	programmaticLaunch = pdl
	if err := b.dev.LaunchAsync(b.k["copy_words"], [3]uint32{132, 1, 1}, [3]uint32{256, 1, 1}, 0, d, s, n); err != nil {
		t.Fatal(err)
	}
	if !pdl {
		if err := b.dev.wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEarlyWeightsWaitForActivations protects the rows kernels' _early
// variants (TANDEM_CUDA_EARLY_WEIGHTS): they load their first weights
// before griddepcontrol.wait, and must still read their activations only
// after the kernel before them has written them. As in
// TestProgrammaticLaunchWaits, a 256 MB copy launched just before writes
// the activations' three bf16 parts as its very last words, and the
// product launched right behind it with programmatic serialization must
// give the bits of the same product computed after a full sync.
// (scripts/gpu/mutants.sh early-wait moves the wait after the first
// activation loads; this test must fail on it.)
func TestEarlyWeightsWaitForActivations(t *testing.T) {
	b := backendOrSkip(t)
	s, d, n := copyBuffers(t, b)
	dev := b.dev
	r := rand.New(rand.NewPCG(21, 22))
	for _, sh := range []struct{ N, K int }{
		{256, 512},  // one split: the product written directly
		{300, 5376}, // ten splits summed through the counters, a partial last column group
	} {
		N, K := sh.N, sh.K
		splits, chunk := splitK(N, K)
		parts := make([]uint16, 3*K) // x's hi, mid and lo, as split_bf16 writes them
		for k := range K {
			x := float32(r.NormFloat64())
			hi := compute.F32ToBF16(x)
			rest := x - compute.BF16ToF32(hi)
			mid := compute.F32ToBF16(rest)
			parts[k], parts[K+k], parts[2*K+k] = hi, mid, compute.F32ToBF16(rest-compute.BF16ToF32(mid))
		}
		src := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(src[4*i:], uint32(i)|1)
		}
		tail := 4*n - 2*len(parts) // the activations are the copy's last words
		for i, h := range parts {
			binary.LittleEndian.PutUint16(src[tail+2*i:], h)
		}
		if err := dev.Upload(s, src); err != nil {
			t.Fatal(err)
		}
		xs := Buffer{ptr: d.ptr + uintptr(tail), Size: 2 * len(parts)}
		w := weight(b, compute.BF16, randF32(r, N*K), N, K)
		y, part := b.alloc(compute.F32, N), b.alloc(compute.F32, splits*N)
		if splits == 1 { // the kernel writes its one split's sums as the product
			part = y
		}
		product := func(kernel string, pdl bool) []float32 {
			t.Helper()
			// Without pdl the reference: the activations are written before the product starts.
			copyAhead(t, b, d, s, n, pdl, ptrOf(y))
			base, cl := strings.CutSuffix(kernel, "_cl") // a cluster-finish variant
			grid := [3]uint32{uint32((N + blockColsOf(base) - 1) / blockColsOf(base)), uint32(splits), 1}
			args := []any{xs, ptrOf(w), ptrOf(y), ptrOf(part), ptrOf(b.counters), 1, N, K, chunk, 1, segNone, segNone}
			if strings.Contains(kernel, "glu") { // w as gate|up: N/2 outputs, the split's parts and up not asked for
				grid[0] = uint32((N/2 + 63) / 64)
				args = []any{xs, ptrOf(w), ptrOf(y), ptrOf(part), ptrOf(b.counters), 1, N / 2, K, chunk, 1, nil, nil}
			}
			var err error
			if cl {
				err = dev.LaunchClusterAsync(b.k[kernel], grid, [3]uint32{256, 1, 1}, [3]uint32{1, grid[1], 1}, 0, args...)
			} else {
				err = dev.LaunchAsync(b.k[kernel], grid, [3]uint32{256, 1, 1}, 0, args...)
			}
			if err != nil {
				t.Fatal(err)
			}
			programmaticLaunch = false
			return b.ToF32(y)
		}
		want := product("matmul_rows_wide", false)
		if slices.Equal(want, make([]float32, N)) {
			t.Fatalf("N=%d K=%d: the reference product is all zeros", N, K)
		}
		wantGLU := product("matmul_rows_glu", false)
		kernels := []string{"matmul_rows_wide_early", "matmul_rows_early", "matmul_rows_glu_early"}
		if splits > 1 && splits <= b.maxCluster {
			kernels = append(kernels, "matmul_rows_wide_early_cl", "matmul_rows_early_cl", "matmul_rows_glu_early_cl")
		}
		for _, kernel := range kernels {
			want := want
			if strings.Contains(kernel, "glu") {
				want = wantGLU
			}
			for trial := range 4 {
				if err := sameBits(product(kernel, true), want); err != nil {
					t.Fatalf("%s, N=%d K=%d, trial %d: the product differs from the one computed after a sync (it read its activations before they were written): %v",
						kernel, N, K, trial, err)
				}
			}
		}
	}
}

// TestEarlyNormsWaitForActivations protects earlyNorms: rmsnorm and
// rmsnorm2 launched with PDL right behind a 256 MB copy that writes their
// row and residual last, with early weights (and rmsnorm2's layer
// scalar), must give the bits of the same launch after a sync, at the 31B
// and E2B widths (both chunked rows, the path that loads early).
func TestEarlyNormsWaitForActivations(t *testing.T) {
	b := backendOrSkip(t)
	s, d, n := copyBuffers(t, b)
	dev := b.dev
	r := rand.New(rand.NewPCG(23, 24))
	for _, D := range []int{5376, 1536} {
		src := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(1))
		}
		tail := 4*n - 8*D // the row, then the residual: the copy's last words
		for i, v := range randF32(r, 2*D) {
			binary.LittleEndian.PutUint32(src[tail+4*i:], math.Float32bits(v))
		}
		if err := dev.Upload(s, src); err != nil {
			t.Fatal(err)
		}
		x, res := Buffer{ptr: d.ptr + uintptr(tail), Size: 4 * D}, Buffer{ptr: d.ptr + uintptr(tail+4*D), Size: 4 * D}
		w1, w2 := weight(b, compute.BF16, randF32(r, D), D), weight(b, compute.BF16, randF32(r, D), D)
		scalar := weight(b, compute.BF16, []float32{0.75}, 1) // a layer scalar, loaded early too
		y, h := b.alloc(compute.F32, D), b.alloc(compute.F32, D)
		parts := b.alloc(compute.BF16, 3, D)
		norm := func(kernel string, pdl bool) []float32 {
			t.Helper()
			copyAhead(t, b, d, s, n, pdl, ptrOf(h)) // without pdl the reference: the row is written before the norm starts
			args := []any{ptrOf(h), x, ptrOf(w1), dtCode(compute.BF16), D, float32(1e-6), res, ptrOf(parts), D, 1, 1}
			if kernel == "rmsnorm2" {
				args = []any{ptrOf(y), ptrOf(h), x, res, ptrOf(w1), dtCode(compute.BF16), ptrOf(scalar), dtCode(compute.BF16),
					ptrOf(w2), dtCode(compute.BF16), D, float32(1e-6), ptrOf(parts), D, 1}
			}
			if err := dev.LaunchAsync(b.k[kernel], [3]uint32{1, 1, 1}, [3]uint32{uint32(rowThreads(D)), 1, 1}, 0, args...); err != nil {
				t.Fatal(err)
			}
			programmaticLaunch = false
			return b.ToF32(h)
		}
		for _, kernel := range []string{"rmsnorm", "rmsnorm2"} {
			want := norm(kernel, false)
			for trial := range 4 {
				if err := sameBits(norm(kernel, true), want); err != nil {
					t.Fatalf("%s, D=%d, trial %d: the norm differs from the one computed after a sync (it read its row before it was written): %v",
						kernel, D, trial, err)
				}
			}
		}
	}
}

// TestLateUploadsFillBeforeTheyAreRead protects LateI32 and ReadLate (how
// sampled decoding picks a token from the last step's logits while it
// records the step that reads it): the ops that read a late upload must
// read its values, which arrive only after the host has issued those ops.
// In a recording the values are filled just before its graph launches,
// also when a download ends the recording early or a checkpoint launches
// its first part; a site's first step is not recorded and runs directly,
// the device thread waiting for the values. The values come from a
// ReadLate of a tensor the device computes just before, and arrive 20 ms
// late, so a graph launched without them reads the last step's or stale
// bytes.
func TestLateUploadsFillBeforeTheyAreRead(t *testing.T) {
	b := backendOrSkip(t)
	defer func(on bool) { checkpoints = on }(checkpoints)
	checkpoints = true
	const V, D = 64, 8
	table := make([]float32, V*D)
	for i := range table {
		table[i] = float32(i)
	}
	emb := b.FromF32(table, V, D)
	before := b.dev.GraphStats()
	for step := range 9 {
		want := []int32{int32(step*7) % V, int32(step*7+3) % V}
		// The ids as floats, computed on the device behind a large copy.
		half := []float32{float32(want[0]) / 2, float32(want[1]) / 2}
		big := b.Zeros(compute.F32, 32<<20)
		b.Copy(big, 0, b.Zeros(compute.F32, 32<<20))
		src := b.Add(b.FromF32(half, 2), b.FromF32(half, 2))
		marks := b.FromI32([]int32{int32(step), -7}, 2) // a second tensor in the same read, I32
		read := b.ReadLate(src, marks)
		calls := 0
		end := compute.Record(b, "late")
		ids, got := b.LateI32(2, func() []int32 {
			calls++
			time.Sleep(20 * time.Millisecond)
			host, err := read()
			if err != nil {
				t.Errorf("step %d: ReadLate: %v", step, err)
				return []int32{0, 0}
			}
			if m := compute.Int32s(host[1]); len(host) != 2 || m[0] != int32(step) || m[1] != -7 {
				t.Errorf("step %d: ReadLate's second tensor came back as %v", step, m)
			}
			f := compute.Float32s(host[0])
			return []int32{int32(f[0]), int32(f[1])}
		})
		switch step % 3 {
		case 1:
			compute.Checkpoint(b) // the upload's part launches first
		case 2:
			b.ToF32(emb) // a download ends the recording early
		}
		rows := b.GatherAt(emb, ids)
		end()
		if err := got(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		out := b.ToF32(rows)
		for r, id := range want {
			for j := range D {
				if g, w := out[r*D+j], table[int(id)*D+j]; g != w {
					t.Fatalf("step %d: row %d element %d = %v, want %v (token %d): the gather read the token before its late value", step, r, j, g, w, id)
				}
			}
		}
		if calls != 1 {
			t.Fatalf("step %d: values called %d times, want once", step, calls)
		}
	}
	if after := b.dev.GraphStats(); b.dev.Graphs() && after.Launched == before.Launched {
		t.Error("no recording launched as a graph: the late fill before a graph launch went untested")
	}
}

// TestPDLForDecodeAndVerify protects the default PDL rule: plain decode
// steps issued ahead, a speculative round's verify (its parts too) and a
// greedy round's drafts launch with programmatic serialization
// (TANDEM_CUDA_PDL=verify leaves the drafts out, =decode the verify too);
// engine steps, sampled drafts and sampled decode steps (whose graphs
// start on an idle device) do not.
func TestPDLForDecodeAndVerify(t *testing.T) {
	defer func(v, d bool) { pdlVerify, pdlDrafts = v, d }(pdlVerify, pdlDrafts)
	for _, tc := range []struct{ verify, drafts bool }{{false, false}, {true, false}, {true, true}} {
		pdlVerify, pdlDrafts = tc.verify, tc.drafts
		for site, want := range map[string]bool{
			"decode": true, "verify-at4": tc.verify, "draft-at0": tc.drafts, "draft-at1": tc.drafts, "verify4": tc.verify,
			"draft-ahead-at0": tc.drafts, "draft-ahead-at1/1": tc.drafts,
			"verify4/2": tc.verify, "draft1": false, "step,1,1": false, "decode/1": false,
			"draft-late1,1": false, "draft-picks0,2": false, // the engine's drafts, drawn or picked on the device
			"decode-sampled": false, "decode-sampled/1": false, // issued onto an idle device, in parts
		} {
			if got := pdlFor(site); got != want {
				t.Errorf("verify %v, drafts %v: pdlFor(%q) = %v, want %v", tc.verify, tc.drafts, site, got, want)
			}
		}
	}
}

// TestCompareLaunches protects the step-to-step comparison of a site's
// launches: each launch counts under its kernel, a changed grid or argument
// (another hash) counts as changed, and a recording whose kernels differ
// from the previous one's is not compared at all.
func TestCompareLaunches(t *testing.T) {
	prev := []launchSig{{"rmsnorm2", 1}, {"attn_scores", 2}, {"attn_values", 3}, {"rmsnorm2", 4}}
	for _, tc := range []struct {
		name              string
		cur               []launchSig
		ok                bool
		compared, changed map[string]int
	}{
		{"the same step", prev, true, map[string]int{"rmsnorm2": 2, "attn_scores": 1, "attn_values": 1}, map[string]int{}},
		{"attention's tables moved", []launchSig{{"rmsnorm2", 1}, {"attn_scores", 9}, {"attn_values", 8}, {"rmsnorm2", 4}}, true,
			map[string]int{"rmsnorm2": 2, "attn_scores": 1, "attn_values": 1}, map[string]int{"attn_scores": 1, "attn_values": 1}},
		{"another kernel", []launchSig{{"rmsnorm2", 1}, {"attn_scores_tiled", 2}, {"attn_values", 3}, {"rmsnorm2", 4}}, false, map[string]int{}, map[string]int{}},
		{"one launch more", append(slices.Clone(prev), launchSig{"gather", 5}), false, map[string]int{}, map[string]int{}},
	} {
		compared, changed := map[string]int{}, map[string]int{}
		if ok := compareLaunches(prev, tc.cur, compared, changed); ok != tc.ok || !maps.Equal(compared, tc.compared) || !maps.Equal(changed, tc.changed) {
			t.Errorf("%s: compareLaunches = %v, compared %v, changed %v; want %v, %v, %v", tc.name, ok, compared, changed, tc.ok, tc.compared, tc.changed)
		}
	}
}

// TestGraphsFollowClusterSizes protects updating a site's executable graph
// in place only from a recording of the same kernels, cluster dimensions
// and programmatic waits: attn_cluster's blocks a cluster change with a
// pass's shared memory (more keys) and a site's name can be another
// model's, and the driver documents no update of cluster dimensions. Each
// recording must give the direct result, and each change of the cluster
// size must instantiate the site's graph again.
func TestGraphsFollowClusterSizes(t *testing.T) {
	direct := backendOrSkip(t)
	defer func(cl int, on, grp bool) { attnClusterBlocks, fusedAttention, attnGroup = cl, on, grp }(attnClusterBlocks, fusedAttention, attnGroup)
	fusedAttention, attnGroup = true, false // attn_cluster's sizes, not attn_cluster_group's
	g := graphsBackend(t)
	if g.attnClusterMax < 8 {
		t.Skip("the device lacks clusters of 8")
	}
	const S, Hq, Hkv, D = 100, 4, 2, 64
	r := rand.New(rand.NewPCG(71, 72))
	qs, ks, vs := randF32(r, Hq*D), randF32(r, S*Hkv*D), randF32(r, S*Hkv*D)
	opt := compute.AttentionOptions{Mask: compute.Causal, QueryPos: []int32{S - 1}}
	kd, vd := direct.FromF32(ks, S, Hkv, D), direct.FromF32(vs, S, Hkv, D)
	kg, vg := g.FromF32(ks, S, Hkv, D), g.FromF32(vs, S, Hkv, D)
	prev := 0
	for i, C := range []int{4, 4, 8, 8, 4, 2, 8} { // a site is recorded from its second step on
		attnClusterBlocks = C
		want := direct.ToF32(direct.Attention(direct.FromF32(qs, 1, Hq, D), kd, vd, opt))
		before, clBefore := g.dev.GraphStats().Reinstantiated, g.attnClN
		end := compute.Record(g, "attn")
		out := g.Attention(g.FromF32(qs, 1, Hq, D), kg, vg, opt)
		end()
		if err := sameBits(g.ToF32(out), want); err != nil {
			t.Fatalf("step %d, clusters of %d after %d: recorded differs from direct: %v", i, C, prev, err)
		}
		if g.attnClN == clBefore {
			t.Fatalf("step %d: attn_cluster did not run", i)
		}
		if again := g.dev.GraphStats().Reinstantiated > before; i > 1 && again != (C != prev) {
			t.Fatalf("step %d, clusters of %d after %d: instantiated again %v", i, C, prev, again)
		}
		prev = C
	}
}

// graphsBackend is a second backend with CUDA graphs on whatever the
// environment says, closed when the test ends; it skips where the driver
// lacks the graph calls.
func graphsBackend(t *testing.T) *Backend {
	t.Helper()
	on := graphsEnabled
	graphsEnabled = true
	g, err := New(0)
	graphsEnabled = on
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if !g.dev.Graphs() {
		t.Skip("the driver lacks the graph calls")
	}
	return g
}
