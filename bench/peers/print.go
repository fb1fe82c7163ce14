package peers

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"

	"github.com/sortiehq/sortie/bench"
)

// Result is one result with the peer that made it: bench.Result's fields
// and the peer's name, configuration, version and settings.
type Result struct {
	bench.Result
	Peer     string `json:"peer"`
	Config   string `json:"config,omitempty"`
	Version  string `json:"version"`
	Settings string `json:"settings"`
}

// printer prints results as they come, in the table of `sortie bench`
// (one row per workload) or as JSON lines. Above the rows it prints the
// peer's version, and the settings whenever they change.
type printer struct {
	w            io.Writer
	json         bool
	wroteHdr     bool
	lastSettings string
}

// tableFormat is sortie bench's row layout, so that the two tables line up.
const tableFormat = "%-20s  %-14s  %8s  %7s  %9s  %8s  %11s  %8s  %8s  %8s  %s\n"

func (p *printer) print(r Result) error {
	if p.json {
		return json.NewEncoder(p.w).Encode(r)
	}
	var b strings.Builder
	if !p.wroteHdr {
		p.wroteHdr = true
		runs := ""
		if r.Runs > 1 {
			runs = fmt.Sprintf(" · each figure the median of %d runs", r.Runs)
		}
		fmt.Fprintf(&b, "# peerbench · %s · %s %s/%s · %d CPUs%s\n", r.Version, r.GoVersion, runtime.GOOS, runtime.GOARCH, r.CPUs, runs)
		fmt.Fprintf(&b, tableFormat, "PEER", "WORKLOAD", "JOBS", "WORKERS", "PRODUCERS", "SECONDS", "JOBS/S", "P50 MS", "P95 MS", "P99 MS", "LATENCY OF")
	}
	if r.Settings != p.lastSettings {
		p.lastSettings = r.Settings
		fmt.Fprintf(&b, "# %s: %s\n", r.Store, r.Settings)
	}
	latency := "-"
	if r.LatencyOf != "" {
		latency = r.LatencyOf
	}
	fmt.Fprintf(&b, tableFormat,
		r.Store, r.Workload, strconv.Itoa(r.Jobs), dash(r.Workers), dash(r.Producers),
		strconv.FormatFloat(r.Seconds, 'f', 3, 64), thousands(r.JobsPerSec),
		msec(r.P50ms, r.LatencyOf), msec(r.P95ms, r.LatencyOf), msec(r.P99ms, r.LatencyOf), latency)
	_, err := io.WriteString(p.w, b.String())
	return err
}

func dash(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func msec(v float64, latency string) string {
	if latency == "" {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// thousands formats v rounded to an integer with commas: 1234567 → "1,234,567".
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
