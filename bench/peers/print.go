package peers

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
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
	// Memory is the memory workload's measurement, or nil.
	Memory *MemoryStats `json:"memory,omitempty"`
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
		_ = bench.WriteTableHeader(&b, "PEER") // a strings.Builder never fails
	}
	if r.Settings != p.lastSettings {
		p.lastSettings = r.Settings
		fmt.Fprintf(&b, "# %s: %s\n", r.Store, r.Settings)
	}
	_ = bench.WriteTableRow(&b, r.Store, r.Result)
	if m := r.Memory; m != nil {
		fmt.Fprintf(&b, "# %s: used_memory %+.1f bytes per job (%d → %d), dataset %+.1f bytes per job; args padded by %d bytes\n",
			r.Store, m.BytesPerJob, m.UsedBefore, m.UsedAfter, m.DatasetBytesPerJob, m.PayloadBytes)
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}
