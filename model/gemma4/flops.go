package gemma4

import "tandem/compute"

// PrefillFLOPs is the useful arithmetic of a prompt pass of n tokens from
// an empty cache, two operations a multiply-add: each token's products
// with the weights it takes (its layers' projections and MLPs, the router
// and the top-k experts it is routed to, the per-layer inputs), the LM
// head once (a prompt's last logits), and attention over the keys each
// query sees (the scores and the value sums; causal, within a sliding
// layer's window). Norms, rotations, softmaxes and gathers are left out,
// as FLOP counts usually leave them. bench divides it by a prefill's time
// for its share of the device's tensor-core peak.
func (m *Model) PrefillFLOPs(n int) float64 {
	c := &m.Config.Text
	perToken := elements(m.pleProj)
	var attention float64
	for i := range m.layers {
		l := &m.layers[i]
		perToken += elements(l.q, l.k, l.v, l.o, l.gate, l.up, l.down, l.pleGate, l.pleProj, l.routerProj)
		if l.expGateUp != nil {
			// Every token takes exactly k of the E experts.
			perToken += elements(l.expGateUp, l.expDown) * float64(deref(c.TopKExperts)) / float64(deref(c.NumExperts))
		}
		attention += 2 * float64(c.NumAttentionHeads) * float64(2*l.HeadDim) * seenKeys(n, l.Type == Sliding, c.SlidingWindow)
	}
	return 2*perToken*float64(n) + 2*elements(m.embed) + attention
}

// seenKeys is how many keys n queries at positions 0 … n−1 see in all:
// p + 1 each, at most window in a sliding layer.
func seenKeys(n int, sliding bool, window int) float64 {
	w := n
	if sliding && window > 0 {
		w = min(n, window)
	}
	// Queries 0 … w−1 see 1 … w keys; the other n − w see w each.
	return float64(w)*float64(w+1)/2 + float64(n-w)*float64(w)
}

// elements sums the tensors' element counts (nil: none).
func elements(ts ...*compute.Tensor) float64 {
	var s float64
	for _, t := range ts {
		if t != nil {
			s += float64(t.Len())
		}
	}
	return s
}
