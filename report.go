package sortie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sortiehq/sortie/internal/strictjson"
	"github.com/sortiehq/sortie/store"
)

// ReportKind says how the attempt of a taken job ended; see Report.
type ReportKind = store.ReportKind

// The ways a taken job's attempt can end.
const (
	// ReportCompleted: the job is completed, with Report.Result.
	ReportCompleted = store.ReportCompleted
	// ReportFailed: the job runs again after its kind's RetryPolicy delay
	// (or at Report.RunAt), or ends dead when it used all its attempts.
	ReportFailed = store.ReportFailed
	// ReportCancelled: the job is cancelled, never to be retried.
	ReportCancelled = store.ReportCancelled
	// ReportSnoozed: the job runs again at Report.RunAt, the attempt not
	// counted.
	ReportSnoozed = store.ReportSnoozed
	// ReportReleased: the job is available again at once, in its place,
	// the attempt not counted.
	ReportReleased = store.ReportReleased
)

// Report says how the attempt of a job taken with Take ended, naming the
// claim by the job's ID and the ClaimToken the Take gave.
type Report struct {
	ID         int64
	ClaimToken int64
	Kind       ReportKind
	// Err says why a failed or cancelled attempt ended; its text is
	// recorded in the job's errors. Nil records a failure as "attempt
	// failed without an error message", and a cancellation without one.
	Err error
	// Result is a completed job's result, JSON of at most
	// Config.MaxResultBytes; nil records none.
	Result json.RawMessage
	// RunAt is when a snoozed job runs again (zero: at once) and, when set,
	// when a failed one does, instead of what its kind's RetryPolicy says.
	RunAt time.Time
}

// ReportResult is what became of one Report.
type ReportResult struct {
	// State is the job's state afterwards; empty when Err is set.
	State JobState
	// Outcome is how the attempt ended, as events announce it: a failure
	// is OutcomeRetrying or OutcomeDead.
	Outcome Outcome
	// Err, when not nil, says why the report was refused and the job left
	// as it was: it wraps ErrNotFound (no such job) or ErrLeaseLost (the
	// claim is no longer the job's).
	Err error
}

// Report records how attempts of jobs taken with Take ended, in one store
// call, and returns what became of each, in order. It applies what the
// runtime applies to its own workers' jobs: a failure is retried after the
// delay of the kind's RetryPolicy (WorkerOpts.RetryPolicy, registered with
// AddWorker or AddKind, else Config.RetryPolicy) or ends dead once the job
// used its attempts; each recorded end is logged and announced with
// EventJobFinished. A report whose claim is stale is refused on its own,
// in its result, while the others are recorded. It returns an error,
// recording nothing, when a report is invalid or the store fails.
func (c *Client) Report(ctx context.Context, reports ...*Report) ([]ReportResult, error) {
	now := c.clock.Now()
	results := make([]ReportResult, len(reports))
	batch := make([]*attempt, 0, len(reports))
	at := make([]int, 0, len(reports)) // the index in reports of each attempt
	seen := make(map[int64]int, len(reports))
	for i, r := range reports {
		if err := c.checkReport(r, i, seen); err != nil {
			return nil, err
		}
		a, err := c.reportAttempt(ctx, r, now)
		if err != nil {
			return nil, err
		}
		if a.err != nil && a.row == nil {
			results[i].Err = a.err
			continue
		}
		if s := a.rj.suspension(); s != nil {
			// A Sleep or Await of the taken job ended its attempt already.
			a.event, a.suspended = OutcomeSnoozed, s
			results[i] = c.reported(ctx, a, store.ReportResult{Applied: true, State: s.state})
			continue
		}
		batch, at = append(batch, a), append(at, i)
	}
	if len(batch) == 0 {
		return results, nil
	}
	outcomes := make([]*store.Report, len(batch))
	for k, a := range batch {
		outcomes[k] = &a.outcome
	}
	res, err := c.finishReports(ctx, outcomes, now)
	if err != nil {
		return nil, fmt.Errorf("record reports: %w", err)
	}
	for k, a := range batch {
		results[at[k]] = c.reported(ctx, a, res[k])
	}
	return results, nil
}

// checkReport validates reports[i]; seen maps the IDs already reported.
func (c *Client) checkReport(r *Report, i int, seen map[int64]int) error {
	switch {
	case r == nil:
		return invalidf("Report: reports[%d] is nil", i)
	case r.ID < 1:
		return invalidf("Report: reports[%d].ID must be a job ID, got %d", i, r.ID)
	case r.ClaimToken == 0:
		return invalidf("Report: reports[%d].ClaimToken is 0: give the one Take returned", i)
	case r.Kind < ReportCompleted || r.Kind > ReportReleased:
		return invalidf("Report: reports[%d].Kind: unknown %v", i, r.Kind)
	case len(r.Result) > 0 && r.Kind != ReportCompleted:
		return invalidf("Report: reports[%d].Result goes with ReportCompleted only, not %v", i, r.Kind)
	case len(r.Result) > c.cfg.MaxResultBytes:
		return fmt.Errorf("sortie: result of job %d is %d bytes, more than Config.MaxResultBytes (%d): %w", r.ID, len(r.Result), c.cfg.MaxResultBytes, ErrResultTooLarge)
	}
	if len(r.Result) > 0 && (!json.Valid(r.Result) || strictjson.ValidText(r.Result) != nil) {
		return invalidf("Report: result of job %d is not valid JSON", r.ID)
	}
	if j, dup := seen[r.ID]; dup {
		return invalidf("Report: reports[%d] and reports[%d] are both about job %d", j, i, r.ID)
	}
	seen[r.ID] = i
	return nil
}

// reportAttempt turns r into the attempt the runtime records: its store
// report and the outcome its event announces. A refused report (no such
// job, a stale claim) is an attempt with err set and no row; a store that
// fails to say which is an error.
func (c *Client) reportAttempt(ctx context.Context, r *Report, now time.Time) (*attempt, error) {
	row, t, err := c.claimedRow(ctx, r.ID, r.ClaimToken)
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrLeaseLost):
		return &attempt{err: err}, nil
	case err != nil:
		return nil, fmt.Errorf("read job %d: %w", r.ID, err)
	}
	a := &attempt{row: row, err: r.Err, took: now.Sub(row.AttemptedAt)}
	if t != nil {
		a.rj = &t.run.rj
	} else {
		a.rj = &runningJob{c: c, row: row}
	}
	a.outcome = store.Report{ID: r.ID, ClaimToken: r.ClaimToken, Kind: r.Kind, RunAt: r.RunAt}
	switch r.Kind {
	case ReportCompleted:
		a.event, a.outcome.Result = OutcomeCompleted, r.Result
	case ReportCancelled:
		a.event = OutcomeCancelled
		if r.Err != nil {
			a.outcome.Error = &AttemptError{Attempt: row.Attempt, At: now, Message: r.Err.Error()}
		}
	case ReportSnoozed:
		a.event = OutcomeSnoozed
		if r.RunAt.IsZero() {
			a.outcome.RunAt = now
		}
	case ReportReleased:
		a.event = OutcomeReleased
	case ReportFailed:
		c.decideFailure(a, r, now)
	}
	return a, nil
}

// decideFailure fills in a failed report's error, next run and event.
func (c *Client) decideFailure(a *attempt, r *Report, now time.Time) {
	row := a.row
	a.outcome.Error = &AttemptError{Attempt: row.Attempt, At: now}
	if r.Err != nil {
		a.outcome.Error.Message = r.Err.Error()
	}
	if row.Attempt >= row.MaxAttempts {
		a.event = OutcomeDead
		return
	}
	a.event = OutcomeRetrying
	if r.RunAt.IsZero() {
		a.outcome.RunAt = retryAt(row, now, c.retryPolicyOf(row.Kind).RetryDelay(row))
	}
}

// claimedRow returns the row of claim (id, token) and its handle, from the
// claims this client handed out, else read from the store. A claim that is
// not the job's returns an error wrapping ErrLeaseLost, a missing job one
// wrapping ErrNotFound.
func (c *Client) claimedRow(ctx context.Context, id, token int64) (*JobRow, *Taken, error) {
	if e := c.claims.get(id, token); e != nil {
		return e.row, e.taken, nil
	}
	row, err := c.readJob(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil, fmt.Errorf("job %d: %w", id, ErrNotFound)
	case err != nil:
		return nil, nil, err
	case row.State != JobStateRunning || row.ClaimToken != token:
		return nil, nil, staleClaim(id, token)
	}
	return row, nil, nil
}

func staleClaim(id, token int64) error {
	return fmt.Errorf("job %d: claim %d is no longer the job's (its lease ran out, or it was finished, cancelled or deleted): %w", id, token, ErrLeaseLost)
}

// reported logs and announces a recorded report, settles its taken
// handle, and says what became of it.
func (c *Client) reported(ctx context.Context, a *attempt, res store.ReportResult) ReportResult {
	id, token := a.outcome.ID, a.outcome.ClaimToken
	if e := c.claims.get(id, token); e != nil && e.taken != nil {
		defer e.taken.settle()
	}
	if !res.Applied {
		if _, err := c.readJob(ctx, id); errors.Is(err, ErrNotFound) {
			c.claims.done(id, token)
			return ReportResult{Err: fmt.Errorf("job %d: %w", id, ErrNotFound)}
		}
		c.claims.done(id, token)
		return ReportResult{Err: staleClaim(id, token)}
	}
	c.claims.done(id, token)
	c.finished(ctx, a, res)
	return ReportResult{State: res.State, Outcome: a.event}
}

// LeaseStatus says what a lease extension found: whether the claim is
// still held, and whether JobCancel asked the job to stop.
type LeaseStatus = store.LeaseStatus

// ExtendLeaseOpts are the options of Client.ExtendLease. A nil
// *ExtendLeaseOpts means all defaults.
type ExtendLeaseOpts struct {
	// Lease is the new lease, from now. Defaults to Config.Lease; at least
	// 1 second.
	Lease time.Duration
	// Progress, when not nil, records the job's progress, 0 to 100.
	Progress *float64
}

// ExtendLease is a taken job's heartbeat: it extends the lease of claim
// (id, claimToken) and records the job's progress. A claim no longer the
// job's is left untouched and reported with Held false: its taker stops
// the work. A job that no longer exists returns an error wrapping
// ErrNotFound.
func (c *Client) ExtendLease(ctx context.Context, id, claimToken int64, opts *ExtendLeaseOpts) (LeaseStatus, error) {
	var o ExtendLeaseOpts
	if opts != nil {
		o = *opts
	}
	if o.Lease == 0 {
		o.Lease = c.cfg.Lease
	}
	if o.Lease < time.Second {
		return LeaseStatus{}, invalidf("ExtendLeaseOpts.Lease must be at least 1s, got %s", o.Lease)
	}
	if p := o.Progress; p != nil && (math.IsNaN(*p) || *p < 0 || *p > 100) {
		return LeaseStatus{}, invalidf("ExtendLeaseOpts.Progress must be 0 to 100, got %v", *p)
	}
	now := c.clock.Now()
	st, err := c.extendClaim(ctx, store.LeaseRef{ID: id, ClaimToken: claimToken}, now, o.Lease, o.Progress)
	if err != nil {
		return LeaseStatus{}, fmt.Errorf("extend lease of job %d: %w", id, err)
	}
	if st.Held {
		c.claims.extended(id, claimToken, now.Add(o.Lease))
		return st, nil
	}
	c.claims.done(id, claimToken)
	if _, err := c.readJob(ctx, id); errors.Is(err, ErrNotFound) {
		return st, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	return st, nil
}

// Complete records the attempt as completed, with result (encoded as
// JSON; nil for none, or the result given to SetResult on the job's
// context). It returns an error wrapping ErrLeaseLost when the claim is no
// longer the job's, and the job is then untouched.
func (t *Taken) Complete(ctx context.Context, result any) error {
	r := &Report{ID: t.ID, ClaimToken: t.ClaimToken, Kind: ReportCompleted}
	if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			return invalidf("Complete: encode result of job %d: %v", t.ID, err)
		}
		r.Result = b
	} else {
		t.run.rj.mu.Lock()
		r.Result = t.run.rj.result
		t.run.rj.mu.Unlock()
	}
	return t.report(ctx, r)
}

// Fail records the attempt as failed with err: the job runs again after
// the delay its kind's RetryPolicy gives (Config.RetryPolicy by default),
// or ends dead when it has used all its attempts.
func (t *Taken) Fail(ctx context.Context, err error) error {
	return t.report(ctx, &Report{ID: t.ID, ClaimToken: t.ClaimToken, Kind: ReportFailed, Err: err})
}

// Cancel ends the job as cancelled, never to be retried, recording err
// when it is not nil.
func (t *Taken) Cancel(ctx context.Context, err error) error {
	return t.report(ctx, &Report{ID: t.ID, ClaimToken: t.ClaimToken, Kind: ReportCancelled, Err: err})
}

// Snooze puts the job back to run again after d, the attempt not counted.
func (t *Taken) Snooze(ctx context.Context, d time.Duration) error {
	return t.report(ctx, &Report{ID: t.ID, ClaimToken: t.ClaimToken, Kind: ReportSnoozed, RunAt: t.c.clock.Now().Add(max(d, 0))})
}

// Release puts the job back in its queue at once, in its place, the
// attempt not counted: for a taker that stops before it ran the job.
func (t *Taken) Release(ctx context.Context) error {
	return t.report(ctx, &Report{ID: t.ID, ClaimToken: t.ClaimToken, Kind: ReportReleased})
}

func (t *Taken) report(ctx context.Context, r *Report) error {
	res, err := t.c.Report(ctx, r)
	if err != nil {
		return err
	}
	return res[0].Err
}
