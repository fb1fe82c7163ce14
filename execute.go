package sortie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/sortiehq/sortie/internal/held"
	"github.com/sortiehq/sortie/internal/producer"
	"github.com/sortiehq/sortie/store"
)

// timeoutError is the cause of a job context cancelled by its timeout.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string { return fmt.Sprintf("job timed out after %s", e.d) }

// attempt is one finished run of a job, waiting for its outcome to be
// recorded.
type attempt struct {
	row     *JobRow
	rj      *runningJob
	outcome store.Report
	event   Outcome
	err     error
	took    time.Duration
	// suspended is the Sleep or Await that ended the attempt in the store:
	// its outcome is recorded already.
	suspended *suspendError
	// unused are the recorded steps a completed attempt never used.
	unused []string
}

// jobRun is what the runtime keeps for one claimed job, made in one
// allocation: its entry in the held set, what its handler's context knows,
// the context carrying that, and the attempt handed to the completer.
type jobRun struct {
	held    held.Job
	rj      runningJob
	ctx     runningJobCtx
	attempt attempt
}

// newJobRun returns the run of row under ctx, its context ready.
func newJobRun(c *Client, ctx context.Context, row *JobRow) *jobRun {
	r := &jobRun{rj: runningJob{c: c, row: row}}
	r.ctx = runningJobCtx{Context: ctx, rj: &r.rj}
	return r
}

// work runs one claimed job and hands its outcome to the completer. A job
// whose start was reserved starts then, or is put back unrun when that
// moment has passed (internal/producer/ratestart.go); a job put back unrun
// gives its start back to the queue's rate window, so that the room it
// took is claimed again within the period rather than left unused.
func (c *Client) work(ctx context.Context, rs *runState, cl producer.Claim) {
	row := cl.Row
	jobCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := newJobRun(c, jobCtx, row)
	r.held = held.Job{ID: row.ID, Token: row.ClaimToken, Cancel: cancel, Run: &r.rj}
	rs.held.Add(&r.held)
	if !cl.Run || cl.Reserved && !c.awaitReservedStart(jobCtx, rs, row) {
		r.attempt = attempt{row: row, rj: &r.rj, event: OutcomeReleased,
			outcome: store.Report{ID: row.ID, ClaimToken: row.ClaimToken, Kind: store.ReportReleased, Unstarted: true}}
	} else {
		c.runJob(r)
	}
	rs.held.MarkReturned(row.ID, row.ClaimToken)
	if s := r.attempt.suspended; s != nil {
		rs.held.Remove(row.ID, row.ClaimToken)
		c.finished(ctx, &r.attempt, store.ReportResult{Applied: true, State: s.state})
		return
	}
	rs.completer.Add(&r.attempt)
}

// awaitReservedStart waits until row's reserved start (its AttemptedAt) and
// reports whether the handler may start: false when ctx ended first, or
// when the queue was paused while the job waited (a paused queue starts
// none of its jobs; the job goes back, its attempt not counted).
func (c *Client) awaitReservedStart(ctx context.Context, rs *runState, row *JobRow) bool {
	wait := row.AttemptedAt.Sub(c.clock.Now())
	if wait <= 0 {
		return true
	}
	t := c.clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
		return false
	}
	if rs.pauses.paused(ctx, c, row.Queue, row.AttemptedAt) {
		c.logger.InfoContext(ctx, "queue paused before the job's reserved start, putting it back",
			slog.Int64(logKeyJobID, row.ID), slog.String(logKeyQueue, row.Queue))
		return false
	}
	return true
}

// pauseChecks reads whether queues are paused at reserved starts, once for
// the jobs of a claim: they share their start, and the first to reach it
// reads for them all.
type pauseChecks struct {
	mu sync.Mutex
	// last is each queue's last reading: when it began and what it said.
	last map[string]pauseCheck
}

type pauseCheck struct {
	at     time.Time
	paused bool
}

// paused reports whether queue q is paused, as read at or after start. A
// failed read says not paused: the claim was made while it was not, and the
// heartbeat and the completer meet the store's failure.
func (pc *pauseChecks) paused(ctx context.Context, c *Client, q string, start time.Time) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if last, ok := pc.last[q]; ok && !last.at.Before(start) {
		return last.paused
	}
	at := c.clock.Now()
	row, err := c.store.QueueGet(ctx, &store.QueueGetParams{Queue: q})
	if err != nil {
		return false
	}
	if pc.last == nil {
		pc.last = make(map[string]pauseCheck)
	}
	pc.last[q] = pauseCheck{at: at, paused: row.Paused}
	return row.Paused
}

// runAttempt runs row outside the worker pool (Drain) and returns the
// attempt.
func (c *Client) runAttempt(ctx context.Context, row *JobRow) *attempt {
	r := newJobRun(c, ctx, row)
	c.runJob(r)
	return &r.attempt
}

// runJob calls the handler of r's job with its timeout, recovering panics,
// and decides the outcome into r.attempt.
func (c *Client) runJob(r *jobRun) {
	row := r.rj.row
	var ctx context.Context = &r.ctx
	if timeout := c.timeoutOf(row); timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, &timeoutError{timeout})
		defer cancel()
	}
	if c.logger.Enabled(ctx, slog.LevelInfo) {
		c.logger.InfoContext(ctx, "job started", slog.Int64(logKeyJobID, row.ID), slog.String(logKeyKind, row.Kind),
			slog.String(logKeyQueue, row.Queue), slog.Int(logKeyAttempt, row.Attempt))
	}
	if c.events.active() {
		c.events.publish(&Event{Kind: EventJobStarted, Job: row, At: c.clock.Now()})
	}
	start := c.clock.Now()
	err := c.callHandler(ctx, row)
	a := &r.attempt
	*a = attempt{row: row, rj: &r.rj, err: err, took: c.clock.Now().Sub(start)}
	c.decide(ctx, a)
}

// callHandler runs the handler, turning a panic into a *PanicError.
func (c *Client) callHandler(ctx context.Context, row *JobRow) (err error) {
	h := c.handlers[row.Kind]
	if h == nil {
		// The fetch asks only for registered kinds, so this is a store bug.
		return &UnknownKindError{Kind: row.Kind}
	}
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return h(ctx, row)
}

func (c *Client) timeoutOf(row *JobRow) time.Duration {
	if row.Timeout > 0 {
		return row.Timeout
	}
	if e := c.cfg.Workers.entry(row.Kind); e != nil && e.opts.Timeout > 0 {
		return e.opts.Timeout
	}
	return c.cfg.JobTimeout
}

func (c *Client) retryPolicyOf(kind string) RetryPolicy {
	if e := c.cfg.Workers.entry(kind); e != nil && e.opts.RetryPolicy != nil {
		return e.opts.RetryPolicy
	}
	return c.cfg.RetryPolicy
}

// decide fills in a's store outcome from the handler's error.
func (c *Client) decide(ctx context.Context, a *attempt) {
	row, err := a.row, a.err
	now := c.clock.Now()
	a.outcome = store.Report{ID: row.ID, ClaimToken: row.ClaimToken}
	if s := a.rj.suspension(); s != nil {
		// A Sleep or Await ended the attempt in the store, whatever the
		// handler returned after it.
		a.outcome.Kind, a.event, a.suspended = store.ReportSnoozed, OutcomeSnoozed, s
		a.outcome.RunAt = s.until
		return
	}
	if err == nil {
		a.outcome.Kind, a.event = store.ReportCompleted, OutcomeCompleted
		a.rj.mu.Lock()
		a.outcome.Result = a.rj.result
		a.rj.mu.Unlock()
		a.unused = a.rj.unusedSteps()
		return
	}
	if d, ok := SnoozeDuration(err); ok {
		a.outcome.Kind, a.event = store.ReportSnoozed, OutcomeSnoozed
		a.outcome.RunAt = now.Add(d)
		return
	}
	if IsCancel(err) {
		a.outcome.Kind, a.event = store.ReportCancelled, OutcomeCancelled
		if cause := errors.Unwrap(err); cause != nil {
			a.outcome.Error = &AttemptError{Attempt: row.Attempt, At: now, Message: cause.Error()}
		}
		return
	}
	if errors.Is(context.Cause(ctx), errCancelRequested) {
		a.outcome.Kind, a.event = store.ReportCancelled, OutcomeCancelled
		a.outcome.Error = &AttemptError{Attempt: row.Attempt, At: now, Message: "cancelled on request while running: " + err.Error()}
		return
	}
	if errors.Is(context.Cause(ctx), errStopping) {
		a.outcome.Kind, a.event = store.ReportReleased, OutcomeReleased
		return
	}
	msg := err.Error()
	var te *timeoutError
	if errors.As(context.Cause(ctx), &te) && ctx.Err() != nil {
		msg = te.Error() + ": " + msg
	}
	ae := &AttemptError{Attempt: row.Attempt, At: now, Message: msg}
	var pe *PanicError
	if errors.As(err, &pe) {
		ae.Stack = pe.Stack
	}
	a.outcome.Kind, a.outcome.Error = store.ReportFailed, ae
	if row.Attempt >= row.MaxAttempts {
		a.event = OutcomeDead
		return
	}
	a.event = OutcomeRetrying
	a.outcome.RunAt = retryAt(row, now, c.retryPolicyOf(row.Kind).RetryDelay(row))
}

// retryAt is when a failed job runs again: after delay, or, with no delay,
// at its own due time, so that it keeps its place ahead of the jobs queued
// after it, as a job put back in a queue does.
func retryAt(row *JobRow, now time.Time, delay time.Duration) time.Time {
	if delay <= 0 && !row.RunAt.IsZero() && row.RunAt.Before(now) {
		return row.RunAt
	}
	return now.Add(max(delay, 0))
}

// finished logs and publishes an attempt whose outcome the store recorded.
func (c *Client) finished(ctx context.Context, a *attempt, res store.ReportResult) {
	if !res.Applied && a.rj.InTx() {
		res = c.finishedInTx(ctx, a)
	}
	if !res.Applied {
		c.logger.WarnContext(ctx, "job outcome discarded: lease lost, the job was rescued", slog.Int64(logKeyJobID, a.row.ID),
			slog.String(logKeyKind, a.row.Kind), slog.String(logKeyOutcome, string(a.event)))
		return
	}
	if len(a.unused) > 0 {
		c.logger.WarnContext(ctx, "job completed without using steps an earlier attempt recorded (renamed or removed since?)",
			slog.Int64(logKeyJobID, a.row.ID), slog.String(logKeyKind, a.row.Kind), slog.Any(logKeySteps, a.unused))
	}
	level := slog.LevelInfo
	if a.event == OutcomeDead {
		level = slog.LevelWarn
	}
	if c.logger.Enabled(ctx, level) {
		attrs := []slog.Attr{
			slog.Int64(logKeyJobID, a.row.ID), slog.String(logKeyKind, a.row.Kind), slog.String(logKeyQueue, a.row.Queue),
			slog.Int(logKeyAttempt, a.row.Attempt), slog.Duration(logKeyDuration, a.took), slog.String(logKeyOutcome, string(a.event)),
		}
		if a.err != nil && a.event != OutcomeSnoozed {
			attrs = append(attrs, slog.String(logKeyError, a.err.Error()))
		}
		if a.suspended != nil {
			attrs = append(attrs, slog.String(logKeyWaitsFor, a.suspended.step))
		}
		if a.event == OutcomeRetrying {
			attrs = append(attrs, slog.Duration(logKeyRetryIn, a.outcome.RunAt.Sub(a.outcome.Error.At).Round(time.Millisecond)))
		}
		c.logger.LogAttrs(ctx, level, "job finished", attrs...)
	}
	if c.events.active() {
		row := *a.row
		row.State = res.State
		c.events.publish(&Event{Kind: EventJobFinished, Job: &row, Outcome: a.event, Err: a.err, Duration: a.took, At: c.clock.Now()})
	}
}

// finishedInTx looks at the job whose outcome the store refused after
// CompleteTx completed it in a transaction. If the job is completed under
// this attempt's claim, the transaction committed and the runtime's own
// outcome came too late: it is reported as the completion it is. Otherwise
// (the transaction rolled back and the lease was then lost) the refusal
// stands.
func (c *Client) finishedInTx(ctx context.Context, a *attempt) store.ReportResult {
	row, err := c.store.JobGet(ctx, &store.JobGetParams{ID: a.row.ID})
	if err != nil || row.State != JobStateCompleted || row.ClaimToken != a.row.ClaimToken {
		return store.ReportResult{}
	}
	if a.event != OutcomeCompleted {
		if c.logger.Enabled(ctx, slog.LevelDebug) {
			attrs := []slog.Attr{slog.Int64(logKeyJobID, a.row.ID), slog.String(logKeyKind, a.row.Kind), slog.String(logKeyOutcome, string(a.event))}
			if a.err != nil {
				attrs = append(attrs, slog.String(logKeyError, a.err.Error()))
			}
			c.logger.LogAttrs(ctx, slog.LevelDebug, "job outcome discarded: the job was completed in a transaction", attrs...)
		}
		a.event, a.err = OutcomeCompleted, nil
	}
	return store.ReportResult{Applied: true, State: JobStateCompleted}
}
