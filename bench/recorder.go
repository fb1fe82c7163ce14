package bench

import (
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Recorder keeps what the handler of a run observed: how many times it ran
// each of the run's n jobs (sequence numbers 0 to n-1) and, for latency,
// how long after the start of its enqueue each job started. The workloads
// and peerbench's handlers record into one, for Check. It is safe for
// concurrent use.
type Recorder struct {
	n int
	// t0 is the origin of Now; time.Since(t0) reads the monotonic clock.
	t0 time.Time
	// runs[seq] counts the handler calls of job seq.
	runs  []atomic.Int32
	stray atomic.Int64
	// ran counts handler calls of the run's jobs; allRan closes when it
	// reaches n.
	ran    atomic.Int64
	allRan chan struct{}
	// startLat[seq] is job seq's enqueue → handler start in nanoseconds
	// (latency only).
	startLat []atomic.Int64
}

// NewRecorder returns a Recorder of n jobs. With latency it keeps each
// job's start latency, for Latencies.
func NewRecorder(n int, latency bool) *Recorder {
	r := &Recorder{n: n, t0: time.Now(), runs: make([]atomic.Int32, n), allRan: make(chan struct{})}
	if latency {
		r.startLat = make([]atomic.Int64, n)
	}
	return r
}

// Now returns the time since the Recorder was made, in nanoseconds: a job
// carries it from just before its enqueue to Record.
func (r *Recorder) Now() int64 { return int64(time.Since(r.t0)) }

// Record notes that the handler started job seq, whose enqueue began at at
// (a reading of Now; ignored without latency). It reports whether seq is
// one of the run's jobs: a call with another seq is counted as stray.
func (r *Recorder) Record(seq, at int64) bool {
	if seq < 0 || seq >= int64(r.n) {
		r.stray.Add(1)
		return false
	}
	if r.startLat != nil {
		r.startLat[seq].Store(r.Now() - at)
	}
	r.runs[seq].Add(1)
	if r.ran.Add(1) == int64(r.n) {
		close(r.allRan)
	}
	return true
}

// Ran returns how many handler calls of the run's jobs Record noted, a job
// that ran twice counted twice.
func (r *Recorder) Ran() int64 { return r.ran.Load() }

// AllRan returns a channel that is closed once Record noted n calls of the
// run's jobs.
func (r *Recorder) AllRan() <-chan struct{} { return r.allRan }

// Latencies returns each job's time from the start of its enqueue to the
// start of its handler, by sequence number; zero for a job that did not
// run, and nil without latency.
func (r *Recorder) Latencies() []time.Duration {
	if r.startLat == nil {
		return nil
	}
	ds := make([]time.Duration, len(r.startLat))
	for i := range r.startLat {
		ds[i] = time.Duration(r.startLat[i].Load())
	}
	return ds
}

// Tally returns what Record noted as a Tally for Check, with the store's
// counts and the problems found so far.
func (r *Recorder) Tally(counts []store.QueueStateCount, problems []string) Tally {
	t := Tally{Runs: make([]int32, r.n), Stray: r.stray.Load(), Counts: counts, Problems: problems}
	for i := range r.runs {
		t.Runs[i] = r.runs[i].Load()
	}
	return t
}
