package gemma4

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"tandem/checkpoint"
	"tandem/checkpoint/safetensors"
	"tandem/compute"
	"tandem/kvcache"
)

// Model is a Gemma 4 text model (the target), with weights on a backend.
//
// The forward pass follows spec §1: scaled embeddings, per-layer embeddings
// (PLE), sliding and full attention with q/k/v norms and attention scale 1,
// default and proportional RoPE, KV sharing, dense or double-wide MLPs, the
// MoE block, layer scalars, the final norm and the softcapped tied LM head.
type Model struct {
	Config *Config
	b      compute.Backend
	set    weightSource // keeps mapped weights alive
	prefix string       // the text model's weight-name prefix

	embed      *compute.Tensor // [V, H]; also the tied LM head
	embedScale float32         // sqrt(H) rounded to the embedding's dtype, as HF does
	norm       *compute.Tensor

	pleEmbed, pleProj, pleNorm *compute.Tensor
	pleScale                   float32

	layers                []layer
	ropeSliding, ropeFull *compute.RoPE
	cacheOf               []int // layer → cache slot, or −1 for KV-shared layers

	halves sync.Map // n → [2]*compute.Tensor: gateUp's row ids on the backend, made once

	prompt compute.Precision // prompt passes' products (SetPromptPrecision)
}

// SetPromptPrecision sets the precision of prompt passes' products
// (ForwardOptions.Prompt); decode and verify passes stay exact. At
// compute.PrecisionBF16 a prompt's keys and values differ from those a
// decode of the same tokens writes, so a cache's prompt positions are
// worth reusing only for another prompt (engine's prefix cache), and greedy
// speculative output still equals plain, both starting from the same prompt
// pass. It fails where the backend computes only exact products. Set it
// before passes are issued: the precision is the backend's while a prompt
// pass runs, so passes on one backend must be issued one at a time (as the
// engine's scheduler and generation do).
func (m *Model) SetPromptPrecision(p compute.Precision) error {
	if p != compute.PrecisionExact && p != compute.PrecisionBF16 {
		return fmt.Errorf("prompt precision: unknown precision %v", p)
	}
	prev, err := compute.SetPrecision(m.b, p)
	if err != nil {
		return fmt.Errorf("prompt precision: %w", err)
	}
	if _, err := compute.SetPrecision(m.b, prev); err != nil {
		return fmt.Errorf("prompt precision: %w", err)
	}
	m.prompt = p
	return nil
}

// PromptPrecision is the precision of prompt passes' products.
func (m *Model) PromptPrecision() compute.Precision { return m.prompt }

type layer struct {
	Layer
	rope                                        *compute.RoPE
	inNorm, postAttnNorm, preFFNorm, postFFNorm *compute.Tensor
	scalar                                      *compute.Tensor
	q, k, v, o, qNorm, kNorm                    *compute.Tensor
	gate, up, down                              *compute.Tensor
	pleGate, pleProj, plePostNorm               *compute.Tensor
	// MoE block.
	routerProj, routerScale, expertScale *compute.Tensor
	expGateUp, expDown                   *compute.Tensor
	postFF1, postFF2, preFF2             *compute.Tensor
	perExpert                            []float32
}

// Load reads a Gemma 4 target from dir onto backend b. Weights stay memory-
// mapped in their stored dtype. A checkpoint that does not match its config
// fails here with every problem named.
func Load(dir string, b compute.Backend) (*Model, error) { return LoadWith(dir, b, LoadOptions{}) }

// LoadOptions controls LoadWith and LoadAssistantWith.
type LoadOptions struct {
	// Progress, if set, is called as weights reach the backend, with the
	// bytes loaded so far and the checkpoint's total (a GPU upload of a
	// large model takes a while).
	Progress func(done, total int64)
	// RandomOnDevice has a backend that makes random weights itself
	// (compute.RandomWeighter) make a preset's (Preset.Random), with the
	// host's values, instead of the host making them and copying them over.
	RandomOnDevice bool
}

// LoadWith is Load with options.
func LoadWith(dir string, b compute.Backend, opt LoadOptions) (*Model, error) {
	rc, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseTarget(rc.Raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	m, err := newModel(cfg, set, b, opt)
	if err != nil {
		set.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return m, nil
}

func newModel(cfg *Config, set weightSource, b compute.Backend, opt LoadOptions) (*Model, error) {
	c := &cfg.Text
	r := CheckTarget(c, set.Tensors())
	if err := r.Err(); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, b: b, set: set, prefix: r.Prefix}
	ld := newLoader(set, b, r.Prefix, opt)
	w := ld.load
	m.embed, m.norm = w("embed_tokens.weight"), w("norm.weight")
	m.embedScale = scaleIn(float32(math.Sqrt(float64(c.HiddenSize))), m.embed)
	if c.HasPLE() {
		m.pleEmbed, m.pleProj, m.pleNorm = w("embed_tokens_per_layer.weight"), w("per_layer_model_projection.weight"), w("per_layer_projection_norm.weight")
		m.pleScale = scaleIn(float32(math.Sqrt(float64(c.HiddenSizePerLayer))), m.pleEmbed)
	}
	ropes := map[[2]any]*compute.RoPE{}
	for _, l := range c.Layers() {
		p := fmt.Sprintf("layers.%d.", l.Index)
		key := [2]any{l.Type, l.HeadDim}
		if ropes[key] == nil {
			ropes[key] = ropeFor(c, l.Type, l.HeadDim)
		}
		ly := layer{Layer: l, rope: ropes[key],
			inNorm: w(p + "input_layernorm.weight"), postAttnNorm: w(p + "post_attention_layernorm.weight"),
			preFFNorm: w(p + "pre_feedforward_layernorm.weight"), postFFNorm: w(p + "post_feedforward_layernorm.weight"),
			scalar: w(p + "layer_scalar"),
			o:      w(p + "self_attn.o_proj.weight"), qNorm: w(p + "self_attn.q_norm.weight"),
			down: w(p + "mlp.down_proj.weight"),
		}
		// Projections of one input are stacked: one product each for the
		// attention's q, k (and v) and the MLP's gate and up where the
		// backend runs them so (see attention and feedForward).
		switch {
		case l.Shared:
			ly.q = w(p + "self_attn.q_proj.weight")
		case l.KEqV:
			qk := ld.stack(p+"self_attn.q_proj.weight", p+"self_attn.k_proj.weight")
			ly.q, ly.k = qk[0], qk[1]
		default:
			qkv := ld.stack(p+"self_attn.q_proj.weight", p+"self_attn.k_proj.weight", p+"self_attn.v_proj.weight")
			ly.q, ly.k, ly.v = qkv[0], qkv[1], qkv[2]
		}
		if !l.Shared {
			ly.kNorm = w(p + "self_attn.k_norm.weight")
		}
		gu := ld.stack(p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight")
		ly.gate, ly.up = gu[0], gu[1]
		if c.HasPLE() {
			ly.pleGate, ly.pleProj, ly.plePostNorm = w(p+"per_layer_input_gate.weight"), w(p+"per_layer_projection.weight"), w(p+"post_per_layer_input_norm.weight")
		}
		if c.EnableMoEBlock {
			ly.routerProj, ly.routerScale, ly.expertScale = w(p+"router.proj.weight"), w(p+"router.scale"), w(p+"router.per_expert_scale")
			ly.expGateUp, ly.expDown = w(p+"experts.gate_up_proj"), w(p+"experts.down_proj")
			ly.postFF1, ly.postFF2, ly.preFF2 = w(p+"post_feedforward_layernorm_1.weight"), w(p+"post_feedforward_layernorm_2.weight"), w(p+"pre_feedforward_layernorm_2.weight")
			if ly.expertScale != nil {
				ly.perExpert = b.ToF32(ly.expertScale)
			}
		}
		m.layers = append(m.layers, ly)
	}
	if err := ld.finish(); err != nil {
		return nil, err
	}
	slots := 0
	for _, l := range m.layers {
		slot := -1
		if !l.Shared {
			slot, slots = slots, slots+1
		}
		m.cacheOf = append(m.cacheOf, slot)
	}
	return m, nil
}

// loader moves weights from a source to a backend, keeping the first
// error (later loads are skipped) and reporting progress.
type loader struct {
	set         weightSource
	b           compute.Backend
	prefix      string
	err         error
	done, total int64
	progress    func(done, total int64)
	// With random weights and a backend that makes them (RandomOnDevice),
	// the backend fills each weight itself.
	rnd *randomSource
	rw  compute.RandomWeighter
}

func newLoader(set weightSource, b compute.Backend, prefix string, opt LoadOptions) *loader {
	l := &loader{set: set, b: b, prefix: prefix, progress: opt.Progress}
	if rs, ok := set.(*randomSource); ok && opt.RandomOnDevice {
		if rw, ok := b.(compute.RandomWeighter); ok {
			l.rnd, l.rw = rs, rw
		}
	}
	for _, t := range set.Tensors() {
		l.total += t.Size
	}
	return l
}

// load returns the weight prefix+name, or nil once a load has failed.
func (l *loader) load(name string) *compute.Tensor {
	if l.err != nil {
		return nil
	}
	name = l.prefix + name
	info, ok := l.set.Lookup(name)
	if !ok {
		l.err = fmt.Errorf("missing tensor %q", name)
		return nil
	}
	var t *compute.Tensor
	var err error
	if f, ok := l.randomFill(name, 0); ok {
		t, err = l.rw.RandomWeight(info.DType, info.Shape, []compute.RandomFill{f})
	} else {
		var data []byte
		if data, err = l.set.Data(name); err != nil {
			l.err = err
			return nil
		}
		t, err = l.b.Weight(info.DType, info.Shape, data)
	}
	if err != nil {
		where := "" // random weights come from no file
		if info.File != "" {
			where = " in " + info.File
		}
		l.err = fmt.Errorf("tensor %q%s: %w", name, where, err)
		return nil
	}
	if l.progress != nil {
		l.done += info.Size
		l.progress(l.done, l.total)
	}
	return t
}

// stack loads weights of one width (K) as consecutive rows of one tensor
// and returns a view of each, when the backend computes stacked weights
// as one product (compute.Stacks); otherwise, or when the weights differ
// in dtype or width, it loads each alone. Either way the i-th result is
// weight prefix+names[i].
func (l *loader) stack(names ...string) []*compute.Tensor {
	out := make([]*compute.Tensor, len(names))
	infos := make([]safetensors.TensorInfo, len(names))
	stackable := compute.Stacks(l.b) && l.err == nil
	for i, name := range names {
		info, ok := l.set.Lookup(l.prefix + name)
		infos[i] = info
		stackable = stackable && ok && len(info.Shape) == 2 && info.DType == infos[0].DType && info.Shape[1] == infos[0].Shape[1]
	}
	if !stackable {
		for i, name := range names {
			out[i] = l.load(name)
		}
		return out
	}
	if t, ok := l.stackRandom(names, infos); ok {
		if t == nil { // l.err says why
			return out
		}
		return l.views(t, infos)
	}
	size := 0
	for _, info := range infos {
		size += info.Shape[0] * info.Shape[1] * info.DType.Size()
	}
	raw := make([]byte, 0, size)
	rows := 0
	for i, name := range names {
		data, err := l.set.Data(l.prefix + name)
		if err != nil {
			l.err = err
			return out
		}
		if want := infos[i].Shape[0] * infos[i].Shape[1] * infos[i].DType.Size(); len(data) != want {
			l.err = fmt.Errorf("tensor %q in %s: %d bytes for %v%v", l.prefix+name, infos[i].File, len(data), infos[i].DType, infos[i].Shape)
			return out
		}
		raw = append(raw, data...)
		rows += infos[i].Shape[0]
	}
	t, err := l.b.Weight(infos[0].DType, []int{rows, infos[0].Shape[1]}, raw)
	if err != nil {
		l.err = fmt.Errorf("tensors %q stacked: %w", names, err)
		return out
	}
	return l.views(t, infos)
}

// views returns the stacked weight t's parts, one a tensor of infos, and
// reports them loaded.
func (l *loader) views(t *compute.Tensor, infos []safetensors.TensorInfo) []*compute.Tensor {
	out := make([]*compute.Tensor, len(infos))
	rows := 0
	for i, info := range infos {
		out[i] = l.b.Slice(t, rows, rows+info.Shape[0])
		rows += info.Shape[0]
		if l.progress != nil {
			l.done += info.Size
			l.progress(l.done, l.total)
		}
	}
	return out
}

// randomFill is how the backend makes the random weight prefix+name at
// element off of its tensor, when it makes random weights itself.
func (l *loader) randomFill(name string, off int) (compute.RandomFill, bool) {
	if l.rw == nil {
		return compute.RandomFill{}, false
	}
	return l.rnd.fill(name, off)
}

// stackRandom makes a stack of random weights on the backend, each part's
// rows filled as loading it alone would.
func (l *loader) stackRandom(names []string, infos []safetensors.TensorInfo) (*compute.Tensor, bool) {
	if l.rw == nil {
		return nil, false
	}
	fills := make([]compute.RandomFill, len(names))
	rows, off := 0, 0
	for i, name := range names {
		f, ok := l.randomFill(l.prefix+name, off)
		if !ok {
			return nil, false
		}
		fills[i] = f
		rows += infos[i].Shape[0]
		off += f.N
	}
	t, err := l.rw.RandomWeight(infos[0].DType, []int{rows, infos[0].Shape[1]}, fills)
	if err != nil {
		l.err = fmt.Errorf("tensors %q stacked: %w", names, err)
		return nil, true
	}
	return t, true
}

// finish reports the load complete (a checkpoint may hold tensors the
// model does not use) and returns the first error.
func (l *loader) finish() error {
	if l.err == nil && l.progress != nil && l.done < l.total {
		l.progress(l.total, l.total)
	}
	return l.err
}

func scaleIn(s float32, w *compute.Tensor) float32 {
	switch w.DType() {
	case compute.BF16:
		return compute.RoundBF16(s)
	case compute.F16:
		return compute.F16ToF32(compute.F32ToF16(s))
	}
	return s
}

func ropeFor(c *TextConfig, layerType string, dim int) *compute.RoPE {
	rp := c.RopeParameters[layerType]
	frac := 1.0
	if rp.RopeType == "proportional" && rp.PartialRotaryFactor != nil {
		frac = float64(*rp.PartialRotaryFactor)
	}
	r := compute.ProportionalRoPE(dim, float64(rp.RopeTheta), frac)
	if rp.Factor != nil && *rp.Factor != 1 {
		for i := range r.InvFreq {
			r.InvFreq[i] /= float32(*rp.Factor)
		}
	}
	return r
}

// DecodeBytes is the weight bytes one single-token forward pass reads: every
// tensor once, except the embedding tables' input rows (one row each; the
// tied embedding is still read whole by the LM head) and, on MoE models,
// only top-k of the experts. Divided into the memory bandwidth it gives the
// decode roofline.
func (m *Model) DecodeBytes() int64 {
	c := &m.Config.Text
	var n int64
	for _, w := range TargetWeights(c, m.prefix) { // the text model's tensors only
		if t, ok := m.set.Lookup(w.Name); ok {
			n += t.Size
		}
	}
	if m.pleEmbed != nil {
		rowBytes := int64(m.pleEmbed.Dim(1) * m.pleEmbed.DType().Size())
		n -= int64(m.pleEmbed.Dim(0)-1) * rowBytes
	}
	if c.EnableMoEBlock {
		for _, l := range m.layers {
			experts := int64(l.expGateUp.Len()*l.expGateUp.DType().Size() + l.expDown.Len()*l.expDown.DType().Size())
			n -= experts - experts*int64(deref(c.TopKExperts))/int64(deref(c.NumExperts))
		}
	}
	return n
}

// Close releases the memory-mapped weights. The model must not be used after.
func (m *Model) Close() error { return m.set.Close() }

// Backend is the backend the weights live on.
func (m *Model) Backend() compute.Backend { return m.b }

// cacheSpecs lists the caches of the non-shared layers, in layer order.
func (m *Model) cacheSpecs() []kvcache.Spec {
	var specs []kvcache.Spec
	for _, l := range m.layers {
		if l.Shared {
			continue
		}
		s := kvcache.Spec{KVHeads: l.KVHeads, HeadDim: l.HeadDim}
		if l.Type == Sliding {
			s.Window = m.Config.Text.SlidingWindow
		}
		specs = append(specs, s)
	}
	return specs
}

// CacheBytes bounds the memory of one sequence's KV cache holding tokens
// positions, written in steps of at most maxStep (kvcache.Bytes).
func (m *Model) CacheBytes(tokens, maxStep int) int64 {
	return kvcache.Bytes(m.cacheSpecs(), tokens, maxStep)
}

// NewCache makes an empty KV cache for one sequence. maxStep is the most
// tokens one Forward call will write (prefill chunk or verify width).
func (m *Model) NewCache(maxStep int) *kvcache.Cache {
	return kvcache.New(m.b, m.cacheSpecs(), maxStep)
}

// Logits selects which positions get LM-head logits.
type Logits uint8

const (
	LogitsLast Logits = iota // only the last position of each row
	LogitsAll                // every position
	LogitsNone               // none (non-final prefill chunks)
)

// Row is one sequence in a forward pass: new tokens appended at the end of
// its cache.
type Row struct {
	Tokens []int32
	// Next, when set, holds the row's new tokens as an I32 tensor [n] on
	// the backend, in place of Tokens: tokens the device chose (an Argmax
	// of this model's logits, a drafter's picks) that the host has not read
	// yet, so the step can be issued before the last one has finished.
	// Either every row of a pass has Next or none has, and the tokens must
	// lie in the vocabulary (see DeviceTokens).
	Next  *compute.Tensor
	Cache *kvcache.Cache
}

// count is how many new tokens the row has.
func (r Row) count() int {
	if r.Next != nil {
		return r.Next.Len()
	}
	return len(r.Tokens)
}

// DeviceTokens reports whether Forward takes a Row.Next token from any
// Argmax of this model's logits: every table looked up by token id has a
// row for each logit.
func (m *Model) DeviceTokens() bool {
	return m.pleEmbed == nil || m.pleEmbed.Dim(0) >= m.embed.Dim(0)
}

// ForwardOptions controls what Forward returns.
type ForwardOptions struct {
	Logits Logits
	// SharedKV asks for the K/V snapshot the assistant drafter reads.
	SharedKV bool
	// Checkpoint records a lone token's pass in parts too, as a pass of
	// several tokens always is (compute.Checkpoint every checkpointLayers
	// layers): for a pass the host records while the device waits for it,
	// such as a sampled decode step, an engine step or a speculative
	// round's verify without drafts. A greedy decode step is issued ahead
	// of the device and needs none.
	Checkpoint bool
	// FirstPart is how many layers a recorded pass takes before its first
	// checkpoint (0: checkpointLayers, as every later part): a speculative
	// round's verify, which the device waits for, starts on the device
	// sooner with a short first part (checkpointAfter).
	FirstPart int
	// Prompt marks a pass of prompt tokens (a prefill chunk, scoring),
	// whose products run at the model's prompt precision
	// (SetPromptPrecision); every row of the pass must be a prompt's.
	Prompt bool
}

// SharedKV is one row's view of the K/V of the last non-shared sliding and
// full layers, after this forward's update (spec §1.11).
type SharedKV struct {
	SlidingK, SlidingV *compute.Tensor
	SlidingPos         []int32 // slot positions (−1: empty); nil means slot s is position s
	SlidingStart       int     // slot holding the oldest entry (reduce from here)
	FullK, FullV       *compute.Tensor
	FullPos            []int32
}

// Output of a forward pass. Row i's positions occupy Offsets[i] up to
// Offsets[i+1] in Hidden (and in Logits with LogitsAll).
type Output struct {
	Hidden   *compute.Tensor // [N, H], after the final norm
	Logits   *compute.Tensor // [N, V] (LogitsAll), [rows, V] (LogitsLast) or nil
	Offsets  []int
	SharedKV []SharedKV // per row, when requested
}

// Forward runs the model over each row's new tokens, appending their K/V to
// the row's cache. All rows share the weight reads of one pass (that is what
// batching buys); attention runs per row against its own cache.
func (m *Model) Forward(rows []Row, opt ForwardOptions) (*Output, error) {
	c := &m.Config.Text
	b := m.b
	var ids, pos []int32
	offsets := []int{0}
	var next *compute.Tensor
	for i, r := range rows {
		if r.Next != nil {
			if (i > 0 && next == nil) || len(r.Tokens) > 0 || r.Next.DType() != compute.I32 || r.Next.Rank() > 1 {
				return nil, fmt.Errorf("forward: device tokens (%v) must be every row's only tokens", r.Next)
			}
			if !m.DeviceTokens() {
				return nil, errors.New("forward: this model's per-layer embedding is smaller than its vocabulary, so it cannot take device tokens")
			}
			if n := r.Next.Reshape(r.Next.Len()); next == nil {
				next = n
			} else {
				next = b.Concat(next, n)
			}
			for j := range r.Next.Len() {
				pos = append(pos, int32(r.Cache.Len()+j))
				ids = append(ids, 0) // a placeholder: only the count is read
			}
		}
		if r.Next == nil && next != nil {
			return nil, fmt.Errorf("forward: row %d has host tokens beside device tokens", i)
		}
		if r.count() == 0 {
			return nil, fmt.Errorf("forward: row %d has no tokens", i)
		}
		if r.count() > r.Cache.MaxStep() {
			return nil, fmt.Errorf("forward: row %d has %d tokens, its cache allows %d per step", i, r.count(), r.Cache.MaxStep())
		}
		if end := r.Cache.Len() + r.count(); end > c.MaxPositionEmbeddings {
			return nil, fmt.Errorf("forward: row %d would reach position %d, beyond max_position_embeddings %d", i, end, c.MaxPositionEmbeddings)
		}
		for j, t := range r.Tokens {
			if t < 0 || int(t) >= c.VocabSize {
				return nil, fmt.Errorf("forward: row %d token %d is %d, outside the vocabulary [0, %d)", i, j, t, c.VocabSize)
			}
			ids = append(ids, t)
			pos = append(pos, int32(r.Cache.Len()+j))
		}
		offsets = append(offsets, len(ids))
	}

	// A prompt pass's layers run at the prompt precision; its LM head does
	// not, so that its logits are the bits Logits gives on its hidden rows
	// (the engine takes a prompt's last logits so).
	exact := func() {} // restores the precision; the deferred call repeats it harmlessly
	if opt.Prompt && m.prompt != compute.PrecisionExact {
		prev, err := compute.SetPrecision(b, m.prompt)
		if err != nil {
			return nil, fmt.Errorf("forward: %w", err)
		}
		exact = func() { compute.SetPrecision(b, prev) }
		defer exact()
	}
	lookup := func(table *compute.Tensor) *compute.Tensor {
		if next != nil {
			return b.GatherAt(table, next)
		}
		return b.Gather(table, ids)
	}
	x := b.Scale(lookup(m.embed), m.embedScale) // [N, H]
	var ple *compute.Tensor                     // [N, layers, P]
	if c.HasPLE() {
		ple = m.perLayerInputs(lookup(m.pleEmbed), x)
	}
	views := make([][]compute.AttentionRow, len(m.layers))
	eps := float32(c.RMSNormEps)
	// A layer boundary's norms run as one op where they meet
	// (compute.AddRMSNormNorm): the residual add after attention with the
	// FFN's input norm, and the layer's last residual add (after the FFN,
	// or after the per-layer input) and its scalar with the next layer's
	// input norm, or the final norm. h is the layer's normed input, at the
	// end the final hidden.
	// Each intermediate goes back to the backend once its last reader is
	// issued (compute.Recycle): the residual stream and its norms as the
	// next ones replace them, a sub-block's output once added.
	h := b.RMSNorm(x, m.layers[0].inNorm, eps)
	for i := range m.layers {
		l := &m.layers[i]
		a := m.attention(l, h, pos, rows, offsets, views, i)
		x0, h0 := x, h
		x, h = compute.AddRMSNormNorm(b, x, a, l.postAttnNorm, nil, l.preFFNorm, eps)
		compute.Recycle(b, a, x0, h0)
		f, fNorm := m.feedForward(l, x, h), l.postFFNorm
		compute.Recycle(b, h)
		if ple != nil {
			x0 = x
			x = compute.AddRMSNorm(b, x, f, fNorm, eps)
			in := m.pleSlice(ple, i)
			g := compute.GeluMatMulBy(b, x, l.pleGate, in) // GeluTanh(gate)·ple
			compute.Recycle(b, x0, f)
			if ple.Dim(0) > 1 { // pleSlice gathered it; one token's is a view of ple
				compute.Recycle(b, in)
			}
			f, fNorm = b.MatMul(g, l.pleProj), l.plePostNorm
			compute.Recycle(b, g)
		}
		nextNorm := m.norm // the final norm after the last layer
		if i+1 < len(m.layers) {
			nextNorm = m.layers[i+1].inNorm
		}
		x0 = x
		x, h = compute.AddRMSNormNorm(b, x, f, fNorm, l.scalar, nextNorm, eps)
		compute.Recycle(b, x0, f)
		if (len(ids) > 1 || opt.Checkpoint) && checkpointAfter(i+1, opt.FirstPart) && i+1 < len(m.layers) {
			compute.Checkpoint(b)
		}
	}
	exact()
	compute.Recycle(b, x) // h, the final norm's, is the output
	if ple != nil {
		compute.Recycle(b, ple)
	}
	for _, r := range rows {
		r.Cache.Advance(r.count())
	}
	out := &Output{Hidden: h, Offsets: offsets}
	switch opt.Logits {
	case LogitsAll:
		out.Logits = m.lmHead(out.Hidden)
	case LogitsLast:
		last := make([]int32, len(rows))
		for i := range rows {
			last[i] = int32(offsets[i+1] - 1)
		}
		out.Logits = m.lmHead(b.Gather(out.Hidden, last))
	}
	if opt.SharedKV {
		for ri := range rows {
			var s SharedKV
			for i, l := range m.layers {
				if l.Shared || views[i] == nil {
					continue
				}
				v := views[i][ri]
				if l.Type == Sliding {
					s.SlidingK, s.SlidingV, s.SlidingPos, s.SlidingStart = v.K, v.V, v.KeyPos, v.KeyStart
				} else {
					s.FullK, s.FullV, s.FullPos = v.K, v.V, v.KeyPos
				}
			}
			out.SharedKV = append(out.SharedKV, s)
		}
	}
	return out, nil
}

// Logits applies the LM head (the tied embedding and the final softcap) to
// post-norm hidden states [n, H]. Row for row, it gives the bits a forward
// pass with logits would have given, so callers may defer the head to the
// rows they need (a speculative walk stops at the first rejection).
func (m *Model) Logits(h *compute.Tensor) *compute.Tensor { return m.lmHead(h) }

// lmHead applies the tied embedding and the final softcap.
func (m *Model) lmHead(h *compute.Tensor) *compute.Tensor {
	logits := m.b.MatMul(h, m.embed)
	if sc := m.Config.Text.FinalLogitSoftcapping; sc != nil {
		logits = m.b.Softcap(logits, float32(*sc))
	}
	return logits
}

// perLayerInputs computes PLE (spec §1.3): (RMSNorm(proj(h0)·H^-½) +
// embed_per_layer(ids)·√P) · 2^-½, as [N, layers·P], from the ids' rows
// of the per-layer embedding.
func (m *Model) perLayerInputs(rows, h0 *compute.Tensor) *compute.Tensor {
	c := &m.Config.Text
	b := m.b
	N, L, P := rows.Dim(0), c.NumHiddenLayers, c.HiddenSizePerLayer
	tok := b.Scale(rows, m.pleScale)
	ctx := b.Scale(b.MatMul(h0, m.pleProj), float32(1/math.Sqrt(float64(c.HiddenSize))))
	ctx = b.RMSNorm(ctx.Reshape(N*L, P), m.pleNorm, float32(c.RMSNormEps)).Reshape(N, L*P)
	return b.Scale(b.Add(ctx, tok), float32(1/math.Sqrt2))
}

// pleSlice picks layer i's per-layer input, [N, P], from [N, layers·P].
func (m *Model) pleSlice(ple *compute.Tensor, i int) *compute.Tensor {
	c := &m.Config.Text
	N, L, P := ple.Dim(0), c.NumHiddenLayers, c.HiddenSizePerLayer
	if N == 1 { // a decode step: the layer's values are contiguous, a view
		return m.b.Slice(ple.Reshape(L, P), i, i+1)
	}
	rows := make([]int32, N)
	for n := range rows {
		rows[n] = int32(n*L + i)
	}
	return m.b.Gather(ple.Reshape(N*L, P), rows)
}

// attention runs layer i's attention for every row (spec §1.5). It writes
// the layer's new K/V into each row's cache and records what each row
// attended to in views[i] (its own cache after this pass's write, or its
// source layer's when KV-shared), which KV-shared layers and the drafter
// reuse.
func (m *Model) attention(l *layer, h *compute.Tensor, pos []int32, rows []Row, offsets []int, views [][]compute.AttentionRow, i int) *compute.Tensor {
	c := &m.Config.Text
	b := m.b
	eps := float32(c.RMSNormEps)
	N, nH, d := h.Dim(0), c.NumAttentionHeads, l.HeadDim
	rope := l.rope
	var proj []*compute.Tensor // q, then k and v of layers with their own KV
	if l.Shared {
		proj = []*compute.Tensor{b.MatMul(h, l.q)}
	} else if proj = compute.MatMuls(b, h, l.projections()...); l.KEqV {
		proj = append(proj, proj[1]) // values are the raw key projection
	}
	var q, kNew, vNew *compute.Tensor
	var dst []compute.KVRun // the rows' cache slots, where each row's run is contiguous
	if !l.Shared {
		for ri, r := range rows {
			run, ok := r.Cache.Layer(m.cacheOf[i]).Slots(r.Cache.Len(), offsets[ri+1]-offsets[ri])
			if !ok { // a ring's write that wraps: every row writes its keys by copy
				dst = nil
				break
			}
			dst = append(dst, run)
		}
	}
	qkv := compute.HeadNorms{Q: proj[0].Reshape(N, nH, d), QW: l.qNorm, Eps: eps, Pos: pos, RoPE: rope}
	if !l.Shared {
		qkv.K, qkv.V, qkv.KW, qkv.Dst = proj[1].Reshape(N, l.KVHeads, d), proj[2].Reshape(N, l.KVHeads, d), l.kNorm, dst
		if dst == nil {
			q, kNew, vNew = compute.QKVNorms(b, qkv.Q, qkv.K, qkv.V, qkv.QW, qkv.KW, eps, pos, rope, nil)
		}
	}
	views[i] = make([]compute.AttentionRow, len(rows))
	for ri, r := range rows {
		if l.Shared {
			views[i][ri] = views[l.KVSource][ri]
			continue
		}
		s, e := offsets[ri], offsets[ri+1]
		cl := r.Cache.Layer(m.cacheOf[i])
		if dst == nil {
			cl.Write(r.Cache.Len(), b.Slice(kNew, s, e), b.Slice(vNew, s, e))
		}
		kv := &views[i][ri]
		kv.K, kv.V, kv.KeyPos, kv.KeyStart = cl.View(r.Cache.Len() + e - s) // Slots recorded the new positions
	}
	opt := compute.AttentionOptions{Scale: 1, Mask: compute.Causal}
	if l.Type == Sliding {
		opt.Window = c.SlidingWindow
	}
	var out *compute.Tensor
	if q == nil && len(rows) > 0 && oneLength(offsets) {
		// Rows of one length whose keys (if the layer has its own) go
		// into their caches in place: the norms and attention as one op,
		// which a backend may fold (decode).
		o := opt
		o.QueryPos = pos
		out = compute.NormedAttention(b, qkv, views[i], o)
		out = out.Reshape(N, nH, out.Dim(-1))
	} else {
		if q == nil {
			q = compute.NormHeads(b, qkv)
		}
		out = attendRuns(b, q, pos, offsets, views[i], opt)
	}
	y := b.MatMul(out.Reshape(N, nH*d), l.o)
	// The projections (views of one product where stacked), the normed
	// queries, keys and values (written into the caches by now) and the
	// attention's output are all read.
	compute.Recycle(b, append(proj, q, kNew, vNew, out)...)
	return y
}

// oneLength reports whether every row (offsets[ri]..offsets[ri+1]) has
// the first's length.
func oneLength(offsets []int) bool {
	for ri := 1; ri+1 < len(offsets); ri++ {
		if offsets[ri+1]-offsets[ri] != offsets[1]-offsets[0] {
			return false
		}
	}
	return true
}

// attendRuns attends each row's queries (rows offsets[ri]..offsets[ri+1]
// of q, at positions pos) to its keys and values kv[ri]: rows of the same
// length side by side in one call (compute.AttendRows), each result the
// row's own Attention's. opt holds the mask, scale and window.
func attendRuns(b compute.Backend, q *compute.Tensor, pos []int32, offsets []int, kv []compute.AttentionRow, opt compute.AttentionOptions) *compute.Tensor {
	N, nH, d := q.Dim(0), q.Dim(1), q.Dim(2)
	var out *compute.Tensor
	for r0 := 0; r0 < len(kv); {
		L := offsets[r0+1] - offsets[r0]
		r1 := r0 + 1
		for r1 < len(kv) && offsets[r1+1]-offsets[r1] == L {
			r1++
		}
		s, e := offsets[r0], offsets[r1]
		o := opt
		o.QueryPos = pos[s:e]
		a := compute.AttendRows(b, b.Slice(q, s, e).Reshape(r1-r0, L, nH, d), kv[r0:r1], o)
		a = a.Reshape(e-s, nH, a.Dim(-1))
		if s == 0 && e == N { // one run: its attention is the whole output
			return a
		}
		if out == nil {
			out = b.Zeros(compute.F32, N, nH, a.Dim(-1))
		}
		b.Copy(out, s, a)
		r0 = r1
	}
	return out
}

// projections are the weights of the layer's first product: q, and k
// and v where the layer has its own keys and values.
func (l *layer) projections() []*compute.Tensor {
	switch {
	case l.Shared:
		return []*compute.Tensor{l.q}
	case l.KEqV:
		return []*compute.Tensor{l.q, l.k}
	}
	return []*compute.Tensor{l.q, l.k, l.v}
}

// checkpointLayers is how many layers a recorded pass of several tokens
// (a CUDA graph) captures before launching them and recording the rest: a
// verify pass, which the host cannot issue ahead, then starts on the device
// while the host is still recording its later layers. A lone token's step
// is issued ahead of the device already and is split only when asked
// (ForwardOptions.Checkpoint: a sampled step, an engine step, a verify
// without drafts).
const checkpointLayers = 6

// checkpointAfter reports whether a recorded pass checkpoints after its
// first n layers: after the first part's (first, or checkpointLayers where
// first is not positive), then every checkpointLayers layers.
func checkpointAfter(n, first int) bool {
	if first <= 0 {
		first = checkpointLayers
	}
	return n == first || n > first && (n-first)%checkpointLayers == 0
}

// feedForward is the FFN sub-block before post_feedforward_layernorm: the
// gated MLP, plus the MoE branch on MoE models (spec §1.8). x is the
// residual stream and h its pre_feedforward_layernorm.
func (m *Model) feedForward(l *layer, x, h *compute.Tensor) *compute.Tensor {
	c := &m.Config.Text
	b := m.b
	eps := float32(c.RMSNormEps)
	f := b.MatMul(compute.GeluMatMuls(b, h, l.gate, l.up), l.down)
	if !c.EnableMoEBlock {
		return f
	}
	return compute.AddRMSNorm(b, b.RMSNorm(f, l.postFF1, eps), m.experts(l, x), l.postFF2, eps)
}

// experts routes each token to its top-k experts and sums their weighted
// outputs. Experts are visited in ascending id, so every token's sum has the
// same order whatever else is in the batch. On a backend that routes on the
// device (compute.Router) the choice is never read back and each token's
// products are computed as a lone token's (every op is batch-invariant, so
// the bits are the host path's). The gate and up projections of an expert
// are one product where the backend stacks (compute.MatMuls), on both paths.
func (m *Model) experts(l *layer, r *compute.Tensor) *compute.Tensor {
	c := &m.Config.Text
	b := m.b
	N, H := r.Dim(0), c.HiddenSize
	if rt, ok := b.(compute.Router); ok && l.expertScale != nil && rt.Routes(l.expGateUp, N) && rt.Routes(l.expDown, N) {
		return m.routedExperts(rt, l, r)
	}
	if g, ok := b.(compute.ExpertGrouper); ok && l.expertScale != nil && g.GroupsExperts(l.expGateUp) && g.GroupsExperts(l.expDown) {
		return m.groupedExperts(g, l, r)
	}
	eps := float32(c.RMSNormEps)
	E, K, I := deref(c.NumExperts), deref(c.TopKExperts), deref(c.MoEIntermediateSize)
	vals, idx := m.route(l, r)
	weights, experts := b.ToF32(vals), b.ToI32(idx)
	perExpert := l.perExpert
	tokens := make([][]int32, E)
	scales := make([][]float32, E)
	for n := range N {
		var sum float32
		for j := range K {
			sum += weights[n*K+j]
		}
		for j := range K {
			e := experts[n*K+j]
			tokens[e] = append(tokens[e], int32(n))
			scales[e] = append(scales[e], weights[n*K+j]/sum*perExpert[e])
		}
	}
	x2 := b.RMSNorm(r, l.preFF2, eps)
	out := b.Zeros(compute.F32, N, H)
	for e := range E {
		if len(tokens[e]) == 0 {
			continue
		}
		xe := b.Gather(x2, tokens[e])
		gu := b.Index(l.expGateUp, e) // [2I, H]: gate rows first, then up
		p := compute.MatMuls(b, xe, b.Slice(gu, 0, I), b.Slice(gu, I, 2*I))
		act := b.GeluMul(p[0], p[1])
		b.AddRows(out, b.MatMul(act, b.Index(l.expDown, e)), tokens[e], scales[e])
	}
	return out
}

// groupedExperts is experts on a backend that groups a pass's expert
// products (compute.ExpertGrouper): routed on the device as routedExperts
// routes, each product one launch for every expert, no route read back.
// Each row's product is that row's alone and the adds run in ascending
// expert order, so an exact pass has the host path's bits; a bf16 pass has
// the product kernels' arithmetic on rounded activations where the host
// path took cuBLASLt's, the same bits however the prompt is chunked.
func (m *Model) groupedExperts(g compute.ExpertGrouper, l *layer, r *compute.Tensor) *compute.Tensor {
	c := &m.Config.Text
	b := m.b
	N, E, K, I, H := r.Dim(0), deref(c.NumExperts), deref(c.TopKExperts), deref(c.MoEIntermediateSize), c.HiddenSize
	vals, idx := m.route(l, r)
	experts, scales := g.RouteExperts(vals, idx, l.expertScale)
	x2 := b.RMSNorm(r, l.preFF2, float32(c.RMSNormEps))
	groups := g.GroupExperts(experts, E)
	gu := g.MatMulGrouped(x2, l.expGateUp, groups, 0, 2*I) // [N·k, 2I]: gate, then up
	act := m.gateUp(gu, N*K, I)
	y := g.MatMulGrouped(act, l.expDown, groups, 0, H)
	out := g.SumExperts(y, scales)
	compute.Recycle(b, x2, gu, act, y, groups)
	return out
}

// route is the router: each token's top-k expert probabilities and ids.
func (m *Model) route(l *layer, r *compute.Tensor) (vals, idx *compute.Tensor) {
	c := &m.Config.Text
	b := m.b
	z := b.Scale(b.Mul(b.RMSNorm(r, nil, float32(c.RMSNormEps)), l.routerScale), float32(1/math.Sqrt(float64(c.HiddenSize))))
	return b.TopK(b.Softmax(b.MatMul(z, l.routerProj)), deref(c.TopKExperts))
}

// routedExperts is experts on the device: slot j of every token's
// ascending experts at once, each token's product its own, or every slot
// at once where the backend batches them (compute.ExpertBatcher).
func (m *Model) routedExperts(rt compute.Router, l *layer, r *compute.Tensor) *compute.Tensor {
	c := &m.Config.Text
	b := m.b
	N, K, I, H := r.Dim(0), deref(c.TopKExperts), deref(c.MoEIntermediateSize), c.HiddenSize
	vals, idx := m.route(l, r)
	experts, scales := rt.RouteExperts(vals, idx, l.expertScale)
	x2 := b.RMSNorm(r, l.preFF2, float32(c.RMSNormEps))
	if eb, ok := rt.(compute.ExpertBatcher); ok && eb.BatchesExperts() {
		gu := eb.MatMulExperts(x2, l.expGateUp, experts, 0, 2*I)
		return eb.SumExperts(eb.MatMulExperts(m.gateUp(gu, N*K, I), l.expDown, experts, 0, H), scales)
	}
	out := b.Zeros(compute.F32, N, H)
	for j := range K {
		gu := rt.MatMulAt(x2, l.expGateUp, experts, j, 0, 2*I)
		rt.AddRowAt(out, rt.MatMulAt(m.gateUp(gu, N, I), l.expDown, experts, j, 0, H), scales, j)
	}
	return out
}

// gateUp is the expert activation of n rows of one product each [n, 2I],
// gate first then up: GeluMul of its halves, which as rows of I are rows
// 2i and 2i+1.
func (m *Model) gateUp(gu *compute.Tensor, n, I int) *compute.Tensor {
	b := m.b
	gu = gu.Reshape(2*n, I)
	if n == 1 {
		return b.GeluMul(b.Slice(gu, 0, 1), b.Slice(gu, 1, 2))
	}
	ids, ok := m.halves.Load(n)
	if !ok {
		gates, ups := make([]int32, n), make([]int32, n)
		for i := range n {
			gates[i], ups[i] = int32(2*i), int32(2*i+1)
		}
		ids, _ = m.halves.LoadOrStore(n, [2]*compute.Tensor{b.FromI32(gates, n), b.FromI32(ups, n)})
	}
	h := ids.([2]*compute.Tensor)
	return b.GeluMul(b.GatherAt(gu, h[0]), b.GatherAt(gu, h[1]))
}
