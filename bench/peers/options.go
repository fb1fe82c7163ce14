package peers

import (
	"github.com/sortiehq/sortie/bench"
)

// Options tune a run: the fields sortie bench runs its workloads with,
// meaning what they mean there, with bench's defaults for a zero field
// (bench.Options.WithDefaults), but where a peer says otherwise: River's
// tuned config defaults Workers to 2,000, backlite's enqueue-single Jobs to
// 20,000, and river-raw's drain takes Workers as the LIMIT of each DELETE
// and Producers as its number of delete loops. The peers run no interval
// and ignore its fields (Period, Processes, HelperCommand), and Logger:
// each peer takes its logger when it is opened.
type Options = bench.Options

// withDefaults validates o and fills in bench's defaults of workload w.
func withDefaults(o Options, w bench.Workload) (Options, error) {
	if w == bench.Interval {
		// No peer runs interval, whose defaults want a helper process: each
		// Run rejects it by name.
		w = bench.Drain
	}
	return o.WithDefaults(w)
}
