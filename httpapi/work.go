package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// Remote workers. A worker in any language claims jobs with a fetch, runs
// them, and reports each one's end with the claim_token the fetch gave it
// (report.go); while a job runs longer than its lease, it heartbeats. A
// report with a token that is no longer the job's (the lease ran out and
// the job was rescued and claimed again) is refused with 409, like a stale
// worker of the Go runtime.

// maxLease caps a remote worker's lease.
const maxLease = time.Hour

// fetchRequest asks for up to limit jobs of queue.
type fetchRequest struct {
	Queue  string   `json:"queue"`
	Kinds  []string `json:"kinds"`
	Limit  *int     `json:"limit"`
	Worker string   `json:"worker"`
	Lease  string   `json:"lease"`
	Wait   string   `json:"wait"`
}

// fetch: POST /api/v1/fetch. It claims up to limit (default 1) available
// jobs of the queue through the client's Take, with a lease (default the
// client's Config.Lease), and answers with them, each with its
// claim_token and its timeout (the job's own, else its kind's). With wait
// it long-polls: when none is available it answers as soon as one is, or
// with none once wait has passed or the server is stopping.
func (a *api) fetch(w http.ResponseWriter, r *http.Request) error {
	var req fetchRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	opts, err := a.takeOpts(&req)
	if err != nil {
		return err
	}
	if opts.Worker == "" {
		opts.Worker = "http:" + r.RemoteAddr
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-a.opts.Stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	a.known.fetchedFrom(req.Queue)
	jobs, err := a.c.Take(ctx, req.Queue, *req.Limit, opts)
	switch {
	case r.Context().Err() != nil:
		// The worker went away: nobody to answer.
		return nil
	case errors.Is(err, context.Canceled):
		// Shutting down: no jobs, ask again (elsewhere).
	case err != nil:
		return err
	}
	out := make([]jobjson.Job, len(jobs))
	for i, j := range jobs {
		out[i] = jobjson.FromRow(j.JobRow)
		a.logJob(r.Context(), "job started", slog.Int64("job_id", j.ID), slog.String("kind", j.Kind),
			slog.String("queue", j.Queue), slog.Int("attempt", j.Attempt), slog.String("worker", j.AttemptedBy))
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
	return nil
}

// takeOpts checks a fetch request, filling in its defaults, and returns
// its Take options.
func (a *api) takeOpts(req *fetchRequest) (*sortie.TakeOpts, error) {
	if req.Queue == "" {
		return nil, httperr.Errorf(http.StatusBadRequest, "queue is required: name the queue to claim from (%q for jobs enqueued without one)", sortie.QueueDefault)
	}
	if err := store.ValidateQueueName(req.Queue); err != nil {
		return nil, httperr.Errorf(http.StatusBadRequest, "queue: %v", err)
	}
	for i, k := range req.Kinds {
		if err := store.ValidateKind(k); err != nil {
			return nil, httperr.Errorf(http.StatusBadRequest, "kinds[%d]: %v", i, err)
		}
	}
	if req.Limit == nil {
		one := 1
		req.Limit = &one
	}
	if *req.Limit < 1 || *req.Limit > maxBatch {
		return nil, httperr.Errorf(http.StatusBadRequest, "limit must be 1 to %d, got %d", maxBatch, *req.Limit)
	}
	lease, err := leaseOf(req.Lease)
	if err != nil {
		return nil, err
	}
	wait, err := duration("wait", req.Wait)
	if err != nil {
		return nil, err
	}
	if wait > a.opts.MaxWait {
		return nil, httperr.Errorf(http.StatusBadRequest, "wait must be at most %s, got %s", a.opts.MaxWait, wait)
	}
	if wait == 0 {
		wait = -1 // no wait: one claim
	}
	return &sortie.TakeOpts{Kinds: req.Kinds, Wait: wait, Lease: lease, Worker: req.Worker, Remote: true}, nil
}

// leaseOf parses a lease: within 1 s to an hour, or empty for the client's
// default.
func leaseOf(s string) (time.Duration, error) {
	lease, err := duration("lease", s)
	if err != nil || s == "" {
		return 0, err
	}
	if lease < time.Second || lease > maxLease {
		return 0, httperr.Errorf(http.StatusBadRequest, "lease must be 1s to %s, got %s", maxLease, lease)
	}
	return lease, nil
}

// heartbeat: POST /api/v1/jobs/{id}/heartbeat, {"claim_token", "lease",
// "progress"}: extends the lease (default the client's Config.Lease) and
// records progress. It answers whether the claim is still held and whether
// the job was asked to cancel: a worker stops the job when either says so.
func (a *api) heartbeat(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ClaimToken int64    `json:"claim_token"`
		Lease      string   `json:"lease"`
		Progress   *float64 `json:"progress"`
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := needToken("", req.ClaimToken); err != nil {
		return err
	}
	lease, err := leaseOf(req.Lease)
	if err != nil {
		return err
	}
	if p := req.Progress; p != nil && (*p < 0 || *p > 100) {
		return httperr.Errorf(http.StatusBadRequest, "progress must be 0 to 100, got %v", *p)
	}
	st, err := a.c.ExtendLease(r.Context(), id, req.ClaimToken, &sortie.ExtendLeaseOpts{Lease: lease, Progress: req.Progress})
	if errors.Is(err, sortie.ErrNotFound) {
		return httperr.Errorf(http.StatusNotFound, "job %d not found (deleted, or never claimed): stop running it", id)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]bool{"held": st.Held, "cancel_requested": st.CancelRequested})
	return nil
}
