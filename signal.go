package sortie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// RunOpts configures Run. A nil *RunOpts means every default.
type RunOpts struct {
	// DrainTimeout is how long running jobs get to finish after the first
	// signal before Run cancels them and puts their jobs back. Defaults to
	// 25 s: under the 30 s Docker and Kubernetes wait between SIGTERM and
	// SIGKILL, so a container's jobs are put back before it is killed.
	DrainTimeout time.Duration
	// Signals are the signals that stop the process. Defaults to SIGINT
	// (os.Interrupt, Ctrl-C) and SIGTERM.
	Signals []os.Signal
}

// defaultDrainTimeout is RunOpts.DrainTimeout's default.
const defaultDrainTimeout = 25 * time.Second

// withDefaults returns o with its defaults filled in, or what is wrong.
func (o *RunOpts) withDefaults() (RunOpts, error) {
	var full RunOpts
	if o != nil {
		full = *o
	}
	if full.DrainTimeout < 0 {
		return full, invalidf("RunOpts.DrainTimeout must not be negative, got %s", full.DrainTimeout)
	}
	if full.DrainTimeout == 0 {
		full.DrainTimeout = defaultDrainTimeout
	}
	if len(full.Signals) == 0 {
		full.Signals = []os.Signal{os.Interrupt, syscall.SIGTERM}
	}
	return full, nil
}

// Run starts the client, works until the process is told to stop, stops
// the client and returns: the one call a worker process's main makes.
//
// The first signal (SIGINT or SIGTERM by default), the end of ctx, or a
// stop command (CommandProcess, sortie processes --stop, the dashboard)
// stops fetching and lets the running jobs finish, for at most
// opts.DrainTimeout. A second signal, or the end of the drain timeout,
// cancels the handlers of the jobs still running; their jobs go back to
// available with the attempt not counted, as Stop does with a cancelled
// context (handlers get half a second to return, the store half a second
// to record their jobs' release), so the process exits within about a
// second of the second signal. ctx's values reach the handlers.
//
// Run returns nil when every job finished or was put back, a *StopError
// naming the jobs whose handlers ignored cancellation (they are left to
// their leases and rescued, counting the attempt), or Start's error. The
// signals are handled only while Run runs.
func (c *Client) Run(ctx context.Context, opts *RunOpts) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, o.Signals...)
	defer signal.Stop(sigs)
	c.mu.Lock()
	c.runs = !c.started
	c.mu.Unlock()
	if err := c.Start(ctx); err != nil {
		return err
	}
	var why string
	select {
	case s := <-sigs:
		why = "signal " + s.String()
	case <-ctx.Done():
		why = "context ended"
	case <-c.stopRequested:
		why = "stop command"
	}
	return c.drain(ctx, why, sigs, o.DrainTimeout)
}

// drain stops the client for Run: the running jobs get timeout to finish,
// unless a signal arrives first, then are cancelled and put back.
func (c *Client) drain(ctx context.Context, why string, sigs <-chan os.Signal, timeout time.Duration) error {
	stopCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	// Fetching stops before the log says so: a job that finishes after
	// the line is read frees a worker that must not take a new one.
	c.stopFetching()
	level, running := slog.LevelInfo, c.runningJobs()
	if running > 0 {
		level = slog.LevelWarn
	}
	c.logger.Log(ctx, level, "stopping: no new jobs; running jobs get the drain timeout to finish, a second signal puts them back",
		slog.String("reason", why), slog.Int("running", running), slog.Duration("drain_timeout", timeout))
	timer := time.AfterFunc(timeout, func() { cancel(fmt.Errorf("%w (%s)", errDrainTimeout, timeout)) })
	defer timer.Stop()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			c.logger.Warn("second signal: cancelling running jobs and putting them back", slog.String("signal", s.String()))
			cancel(fmt.Errorf("%w (%s)", errSecondSignal, s))
		case <-stopCtx.Done():
		}
	}()
	err := c.Stop(stopCtx)
	cancel(nil)
	<-watched
	return err
}

// Why Run cancelled the running jobs, in its *StopError.
var (
	errDrainTimeout = errors.New("sortie: drain timeout passed")
	errSecondSignal = errors.New("sortie: second signal")
)

// stopFetching stops the started client's fetching, as the first step
// of Stop does.
func (c *Client) stopFetching() {
	c.mu.Lock()
	rs := c.run
	c.mu.Unlock()
	if rs != nil {
		rs.closeFetch()
	}
}

// runningJobs returns how many jobs the started client holds.
func (c *Client) runningJobs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil {
		return 0
	}
	return c.run.held.Len()
}
