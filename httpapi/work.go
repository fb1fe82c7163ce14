package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/internal/names"
	"github.com/sortiehq/sortie/store"
)

// Remote workers. A worker in any language claims jobs with a fetch, runs
// them, and reports each one's end with the claim_token the fetch gave it;
// while a job runs longer than its lease, it heartbeats. A report with a
// token that is no longer the job's (the lease ran out and the job was
// rescued and claimed again) is refused with 409, like a stale worker of the
// Go runtime.

const (
	defaultLease = 30 * time.Second
	maxLease     = time.Hour
)

// fetchRequest asks for up to limit jobs of queue.
type fetchRequest struct {
	Queue  string   `json:"queue"`
	Kinds  []string `json:"kinds"`
	Limit  int      `json:"limit"`
	Worker string   `json:"worker"`
	Lease  string   `json:"lease"`
	Wait   string   `json:"wait"`
}

// fetch: POST /api/v1/fetch. It claims up to limit (default 1) available
// jobs of the queue, with a lease (default 30 s), and answers with them,
// each with its claim_token. With wait it long-polls: when none is
// available it answers as soon as one may be, or with none once wait has
// passed.
func (a *api) fetch(w http.ResponseWriter, r *http.Request) error {
	var req fetchRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Queue == "" {
		req.Queue = sortie.QueueDefault
	}
	if err := names.Queue(req.Queue); err != nil {
		return httperr.Errorf(http.StatusBadRequest, "queue: %v", err)
	}
	for i, k := range req.Kinds {
		if err := names.Kind(k); err != nil {
			return httperr.Errorf(http.StatusBadRequest, "kinds[%d]: %v", i, err)
		}
	}
	if req.Limit == 0 {
		req.Limit = 1
	}
	if req.Limit < 1 || req.Limit > maxBatch {
		return httperr.Errorf(http.StatusBadRequest, "limit must be 1 to %d, got %d", maxBatch, req.Limit)
	}
	lease, err := leaseOf(req.Lease)
	if err != nil {
		return err
	}
	wait, err := duration("wait", req.Wait)
	if err != nil {
		return err
	}
	if wait > a.opts.MaxWait {
		return httperr.Errorf(http.StatusBadRequest, "wait must be at most %s, got %s", a.opts.MaxWait, wait)
	}
	if req.Worker == "" {
		req.Worker = "http:" + r.RemoteAddr
	}
	ctx := r.Context()
	deadline := time.Now().Add(wait)
	p := &store.JobFetchParams{Queue: req.Queue, Kinds: req.Kinds, Limit: req.Limit, Lease: lease, Worker: req.Worker}
	var watch *store.Watch
	defer func() {
		if watch != nil {
			watch.Close()
		}
	}()
	for {
		p.Now = time.Now()
		rows, err := a.st.JobFetch(ctx, p)
		if err != nil {
			return err
		}
		left := time.Until(deadline)
		if len(rows) > 0 || left <= 0 {
			out := make([]jobjson.Job, len(rows))
			for i, row := range rows {
				out[i] = jobjson.FromRow(row)
			}
			writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
			return nil
		}
		if watch == nil {
			// Wake-ups from here on, and one more fetch at once for a job
			// enqueued between the fetch and the watch.
			watch, err = a.st.QueueWatch(ctx, &store.QueueWatchParams{Queue: req.Queue})
			if err != nil && !errors.Is(err, store.ErrUnsupported) {
				return err
			}
			if watch != nil {
				continue
			}
		}
		var wake <-chan struct{}
		if watch != nil {
			wake = watch.C
		}
		t := time.NewTimer(min(left, a.opts.PollInterval))
		select {
		case <-wake:
		case <-t.C:
		case <-a.opts.Stopping:
			// Shutting down: no jobs, ask again (elsewhere).
			deadline = time.Now()
		case <-ctx.Done():
			// The client went away: nobody to answer.
			t.Stop()
			return nil
		}
		t.Stop()
	}
}

// claimed is the claim token every report carries.
type claimed struct {
	ClaimToken int64 `json:"claim_token"`
}

func (c claimed) claimToken() error {
	if c.ClaimToken == 0 {
		return httperr.Errorf(http.StatusBadRequest, "claim_token is required: send the one the fetch gave")
	}
	return nil
}

// reportOf reads a worker's report on the path's job into req, which
// embeds claimed, and returns the job's ID.
func reportOf(r *http.Request, req interface{ claimToken() error }) (int64, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, err
	}
	if err := decode(r, req); err != nil {
		return 0, err
	}
	return id, req.claimToken()
}

// leaseOf parses a lease, default 30 s, within 1 s to an hour.
func leaseOf(s string) (time.Duration, error) {
	lease, err := duration("lease", s)
	if err != nil {
		return 0, err
	}
	if lease == 0 {
		lease = defaultLease
	}
	if lease < time.Second || lease > maxLease {
		return 0, httperr.Errorf(http.StatusBadRequest, "lease must be 1s to %s, got %s", maxLease, lease)
	}
	return lease, nil
}

// finish records one outcome and answers with the job's new state, or 409
// when the claim is no longer the job's.
func (a *api) finish(w http.ResponseWriter, r *http.Request, o *store.Outcome) error {
	res, err := a.st.JobFinish(r.Context(), &store.JobFinishParams{Outcomes: []*store.Outcome{o}, Now: time.Now()})
	if err != nil {
		return err
	}
	if !res[0].Applied {
		return a.refused(r.Context(), o.ID, o.ClaimToken)
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": o.ID, "state": res[0].State})
	return nil
}

// refused says why a report on job id with token was not recorded: 404
// when there is no such job, else 409 (the claim is stale).
func (a *api) refused(ctx context.Context, id, token int64) error {
	if _, err := a.c.JobGet(ctx, id); errors.Is(err, sortie.ErrNotFound) {
		return httperr.Errorf(http.StatusNotFound, "job %d not found: the outcome is not recorded", id)
	}
	return httperr.Errorf(http.StatusConflict, "job %d: claim %d is no longer the job's (its lease ran out, or it was finished or cancelled): the outcome is not recorded", id, token)
}

// complete: POST /api/v1/jobs/{id}/complete, {"claim_token", "result"}.
func (a *api) complete(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		claimed
		Result json.RawMessage `json:"result"`
	}
	id, err := reportOf(r, &req)
	if err != nil {
		return err
	}
	if len(req.Result) > a.opts.MaxResultBytes {
		return httperr.Errorf(http.StatusRequestEntityTooLarge, "result is %d bytes, more than %d", len(req.Result), a.opts.MaxResultBytes)
	}
	if string(req.Result) == "null" {
		req.Result = nil
	}
	if req.Result != nil {
		// Stored as the library stores a handler's result: compact.
		var buf bytes.Buffer
		if err := json.Compact(&buf, req.Result); err != nil {
			return httperr.Errorf(http.StatusBadRequest, "result is not valid JSON: %v", err)
		}
		req.Result = buf.Bytes()
	}
	return a.finish(w, r, &store.Outcome{ID: id, ClaimToken: req.ClaimToken, Kind: store.OutcomeCompleted, Result: req.Result})
}

// fail: POST /api/v1/jobs/{id}/fail, {"claim_token", "error", "retry_in",
// "discard"}. The job is retried after retry_in, or the library's default
// backoff, until it runs out of attempts and is dead; discard cancels it
// instead, never to be retried.
func (a *api) fail(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		claimed
		Error   string `json:"error"`
		RetryIn string `json:"retry_in"`
		Discard bool   `json:"discard"`
	}
	id, err := reportOf(r, &req)
	if err != nil {
		return err
	}
	retryIn, err := duration("retry_in", req.RetryIn)
	if err != nil {
		return err
	}
	if req.Discard && req.RetryIn != "" {
		return httperr.Errorf(http.StatusBadRequest, "discard and retry_in together: a discarded job is not retried")
	}
	now := time.Now()
	o := &store.Outcome{ID: id, ClaimToken: req.ClaimToken, Kind: store.OutcomeFailed, Error: &store.AttemptError{At: now, Message: req.Error}}
	switch {
	case req.Discard:
		o.Kind = store.OutcomeCancelled
	case req.RetryIn != "":
		o.RunAt = now.Add(retryIn)
	default:
		// The default backoff counts the job's attempts.
		row, err := a.c.JobGet(r.Context(), id)
		if err != nil {
			return err
		}
		o.RunAt = now.Add(sortie.ExponentialBackoff{}.RetryDelay(row))
	}
	return a.finish(w, r, o)
}

// snooze: POST /api/v1/jobs/{id}/snooze, {"claim_token", "run_in"}: the job
// runs again after run_in, and the attempt is not counted.
func (a *api) snooze(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		claimed
		RunIn string `json:"run_in"`
	}
	id, err := reportOf(r, &req)
	if err != nil {
		return err
	}
	runIn, err := duration("run_in", req.RunIn)
	if err != nil {
		return err
	}
	return a.finish(w, r, &store.Outcome{ID: id, ClaimToken: req.ClaimToken, Kind: store.OutcomeSnoozed, RunAt: time.Now().Add(runIn)})
}

// heartbeat: POST /api/v1/jobs/{id}/heartbeat, {"claim_token", "lease",
// "progress"}: extends the lease (default 30 s) and records progress. It
// answers whether the claim is still held and whether the job was asked to
// cancel: a worker stops the job when either says so.
func (a *api) heartbeat(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		claimed
		Lease    string   `json:"lease"`
		Progress *float64 `json:"progress"`
	}
	id, err := reportOf(r, &req)
	if err != nil {
		return err
	}
	lease, err := leaseOf(req.Lease)
	if err != nil {
		return err
	}
	if req.Progress != nil {
		if *req.Progress < 0 || *req.Progress > 100 {
			return httperr.Errorf(http.StatusBadRequest, "progress must be 0 to 100, got %v", *req.Progress)
		}
		if _, err := a.st.JobProgress(r.Context(), &store.JobProgressParams{
			Updates: []store.ProgressUpdate{{ID: id, ClaimToken: req.ClaimToken, Progress: *req.Progress}}}); err != nil {
			return err
		}
	}
	st, err := a.st.LeaseExtend(r.Context(), &store.LeaseExtendParams{Leases: []store.LeaseRef{{ID: id, ClaimToken: req.ClaimToken}},
		Now: time.Now(), Lease: lease})
	if err != nil {
		return err
	}
	if !st[0].Held {
		if _, err := a.c.JobGet(r.Context(), id); errors.Is(err, sortie.ErrNotFound) {
			return httperr.Errorf(http.StatusNotFound, "job %d not found (deleted, or never claimed): stop running it", id)
		}
	}
	writeJSON(w, http.StatusOK, map[string]bool{"held": st[0].Held, "cancel_requested": st[0].CancelRequested})
	return nil
}
