package cuda

import (
	"slices"
	"testing"
	"time"
)

// The gap analysis must charge the host only for idle time after the
// previous kernel ended and before the next was issued, and name the
// synchronous calls that ran between the two launches.
func TestGapsOf(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	spans := []span{
		{"a", us(10), us(20), us(5)},
		{"b", us(20), us(30), us(6)},   // back to back: no gap
		{"c", us(50), us(60), us(45)},  // 20 µs idle; issued 15 µs after b ended
		{"d", us(70), us(100), us(55)}, // 10 µs idle; issued before c ended: the device's own gap
	}
	calls := []hostCall{
		{"(*Device).Alloc", us(7), us(9)},      // between b's and c's launches
		{"(*Device).Download", us(31), us(44)}, // also between them
		{"(*Device).Sync", us(62), us(64)},     // after d's launch: not listed
	}
	var p Profile
	gapsOf(spans, calls, &p)
	if p.Idle != us(30) || p.HostBound != us(15) {
		t.Fatalf("idle %v, host-bound %v; want 30µs and 15µs", p.Idle, p.HostBound)
	}
	if len(p.Gaps) != 2 {
		t.Fatalf("%d gaps, want 2: %+v", len(p.Gaps), p.Gaps)
	}
	g := p.Gaps[0]
	if g.After != "b" || g.Before != "c" || g.Idle != us(20) || g.HostLate != us(15) ||
		g.HostCalls != "(*Device).Alloc 2µs, (*Device).Download 13µs" {
		t.Errorf("longest gap %+v", g)
	}
	if g := p.Gaps[1]; g.After != "c" || g.HostLate != 0 || g.HostCalls != "" {
		t.Errorf("second gap %+v", g)
	}
}

// sumBy is how a profile totals kernels and recording sites: every call
// counted under its key, longest total first, ties in key order.
func TestSumBy(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	got := sumBy([]string{"verify-at4", "draft-at0", "verify-at4", "", "draft-at1", "draft-at1"},
		[]time.Duration{us(30), us(5), us(20), us(1), us(3), us(2)})
	want := []KernelTime{{"verify-at4", 2, us(50)}, {"draft-at0", 1, us(5)}, {"draft-at1", 2, us(5)}, {"", 1, us(1)}}
	if len(got) != len(want) {
		t.Fatalf("sumBy = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sumBy[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestSumBySite protects the kernel profile's breakdown of each recording
// site: a site's kernels totalled as sumBy totals them, and no kernel
// counted under another site.
func TestSumBySite(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	got := sumBySite([]string{"verify-at4", "draft-at0", "verify-at4", "draft-at0", "verify-at4"},
		[]string{"matmul", "matmul", "rmsnorm2", "matmul", "matmul"},
		[]time.Duration{us(30), us(5), us(20), us(4), us(10)})
	want := map[string][]KernelTime{
		"verify-at4": {{"matmul", 2, us(40)}, {"rmsnorm2", 1, us(20)}},
		"draft-at0":  {{"matmul", 2, us(9)}},
	}
	if len(got) != len(want) {
		t.Fatalf("sumBySite = %+v, want %+v", got, want)
	}
	for site, ks := range want {
		if !slices.Equal(got[site], ks) {
			t.Errorf("%s: %+v, want %+v", site, got[site], ks)
		}
	}
}
