package bench

import "testing"

func TestStealPct(t *testing.T) {
	a := cpuTimes{total: 1000, steal: 100, ok: true}
	b := cpuTimes{total: 1400, steal: 200, ok: true}
	if got := stealPct(a, b); got != 25 {
		t.Errorf("stealPct = %v, want 25", got)
	}
	for _, c := range []struct{ a, b cpuTimes }{{cpuTimes{}, b}, {a, cpuTimes{}}, {a, a}} {
		if got := stealPct(c.a, c.b); got != -1 {
			t.Errorf("stealPct(%+v, %+v) = %v, want -1", c.a, c.b, got)
		}
	}
	// On Linux the machine's counters read, and only move forward.
	if now := readCPUTimes(); now.ok && (now.total == 0 || now.steal > now.total) {
		t.Errorf("readCPUTimes() = %+v: not counters of CPU time", now)
	}
}
