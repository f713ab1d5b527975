package engine

import (
	"math/bits"
	"time"
)

// Adaptive drafting (Config.AdaptiveDrafts). A batch's drafts are verify
// rows in every product of the step: four requests verifying four tokens
// each are a 16-row product where plain decoding is a 4-row one, so at low
// acceptance drafting makes a busy engine slower (31B on the H200, four
// requests at synthetic acceptance 0: 0.45× plain; at 0.8, 1.24×). The
// engine therefore measures, for each class of batch sizes, the tokens a
// second of recent steps in which greedy requests drafted and of steps in
// which they did not, takes the faster, and tries the other now and then. A greedy
// request's output is the same either way (the verify decides it); a
// sampled request always drafts, since its random draws differ between the
// two and a seed must give one output.

const (
	adaptWarm   = 3   // steps measured in each mode before choosing
	adaptProbe  = 32  // steps between tries of the slower mode
	adaptTries  = 2   // steps a try lasts
	adaptWeight = 0.2 // the newest step's weight in a mode's rate
)

// adaptive holds the measured rates. Scheduler goroutine only.
type adaptive struct {
	now   func() time.Time
	sizes map[int]*modeRates // by batch size class (sizeClass)
}

// sizeClass groups batch sizes by their power of two (1, 2–3, 4–7, …):
// a step's cost grows with its rows in steps like these, and each class
// is measured on its own.
func sizeClass(n int) int { return bits.Len(uint(n)) }

// modeRates is one class of batch sizes' record: the rates (a request's
// tokens a second) of steps without drafts [0] and with them [1], how many
// steps each has measured, and how many steps were decided.
type modeRates struct {
	rate    [2]float64
	seen    [2]int
	decided int
}

func newAdaptive() *adaptive {
	return &adaptive{now: time.Now, sizes: map[int]*modeRates{}}
}

// draft reports whether greedy requests draft in a step of n requests:
// each mode is measured adaptWarm times, drafting first (the engine's
// behaviour without the policy); then the faster, except for adaptTries
// steps in every adaptProbe, which take the slower, so that a change (of
// the requests' acceptance, of the contexts) is seen.
func (a *adaptive) draft(n int) bool {
	m := a.sizes[sizeClass(n)]
	if m == nil {
		m = &modeRates{}
		a.sizes[sizeClass(n)] = m
	}
	switch {
	case m.seen[1] < adaptWarm:
		return true
	case m.seen[0] < adaptWarm:
		return false
	}
	m.decided++
	faster := m.rate[1] >= m.rate[0]
	if m.decided%adaptProbe < adaptTries {
		return !faster
	}
	return faster
}

// observe records a step of n requests, with drafts or not, that emitted
// tokens in d. Rates are a request's (tokens a second over n), so that the
// sizes of one class compare; a mode's first step is not counted in its
// rate (a new step shape pays for its first recording: a CUDA graph).
func (a *adaptive) observe(n int, drafted bool, tokens int, d time.Duration) {
	m := a.sizes[sizeClass(n)]
	if m == nil || d <= 0 || n <= 0 {
		return
	}
	i := 0
	if drafted {
		i = 1
	}
	r := float64(tokens) / d.Seconds() / float64(n)
	switch m.seen[i] {
	case 0:
	case 1:
		m.rate[i] = r
	default:
		m.rate[i] += adaptWeight * (r - m.rate[i])
	}
	m.seen[i]++
}
