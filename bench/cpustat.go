package bench

import (
	"os"
	"strconv"
	"strings"
)

// cpuTimes are the machine's CPU time counters since boot, in clock ticks:
// all of them, and steal (time a virtual machine's CPUs were ready to run
// but the hypervisor ran something else).
type cpuTimes struct {
	total, steal uint64
	ok           bool
}

// readCPUTimes reads the first line of /proc/stat; ok is false where it is
// not there.
func readCPUTimes() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice]:
	// guest time is counted in user time already.
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, s := range f[1:9] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}
		}
		t.total += n
		if i == 7 {
			t.steal = n
		}
	}
	t.ok = true
	return t
}

// stealPct returns the share of the CPU time between a and b that was
// stolen, in percent, or -1 when either reading failed or no time passed.
func stealPct(a, b cpuTimes) float64 {
	if !a.ok || !b.ok || b.total <= a.total {
		return -1
	}
	return 100 * float64(b.steal-a.steal) / float64(b.total-a.total)
}
