package peers

import (
	"fmt"
	"time"

	"github.com/sortiehq/sortie/bench"
)

// Options tune a run, with the meanings of bench.Options. A zero field
// means that field's default, which is bench's.
type Options struct {
	// Jobs is how many jobs the enqueue and drain workloads make; latency
	// makes Rate × Duration. Defaults to 100,000.
	Jobs int
	// Workers is the worker pool of the peer's client (drain, latency, and
	// the untimed run after an enqueue workload). For river-raw's drain, the
	// LIMIT of each DELETE. Defaults to 100; 2,000 for River's tuned config.
	Workers int
	// Producers is the number of goroutines enqueueing at once; for
	// river-raw's drain, the number of delete loops. Defaults to 8, and to 1
	// for enqueue-batch.
	Producers int
	// BatchSize is the number of jobs per batch call of enqueue-batch.
	// Defaults to 1,000.
	BatchSize int
	// Rate is latency's enqueue rate in jobs per second. Defaults to 500.
	Rate float64
	// Duration is how long latency enqueues. Defaults to 5 seconds.
	Duration time.Duration
	// StallTimeout fails a run when no job makes progress for this long.
	// Defaults to 30 seconds.
	StallTimeout time.Duration
}

// withDefaults fills in the defaults of workload w.
func (o Options) withDefaults(w bench.Workload) (Options, error) {
	if o.Jobs < 0 || o.Workers < 0 || o.Producers < 0 || o.BatchSize < 0 || o.Rate < 0 || o.Duration < 0 {
		return o, fmt.Errorf("peers: options must not be negative")
	}
	if o.Jobs == 0 {
		o.Jobs = bench.DefaultJobs
	}
	if o.Workers == 0 {
		o.Workers = bench.DefaultWorkers
	}
	if o.Producers == 0 {
		o.Producers = bench.DefaultProducers
		if w == bench.EnqueueBatch {
			o.Producers = 1
		}
	}
	if o.BatchSize == 0 {
		o.BatchSize = bench.DefaultBatchSize
	}
	if o.Rate == 0 {
		o.Rate = bench.DefaultRate
	}
	if o.Duration == 0 {
		o.Duration = bench.DefaultDuration
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = bench.DefaultStallTimeout
	}
	if w == bench.Latency {
		o.Jobs = int(o.Rate*o.Duration.Seconds() + 0.5)
		if o.Jobs < 1 {
			return o, fmt.Errorf("peers: latency at %g jobs/s for %s makes no job", o.Rate, o.Duration)
		}
	}
	return o, nil
}
