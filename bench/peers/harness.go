package peers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"time"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// jobArgs are the args of every benchmark job, with the JSON of sortie's.
type jobArgs struct {
	// Seq numbers the job within its run, from 0.
	Seq int64 `json:"s"`
	// At is when its enqueue began, a reading of the run's
	// bench.Recorder.Now (latency only).
	At int64 `json:"t,omitempty"`
	// Pad pads the args of the memory workload to its payload size.
	Pad string `json:"p,omitempty"`
}

// peerState reads a peer's tables: how many of the run's jobs are
// finished, and the counts per state for the final check.
type peerState interface {
	finished(ctx context.Context) (int64, error)
	counts(ctx context.Context) ([]store.QueueStateCount, error)
}

// timeEnqueues collects garbage, then runs the timed phase of
// enqueue-single (one call of insert per job) or enqueue-batch (one call of
// insertMany per BatchSize jobs) with sortie bench's loops, and returns its
// result.
func timeEnqueues(ctx context.Context, w bench.Workload, o Options, insert func(ctx context.Context, seq int64) error,
	insertMany func(ctx context.Context, lo, hi int64) error) (res bench.Result, err error) {
	runtime.GC()
	var took time.Duration
	var lat []time.Duration
	if w == bench.EnqueueBatch {
		took, lat, err = bench.EnqueueBatches(ctx, o.Jobs, o.BatchSize, o.Producers, insertMany)
		res.BatchSize = o.BatchSize
	} else {
		took, lat, err = bench.EnqueueEach(ctx, o.Jobs, o.Producers, insert)
	}
	if err != nil {
		return bench.Result{}, err
	}
	res.SetThroughput(o.Jobs, took)
	res.SetPercentiles(lat, bench.LatencyEnqueueCall)
	res.Producers = o.Producers
	return res, nil
}

// clientRun is one run of a peer whose client works the jobs, River or
// backlite: the peer makes its client and tables, and run does the rest as
// sortie bench does: the timed phase, the untimed run of the jobs after an
// enqueue workload, and the exactly-once check.
type clientRun struct {
	// peer names the peer in errors: "river".
	peer string
	o    Options
	// rec is what the peer's handler records into.
	rec *bench.Recorder
	st  peerState
	// start starts the client; stop stops it by ctx's deadline. Both return
	// errors that name the peer.
	start func(ctx context.Context) error
	stop  func(ctx context.Context) error
	// insert enqueues one job with one call (enqueue-single and latency);
	// insertMany enqueues jobs lo to hi-1 with one call (enqueue-batch and
	// drain's preload).
	insert     func(ctx context.Context, a jobArgs) error
	insertMany func(ctx context.Context, lo, hi int64) error
	// idProblems checks the job IDs the enqueues returned, or is nil.
	idProblems func() []string
	// started is whether the client runs, for run to stop it on every path.
	started bool
}

// run runs workload w once and checks it.
func (r *clientRun) run(ctx context.Context, w bench.Workload) (res bench.Result, err error) {
	defer func() {
		if r.started {
			if serr := r.stopClient(ctx); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	var problems []string
	n := r.o.Jobs
	switch w {
	case bench.EnqueueSingle, bench.EnqueueBatch:
		res, err = timeEnqueues(ctx, w, r.o, func(ctx context.Context, seq int64) error {
			return r.insert(ctx, jobArgs{Seq: seq})
		}, r.insertMany)
		if err != nil {
			return res, fmt.Errorf("%s: %w", r.peer, err)
		}
	case bench.Drain:
		if err := bench.Preload(ctx, n, r.insertMany); err != nil {
			return res, fmt.Errorf("%s: %w", r.peer, err)
		}
		counts, err := r.st.counts(ctx)
		if err != nil {
			return res, err
		}
		problems = availableCheck(counts, n)
		runtime.GC()
		begin := time.Now()
		if err := r.startClient(ctx); err != nil {
			return res, err
		}
		end, err := r.waitFinished(ctx)
		if err != nil {
			return res, err
		}
		res.SetThroughput(n, end.Sub(begin))
		res.Workers = r.o.Workers
	case bench.Latency:
		if err := r.startClient(ctx); err != nil {
			return res, err
		}
		took, err := bench.EnqueueOpenLoop(ctx, n, r.o.Rate, func(ctx context.Context, seq int64) error {
			return r.insert(ctx, jobArgs{Seq: seq, At: r.rec.Now()})
		})
		if err != nil {
			return res, fmt.Errorf("%s: %w", r.peer, err)
		}
		if _, err := r.waitFinished(ctx); err != nil {
			return res, err
		}
		res.SetThroughput(n, took)
		res.SetPercentiles(r.rec.Latencies(), bench.LatencyEnqueueStart)
		res.Workers, res.Rate = r.o.Workers, r.o.Rate
	default:
		return res, fmt.Errorf("%s: workload %s is not supported", r.peer, w)
	}
	if r.idProblems != nil {
		problems = append(problems, r.idProblems()...)
	}
	if w == bench.EnqueueSingle || w == bench.EnqueueBatch {
		counts, err := r.st.counts(ctx)
		if err != nil {
			return res, err
		}
		problems = append(problems, availableCheck(counts, n)...)
		// Run the jobs, untimed, so that the check covers their whole life.
		if err := r.startClient(ctx); err != nil {
			return res, err
		}
		if _, err := r.waitFinished(ctx); err != nil {
			return res, err
		}
	}
	if err := r.stopClient(ctx); err != nil {
		return res, err
	}
	counts, err := r.st.counts(ctx)
	if err != nil {
		return res, err
	}
	return res, bench.Check(r.rec.Tally(counts, problems))
}

func (r *clientRun) startClient(ctx context.Context) error {
	if err := r.start(ctx); err != nil {
		return err
	}
	r.started = true
	return nil
}

func (r *clientRun) stopClient(ctx context.Context) error {
	r.started = false
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	return r.stop(ctx)
}

// waitFinished waits until the peer counts every job finished and returns
// when it saw that. As sortie bench does, it leaves the database alone
// until every handler has returned (a stall shows in the handler tally),
// and then polls it closely.
func (r *clientRun) waitFinished(ctx context.Context) (time.Time, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastRan, lastAt := int64(-1), time.Now()
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-r.rec.AllRan():
			waiting = false
		case <-tick.C:
			if ran := r.rec.Ran(); ran != lastRan {
				lastRan, lastAt = ran, time.Now()
			} else if time.Since(lastAt) > r.o.StallTimeout {
				return time.Time{}, r.stalled(ctx)
			}
		}
	}
	lastDone, lastAt := int64(-1), time.Now()
	for {
		done, err := r.st.finished(ctx)
		if err != nil {
			return time.Time{}, err
		}
		now := time.Now()
		if done >= int64(r.o.Jobs) {
			return now, nil
		}
		if done != lastDone {
			lastDone, lastAt = done, now
		} else if now.Sub(lastAt) > r.o.StallTimeout {
			return time.Time{}, r.stalled(ctx)
		}
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// stalled reports a run where nothing happened for StallTimeout.
func (r *clientRun) stalled(ctx context.Context) error {
	done, err := r.st.finished(ctx)
	if err != nil {
		return err
	}
	counts, err := r.st.counts(ctx)
	if err != nil {
		return err
	}
	problem := fmt.Sprintf("no progress for %s: %d of %d jobs ran, the peer counts %d finished",
		r.o.StallTimeout, r.rec.Ran(), r.o.Jobs, done)
	return bench.Check(r.rec.Tally(counts, []string{problem}))
}

// idCheck notes enqueues that returned no ID or one another enqueue
// returned too.
func idCheck[T comparable](ids []T) []string {
	var zero T
	seen := make(map[T]struct{}, len(ids))
	missing, repeated := 0, 0
	for _, id := range ids {
		if id == zero {
			missing++
			continue
		}
		if _, ok := seen[id]; ok {
			repeated++
		}
		seen[id] = struct{}{}
	}
	var problems []string
	if missing > 0 {
		problems = append(problems, fmt.Sprintf("%d enqueues returned no job ID", missing))
	}
	if repeated > 0 {
		problems = append(problems, fmt.Sprintf("%d enqueues returned an ID another enqueue returned too", repeated))
	}
	return problems
}

// availableCheck notes a peer that does not hold exactly n jobs, all
// available, after the enqueues.
func availableCheck(counts []store.QueueStateCount, n int) []string {
	var available, other int64
	for _, c := range counts {
		if c.State == store.JobStateAvailable {
			available += c.Count
		} else {
			other += c.Count
		}
	}
	if available != int64(n) || other != 0 {
		return []string{fmt.Sprintf("after enqueueing %d jobs the peer counts %d available and %d in other states", n, available, other)}
	}
	return nil
}

// randomName returns prefix and 8 random hex digits: a schema or table name
// no other run uses.
func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
