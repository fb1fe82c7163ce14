package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"syscall"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// ProcessDrainOptions configure DrainProcesses.
type ProcessDrainOptions struct {
	// Jobs is the number of no-op jobs preloaded. Defaults to DefaultJobs.
	Jobs int
	// Workers is the worker pool of each process. Defaults to
	// DefaultWorkers.
	Workers int
	// Commands start the worker processes, one each: the command line of
	// a helper working the run's store (the database of st), to which the
	// HelperArgs flags are appended, as Options.HelperCommand's. A command
	// may run the helper on another host (internal/testkit/netns) and reach the
	// store through a proxy there.
	Commands []func(st store.Store) ([]string, error)
	// Timeout bounds the whole run. Defaults to five minutes.
	Timeout time.Duration
}

// DrainProcesses is drain with the work done by other processes, or hosts:
// it preloads o.Jobs no-op jobs into a paused queue, starts one helper per
// o.Commands, resumes the queue once every helper is ready and times them
// until the store counts every job completed. Every job must have run
// exactly once, in one of the helpers. The Result's Workers is the
// workers of all processes together, its Processes the number of
// processes.
func DrainProcesses(ctx context.Context, target Target, o *ProcessDrainOptions) (*Result, error) {
	jobs, workers, timeout := o.Jobs, o.Workers, o.Timeout
	if jobs == 0 {
		jobs = DefaultJobs
	}
	if workers == 0 {
		workers = DefaultWorkers
	}
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	if jobs < 1 || workers < 1 || len(o.Commands) == 0 {
		return nil, fmt.Errorf("bench: drain across processes needs jobs, workers and commands, got %d, %d, %d", jobs, workers, len(o.Commands))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, closeStore, err := target.Open(ctx)
	if err != nil {
		return nil, err
	}
	res, err := drainProcesses(ctx, st, jobs, workers, o.Commands)
	if cerr := closeStore(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	res.Store, res.Synchronous = target.Name, target.Synchronous
	return res, nil
}

func drainProcesses(ctx context.Context, st store.Store, jobs, workers int, commands []func(store.Store) ([]string, error)) (*Result, error) {
	queue := randomQueue()
	c, err := sortie.NewClient(st, &sortie.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if _, err := c.QueuePause(ctx, queue); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := Preload(ctx, jobs, func(ctx context.Context, lo, hi int64) error {
		params := make([]sortie.EnqueueParams, hi-lo)
		opts := &sortie.EnqueueOpts{Queue: queue}
		for i := range params {
			params[i] = sortie.EnqueueParams{Args: jobArgs{Seq: lo + int64(i)}, Opts: opts}
		}
		_, err := c.EnqueueMany(ctx, params)
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}

	var commandLines [][]string
	for _, command := range commands {
		args, err := command(st)
		if err != nil {
			return nil, fmt.Errorf("bench: drain across processes: %w", err)
		}
		commandLines = append(commandLines, args)
	}
	var took time.Duration
	ran, err := RunHelpers(ctx, commandLines, HelperArgs{Queue: queue, Workers: workers, ID: queue}, jobs, func(ctx context.Context) error {
		start := time.Now()
		if _, err := c.QueueResume(ctx, queue); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		end, err := waitCompleted(ctx, c, queue, int64(jobs))
		took = end.Sub(start)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := CheckRanOnce(ran); err != nil {
		return nil, err
	}
	res := &Result{Workload: Drain, Jobs: jobs, Workers: workers * len(commands), Processes: len(commands)}
	res.SetThroughput(jobs, took)
	return res, nil
}

// waitCompleted polls the queue's counts until n jobs completed and
// returns when it saw that.
func waitCompleted(ctx context.Context, c *sortie.Client, queue string, n int64) (time.Time, error) {
	for {
		counts, err := c.JobCounts(ctx, queue)
		if err != nil {
			return time.Time{}, fmt.Errorf("bench: %w", err)
		}
		for _, qc := range counts {
			if qc.State == sortie.JobStateCompleted && qc.Count >= n {
				return time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("bench: drain across processes: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// RunHelpers starts a helper process per command line, with the flags of
// a appended (each helper's ID is a.ID with "/p1", "/p2"... added), waits
// until every one is ready, then calls during; once during returns it
// stops the helpers (SIGTERM) and returns how many times each job
// sequence number below jobs ran, across them. A helper is a process that
// speaks the helper protocol on its stdout: RunHelper, or a peer's
// (WriteHelperReady, WriteHelperReport).
func RunHelpers(ctx context.Context, commands [][]string, a HelperArgs, jobs int, during func(ctx context.Context) error) ([]int32, error) {
	hctx, kill := context.WithCancel(ctx)
	var helpers []*helperProcess
	defer func() {
		kill() // kills the helpers still running
		for _, p := range helpers {
			<-p.done
		}
	}()
	for i, args := range commands {
		ha := a
		ha.ID = processID(a.ID, i+1)
		p, err := startHelper(hctx, args, ha)
		if err != nil {
			return nil, err
		}
		helpers = append(helpers, p)
	}
	for _, p := range helpers {
		if err := p.waitReady(ctx, time.Minute); err != nil {
			return nil, err
		}
	}
	if err := during(ctx); err != nil {
		return nil, err
	}
	for _, p := range helpers {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	ran := make([]int32, jobs)
	var errs []error
	for _, p := range helpers {
		rep, err := p.wait()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, seq := range rep.Ran {
			if seq >= 0 && seq < int64(jobs) {
				ran[seq]++
			}
		}
	}
	return ran, errors.Join(errs...)
}

// CheckRanOnce fails unless every job ran exactly once.
func CheckRanOnce(ran []int32) error {
	if i := slices.IndexFunc(ran, func(n int32) bool { return n != 1 }); i >= 0 {
		return fmt.Errorf("bench: check failed: job %d ran %d times, want once", i, ran[i])
	}
	return nil
}
