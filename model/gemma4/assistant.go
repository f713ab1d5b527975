package gemma4

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"tandem/checkpoint"
	"tandem/checkpoint/safetensors"
	"tandem/compute"
	"tandem/kvcache"
)

// Assistant is a Gemma 4 "assistant" MTP drafter (spec §2). It has no KV
// cache of its own: its four q-only layers attend to the target's K/V of the
// last non-shared sliding and full layers. It embeds its input tokens with
// the target's table, so it works only once bound to a target.
type Assistant struct {
	Config *AssistantConfig
	b      compute.Backend
	set    weightSource

	preProj, postProj *compute.Tensor // [h, 2Ht], [Ht, h]
	head              *compute.Tensor // [V, h] LM head (tied embed_tokens or lm_head)
	norm              *compute.Tensor
	layers            []assistantLayer

	// Centroid ("ordered embeddings") head.
	centroids *compute.Tensor // [C, h]
	ordering  *compute.Tensor // [C, vpc] I32: row c is cluster c's canonical token ids
	order     []int32         // ordering on the host, for the host's reads (selected)

	target *Model
}

type assistantLayer struct {
	Layer
	rope                                        *compute.RoPE
	inNorm, postAttnNorm, preFFNorm, postFFNorm *compute.Tensor
	scalar, q, o, qNorm, gate, up, down         *compute.Tensor
}

// Errors of binding and drafting.
var (
	ErrUnsupportedTarget = errors.New("gemma4: the target cannot host an assistant drafter")
	ErrNotBound          = errors.New("gemma4: the assistant drafter is not bound to a target")
	ErrAlreadyBound      = errors.New("gemma4: the assistant drafter is already bound to a target")
)

// IncompatibleError lists every reason a drafter does not fit a target.
type IncompatibleError struct {
	Reasons []string
}

func (e *IncompatibleError) Error() string {
	return "gemma4: drafter does not fit the target: " + strings.Join(e.Reasons, "; ")
}

// LoadAssistant reads a gemma4_assistant checkpoint from dir onto b.
func LoadAssistant(dir string, b compute.Backend) (*Assistant, error) {
	return LoadAssistantWith(dir, b, LoadOptions{})
}

// LoadAssistantWith is LoadAssistant with options.
func LoadAssistantWith(dir string, b compute.Backend, opt LoadOptions) (*Assistant, error) {
	rc, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseAssistant(rc.Raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	a, err := newAssistant(cfg, set, b, opt)
	if err != nil {
		set.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return a, nil
}

func newAssistant(cfg *AssistantConfig, set weightSource, b compute.Backend, opt LoadOptions) (*Assistant, error) {
	if err := CheckAssistant(cfg, set.Tensors()).Err(); err != nil {
		return nil, err
	}
	c := &cfg.Text
	a := &Assistant{Config: cfg, b: b, set: set}
	ld := newLoader(set, b, "", opt)
	w := ld.load
	a.preProj, a.postProj, a.norm = w("pre_projection.weight"), w("post_projection.weight"), w("model.norm.weight")
	a.head = w("model.embed_tokens.weight")
	if !cfg.TieWordEmbeddings {
		a.head = w("lm_head.weight")
	}
	ropes := map[[2]any]*compute.RoPE{}
	for _, l := range c.Layers() {
		p := fmt.Sprintf("model.layers.%d.", l.Index)
		key := [2]any{l.Type, l.HeadDim}
		if ropes[key] == nil {
			ropes[key] = ropeFor(c, l.Type, l.HeadDim)
		}
		gu := ld.stack(p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight") // one product where the backend stacks
		a.layers = append(a.layers, assistantLayer{Layer: l, rope: ropes[key],
			inNorm: w(p + "input_layernorm.weight"), postAttnNorm: w(p + "post_attention_layernorm.weight"),
			preFFNorm: w(p + "pre_feedforward_layernorm.weight"), postFFNorm: w(p + "post_feedforward_layernorm.weight"),
			scalar: w(p + "layer_scalar"), q: w(p + "self_attn.q_proj.weight"), o: w(p + "self_attn.o_proj.weight"),
			qNorm: w(p + "self_attn.q_norm.weight"),
			gate:  gu[0], up: gu[1], down: w(p + "mlp.down_proj.weight"),
		})
	}
	if cfg.UseOrderedEmbeddings {
		a.centroids = w("masked_embedding.centroids.weight")
		ord, err := tokenOrdering(set, c.VocabSize)
		if err != nil && ld.err == nil {
			ld.err = err
		}
		if err == nil {
			C := cfg.NumCentroids
			vpc := c.VocabSize / C
			a.order = ord[:C*vpc]
			a.ordering = b.FromI32(a.order, C, vpc)
		}
	}
	if err := ld.finish(); err != nil {
		return nil, err
	}
	return a, nil
}

// tokenOrdering reads masked_embedding.token_ordering (int64 or int32) as
// int32 (vocabularies are far below 2³¹) and checks it is a permutation.
func tokenOrdering(set weightSource, vocab int) ([]int32, error) {
	const name = "masked_embedding.token_ordering"
	info, _ := set.Lookup(name)
	data, err := set.Data(name)
	if err != nil {
		return nil, err
	}
	ord := make([]int32, vocab)
	seen := make([]bool, vocab)
	for i := range ord {
		var v int64
		switch info.DType {
		case compute.I64:
			v = int64(leUint64(data[8*i:]))
		default:
			v = int64(int32(leUint32(data[4*i:])))
		}
		if v < 0 || v >= int64(vocab) || seen[v] {
			return nil, fmt.Errorf("tensor %q: entry %d is %d: not a permutation of the %d-token vocabulary", name, i, v, vocab)
		}
		seen[v] = true
		ord[i] = int32(v)
	}
	return ord, nil
}

func leUint64(b []byte) uint64 { return uint64(leUint32(b)) | uint64(leUint32(b[4:]))<<32 }
func leUint32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Backend is the backend the drafter's weights live on.
func (a *Assistant) Backend() compute.Backend { return a.b }

// Close releases the drafter's mapped weights.
func (a *Assistant) Close() error { return a.set.Close() }

// Check lists why a drafter would not fit target t (nil when it fits).
func (a *Assistant) Check(t *Model) error {
	tc, dc := &t.Config.Text, &a.Config.Text
	var reasons []string
	if a.Config.BackboneHiddenSize != tc.HiddenSize {
		reasons = append(reasons, fmt.Sprintf("drafter backbone_hidden_size %d, target hidden_size %d", a.Config.BackboneHiddenSize, tc.HiddenSize))
	}
	if dc.SlidingWindow != tc.SlidingWindow {
		// The target's rings keep its own window: a wider drafter window
		// would silently see fewer keys than it was trained with.
		reasons = append(reasons, fmt.Sprintf("drafter sliding_window %d, target sliding_window %d", dc.SlidingWindow, tc.SlidingWindow))
	}
	if dc.VocabSize != tc.VocabSize {
		reasons = append(reasons, fmt.Sprintf("drafter vocab_size %d, target vocab_size %d", dc.VocabSize, tc.VocabSize))
	}
	src := t.kvSources()
	for _, l := range a.layers {
		s, ok := src[l.Type]
		if !ok {
			reasons = append(reasons, fmt.Sprintf("drafter layer %d is %s but the target has no non-shared %s layer", l.Index, l.Type, l.Type))
			continue
		}
		tl := t.layers[s]
		if l.HeadDim != tl.HeadDim {
			reasons = append(reasons, fmt.Sprintf("drafter layer %d (%s) has head dim %d, the target's %s K/V (layer %d) %d", l.Index, l.Type, l.HeadDim, l.Type, s, tl.HeadDim))
		}
		if dc.NumAttentionHeads%tl.KVHeads != 0 {
			reasons = append(reasons, fmt.Sprintf("drafter's %d query heads are not a multiple of the target's %d %s KV heads", dc.NumAttentionHeads, tl.KVHeads, l.Type))
		}
	}
	if len(reasons) > 0 {
		return &IncompatibleError{Reasons: dedupe(reasons)}
	}
	return nil
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// Bind attaches the drafter to target t after checking they fit. A drafter
// serves one target for its lifetime.
func (a *Assistant) Bind(t *Model) error {
	if a.target != nil {
		return ErrAlreadyBound
	}
	if t == nil || len(t.kvSources()) == 0 {
		return ErrUnsupportedTarget
	}
	if err := a.Check(t); err != nil {
		return err
	}
	a.target = t
	return nil
}

// Target is the bound target, or nil.
func (a *Assistant) Target() *Model { return a.target }

// kvSources maps a layer type to the target layer whose K/V the drafter
// reads: the last non-shared layer of that type.
func (m *Model) kvSources() map[string]int {
	src := map[string]int{}
	for i, l := range m.layers {
		if !l.Shared {
			src[l.Type] = i
		}
	}
	return src
}

// Snapshot is the target K/V one sequence's drafting reads, taken after the
// target cache holds exactly the committed positions [0, Len).
type Snapshot struct {
	Len   int // committed positions
	views map[string]compute.AttentionRow
}

// Snapshot takes the drafter's view of cache c: the K/V of the last
// non-shared sliding and full layers at the committed length.
func (m *Model) Snapshot(c *kvcache.Cache) Snapshot {
	s := Snapshot{Len: c.Len(), views: map[string]compute.AttentionRow{}}
	for typ, i := range m.kvSources() {
		var v compute.AttentionRow
		v.K, v.V, v.KeyPos, v.KeyStart = c.Layer(m.cacheOf[i]).View(c.Len())
		s.views[typ] = v
	}
	return s
}

// DraftOptions sets the drafter's conventions.
type DraftOptions struct {
	// QueryAtLast puts the drafter's query at position T−1 (mlx-vlm,
	// SGLang, ollama) instead of T, the pending token's own position (HF).
	QueryAtLast bool
	// MaxSharedKV > 0 limits attention over full-attention keys to the last
	// MaxSharedKV committed positions.
	MaxSharedKV int
	// LaunchEarly, in a recorded step (a CUDA graph), launches the first
	// layer's work before the rest is recorded (compute.Checkpoint): for a
	// step the device sits idle waiting for, a round's first draft.
	LaunchEarly bool
}

// DraftRow is one sequence's drafting state for a step.
type DraftRow struct {
	Token int32 // the token to embed
	// Next, when set, is the token as an I32 tensor [1] on the backend, in
	// place of Token: a draft ArgmaxAt chose that the host has not read.
	// It must lie in the vocabulary. A step's rows all have one or none.
	Next   *compute.Tensor
	Hidden *compute.Tensor // [1, Ht]: the target's post-norm hidden (first step) or the drafter's own
	Snap   Snapshot
}

// StepOutput is one drafter step: the normed hidden the head reads, the
// hidden fed back into the next step, per row.
type StepOutput struct {
	Normed *compute.Tensor // [B, h]
	Next   *compute.Tensor // [B, Ht] (post_projection)
}

// Step runs the drafter once for every row (spec §2.3): embed the token
// with the target's scaled table, concatenate [embedding, hidden],
// pre-project, four q-only layers over the target's committed K/V (sliding
// layers: the last W keys), final norm, post-projection.
func (a *Assistant) Step(rows []DraftRow, opt DraftOptions) (*StepOutput, error) {
	t := a.target
	if t == nil {
		return nil, ErrNotBound
	}
	b := a.b
	c := &a.Config.Text
	eps := float32(c.RMSNormEps)
	B := len(rows)
	ids := make([]int32, B)
	qpos, keyPos := make([]int32, B), make([]int32, B)
	var hs *compute.Tensor // the rows' target hiddens [B, Ht]; a lone row's as it is
	if B != 1 || rows[0].Hidden.DType() != compute.F32 || !compute.SameShape(rows[0].Hidden.Shape(), []int{1, a.Config.BackboneHiddenSize}) {
		hs = b.Zeros(compute.F32, B, a.Config.BackboneHiddenSize)
	}
	var next *compute.Tensor // the rows' device tokens [B]: every row's or none
	for i, r := range rows {
		if r.Next != nil {
			if r.Next.DType() != compute.I32 || r.Next.Len() != 1 || (next == nil) != (i == 0) {
				return nil, fmt.Errorf("draft: row %d's device token (%v) must be one I32, and every row's or none", i, r.Next)
			}
			if next == nil {
				next = r.Next.Reshape(1)
			} else {
				next = b.Concat(next, r.Next.Reshape(1))
			}
		} else if next != nil {
			return nil, fmt.Errorf("draft: row %d has no device token where row 0 has one: every row's or none", i)
		} else if r.Token < 0 || int(r.Token) >= c.VocabSize {
			return nil, fmt.Errorf("draft: row %d token %d outside the vocabulary [0, %d)", i, r.Token, c.VocabSize)
		}
		if r.Snap.Len < 1 {
			return nil, fmt.Errorf("draft: row %d has no committed positions: prefill the target first", i)
		}
		ids[i] = r.Token
		// Every key set is anchored at the last committed position, so the
		// query position convention changes only RoPE, never which keys are
		// visible.
		keyPos[i] = int32(r.Snap.Len - 1)
		qpos[i] = int32(r.Snap.Len)
		if opt.QueryAtLast {
			qpos[i] = keyPos[i]
		}
		if hs == nil {
			hs = r.Hidden
			continue
		}
		b.Copy(hs, i, r.Hidden)
	}
	var e *compute.Tensor
	if next != nil {
		e = b.Scale(b.GatherAt(t.embed, next), t.embedScale)
	} else {
		e = b.Scale(b.Gather(t.embed, ids), t.embedScale)
	}
	z := b.MatMul(b.Concat(e, hs), a.preProj)
	// As in the target, each layer boundary's norms run as one op
	// (compute.AddRMSNormNorm), the last one with the final norm.
	h := b.RMSNorm(z, a.layers[0].inNorm, eps)
	offsets := make([]int, B+1) // a query a row
	for i := range offsets {
		offsets[i] = i
	}
	for i := range a.layers {
		l := &a.layers[i]
		nH, d := c.NumAttentionHeads, l.HeadDim
		qp := b.MatMul(h, l.q)
		q := compute.RMSNormRoPE(b, qp.Reshape(B, nH, d), l.qNorm, eps, qpos, l.rope)
		kv := make([]compute.AttentionRow, B)
		for ri, row := range rows {
			kv[ri] = row.Snap.views[l.Type]
		}
		opt2 := compute.AttentionOptions{Scale: 1, Mask: compute.Bidirectional}
		if l.Type == Sliding {
			opt2.Window = c.SlidingWindow
		} else if opt.MaxSharedKV > 0 {
			opt2.Window = opt.MaxSharedKV
		}
		out := attendRuns(b, q, keyPos, offsets, kv, opt2)
		o := b.MatMul(out.Reshape(B, nH*d), l.o)
		z, h = compute.AddRMSNormNorm(b, z, o, l.postAttnNorm, nil, l.preFFNorm, eps)
		f := b.MatMul(compute.GeluMatMuls(b, h, l.gate, l.up), l.down)
		nextNorm := a.norm // the final norm after the last layer
		if i+1 < len(a.layers) {
			nextNorm = a.layers[i+1].inNorm
		}
		z, h = compute.AddRMSNormNorm(b, z, f, l.postFFNorm, l.scalar, nextNorm, eps)
		if i == 0 && opt.LaunchEarly && len(a.layers) > 1 {
			compute.Checkpoint(b)
		}
	}
	return &StepOutput{Normed: h, Next: b.MatMul(h, a.postProj)}, nil
}

// Logits returns full-vocabulary drafter logits [B, V] (no softcap). For the
// centroid head, tokens outside the selected clusters get min(selected) − 1,
// as HF fills them (the minimum over all rows, as HF takes it).
func (a *Assistant) Logits(n *compute.Tensor) *compute.Tensor {
	if a.centroids == nil {
		return a.b.MatMul(n, a.head)
	}
	b := a.b
	B, V := n.Dim(0), a.Config.Text.VocabSize
	sel, ids := a.selected(n)
	out := make([]float32, B*V)
	lo := float32(math.Inf(1))
	for _, v := range sel {
		lo = min(lo, v)
	}
	for i := range out {
		out[i] = lo - 1
	}
	per := len(sel) / B
	for r := range B {
		for j := range per {
			out[r*V+int(ids[r*per+j])] = sel[r*per+j]
		}
	}
	return b.FromF32(out, B, V)
}

// Argmax returns each row's most likely token. The centroid head takes the
// fast path: the argmax over the selected clusters' tokens only, never
// materialising the full vocabulary.
func (a *Assistant) Argmax(n *compute.Tensor) []int32 {
	return a.b.ToI32(a.ArgmaxAt(n))
}

// ArgmaxAt is Argmax left on the backend, as I32 [B]: a draft token the
// next drafter step (DraftRow.Next) or the verify (Row.Next) can take
// before the host reads it. The centroid head's pick is computed on the
// backend too: per row, the top-k clusters, their tokens through the
// ordering table, those tokens' logits, and the largest, ties going to
// the lower token id as a full-vocabulary argmax would.
func (a *Assistant) ArgmaxAt(n *compute.Tensor) *compute.Tensor {
	b := a.b
	if a.centroids == nil {
		return b.Argmax(b.MatMul(n, a.head))
	}
	top := a.topClusters(n)
	var out *compute.Tensor
	for r := range n.Dim(0) {
		ids, sel := a.selectedRow(n, top, r)
		pick := b.ArgmaxKeyed(sel, ids)
		if out == nil {
			out = pick
		} else {
			out = b.Concat(out, pick)
		}
	}
	return out
}

// TopAt is each row's m largest logits and their token ids, as F32 and I32
// [B, m] on the backend: what TopK of Logits gives, where Logits would
// build the vocabulary. The centroid head ranks only its selected tokens;
// the others share one logit at most the least of those (Logits), so a
// row's m largest are among them, up to ties with the m-th. It reports
// false where a row selects fewer than m tokens (or the vocabulary holds
// fewer).
func (a *Assistant) TopAt(n *compute.Tensor, m int) (vals, ids *compute.Tensor, ok bool) {
	b := a.b
	if !a.TopFits(m) {
		return nil, nil, false
	}
	if a.centroids == nil {
		vals, ids = b.TopK(b.MatMul(n, a.head), m)
		return vals, ids, true
	}
	top := a.topClusters(n)
	for r := range n.Dim(0) {
		tokens, sel := a.selectedRow(n, top, r)
		L := sel.Dim(-1)
		v, pos := b.TopK(sel, m)
		t := b.GatherAt(tokens.Reshape(L, 1), pos.Reshape(m)).Reshape(1, m)
		if vals == nil {
			vals, ids = v, t
		} else {
			vals, ids = b.Concat(vals, v), b.Concat(ids, t) // rows joined end to end
		}
	}
	if vals == nil {
		return nil, nil, false
	}
	B := n.Dim(0)
	return vals.Reshape(B, m), ids.Reshape(B, m), true
}

// TopFits reports whether TopAt can give m of a row's largest logits: the
// vocabulary, or the tokens the centroid head selects, hold m.
func (a *Assistant) TopFits(m int) bool {
	if a.centroids == nil {
		return m <= a.Config.Text.VocabSize
	}
	return m <= a.Config.CentroidTopK*a.ordering.Dim(1)
}

// topClusters is each row's top-k centroids, [B, k] I32.
func (a *Assistant) topClusters(n *compute.Tensor) *compute.Tensor {
	_, top := a.b.TopK(a.b.MatMul(n, a.centroids), a.Config.CentroidTopK)
	return top
}

// selectedRow is row r's centroid-head selection, on the backend: the
// canonical token ids of its top clusters (top, from topClusters) and those
// tokens' logits, both [1, k·vpc]. One row at a time, with the row's own
// tokens, so the logits do not depend on the other rows.
func (a *Assistant) selectedRow(n, top *compute.Tensor, r int) (ids, sel *compute.Tensor) {
	b := a.b
	k := top.Dim(-1)
	ids = b.GatherAt(a.ordering, b.Slice(top, r, r+1).Reshape(k)) // [k, vpc]
	ids = ids.Reshape(ids.Len())
	sel = b.MatMul(b.Slice(n, r, r+1), b.GatherAt(a.head, ids))
	return ids.Reshape(1, ids.Len()), sel
}

// selected computes the centroid head's logits over the top-k clusters'
// tokens: per row, top-k centroids, their canonical token ids, and those
// tokens' logits, as [B·k·vpc] values and ids.
func (a *Assistant) selected(n *compute.Tensor) ([]float32, []int32) {
	b := a.b
	top := a.topClusters(n)
	clusters, k, vpc := b.ToI32(top), top.Dim(-1), a.ordering.Dim(1)
	var vals []float32
	var ids []int32
	for r := range n.Dim(0) {
		_, sel := a.selectedRow(n, top, r)
		vals = append(vals, b.ToF32(sel)...)
		for _, cl := range clusters[r*k : (r+1)*k] { // the ids selectedRow gathered, from the host's copy
			ids = append(ids, a.order[int(cl)*vpc:(int(cl)+1)*vpc]...)
		}
	}
	return vals, ids
}
