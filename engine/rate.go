package engine

import "time"

// rateSpan is the window DecodeTokensRate averages over: long enough to
// smooth over steps, short enough to show a change of load.
const rateSpan = 10 * time.Second

// rateWindow remembers recent steps' generated tokens.
type rateWindow struct {
	steps []rateStep
}

type rateStep struct {
	start, end time.Time
	tokens     int
}

func (w *rateWindow) add(start, end time.Time, tokens int) {
	w.steps = append(w.steps, rateStep{start, end, tokens})
	w.trim(end)
}

// trim forgets steps that ended before the window.
func (w *rateWindow) trim(now time.Time) {
	i := 0
	for i < len(w.steps) && now.Sub(w.steps[i].end) > rateSpan {
		i++
	}
	w.steps = w.steps[i:]
}

// rate is the tokens of the steps that ended within the window over the
// time from the first of them starting until now (idle time included).
func (w *rateWindow) rate(now time.Time) float64 {
	w.trim(now)
	if len(w.steps) == 0 {
		return 0
	}
	var n int
	for _, s := range w.steps {
		n += s.tokens
	}
	d := now.Sub(w.steps[0].start).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(n) / d
}
