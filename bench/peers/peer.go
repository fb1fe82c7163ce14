package peers

import (
	"context"
	"runtime/debug"

	"github.com/sortiehq/sortie/bench"
)

// Peer is a job queue the workloads run against.
type Peer interface {
	// Name names the peer in results: "river", "river-raw", "backlite".
	Name() string
	// Config names the peer's configuration ("river-bench"), or is empty.
	Config() string
	// Version describes the peer's code and database: module versions,
	// server or library version.
	Version() string
	// Settings lists the settings a run of w with o uses.
	Settings(w bench.Workload, o Options) string
	// Run runs workload w once, on a fresh state, and returns its result.
	// It returns a *bench.CheckError when a job did not run exactly once or
	// the peer still holds one unfinished.
	Run(ctx context.Context, w bench.Workload, o Options) (bench.Result, error)
	// Close releases the peer's connections.
	Close() error
}

// moduleVersion returns the version of module path this binary was built
// with, or "unknown".
func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range info.Deps {
		if d.Path == path {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}
