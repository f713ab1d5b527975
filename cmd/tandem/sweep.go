package main

import (
	"fmt"
	"os"
	"strings"

	"tandem/compute/cuda"
	"tandem/engine"
	"tandem/sample"
	"tandem/spec"
)

// sweepGroup is one setting of bench --sweep: the environment variables
// set for its runs ("none": the settings the process started with).
type sweepGroup struct {
	name string
	env  [][2]string
}

// parseSweep reads --sweep: groups separated by ";", each TANDEM_NAME=VALUE
// pairs separated by ","; "none" is the process's own settings, and empty
// groups are skipped (a 31B group costs seconds of device time). Only
// switches read at every call can change within a process: the CUDA
// backend's live ones (cuda.Live), the speculative loop's (spec.Live),
// the engine's (engine.Live) and sampling's (sample.TopsEnv).
// Without a sweep there is one group, the process's own settings, unnamed.
func parseSweep(s string) ([]sweepGroup, error) {
	var gs []sweepGroup
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if part == "none" {
			gs = append(gs, sweepGroup{name: "none"})
			continue
		}
		g := sweepGroup{name: part}
		for _, kv := range strings.Split(part, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			switch {
			case !ok || !strings.HasPrefix(k, "TANDEM_"):
				return nil, fmt.Errorf("--sweep: %q is not TANDEM_NAME=VALUE", kv)
			case !cuda.Live(k) && !spec.Live(k) && !engine.Live(k) && k != sample.TopsEnv:
				return nil, fmt.Errorf("--sweep: %s is not a switch read at every call (one read once at start-up goes in the environment for the whole run)", k)
			}
			g.env = append(g.env, [2]string{k, v})
		}
		gs = append(gs, g)
	}
	if len(gs) == 0 {
		return []sweepGroup{{}}, nil
	}
	return gs, nil
}

// apply sets g's variables and returns what puts them back.
func (g sweepGroup) apply() (undo func()) {
	var undos []func()
	for _, kv := range g.env {
		name := kv[0]
		old, had := os.LookupEnv(name)
		os.Setenv(name, kv[1])
		undos = append(undos, func() {
			if had {
				os.Setenv(name, old)
			} else {
				os.Unsetenv(name)
			}
		})
	}
	return func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
}
