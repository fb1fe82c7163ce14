package httpapi

import (
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
// them, and reports each one's end with the claim_token the fetch gave it
// (report.go); while a job runs longer than its lease, it heartbeats. A
// report with a token that is no longer the job's (the lease ran out and
// the job was rescued and claimed again) is refused with 409, like a stale
// worker of the Go runtime.

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
		rows, err := store.FetchedJobs(a.st.JobFetch(ctx, p))
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

// heartbeat: POST /api/v1/jobs/{id}/heartbeat, {"claim_token", "lease",
// "progress"}: extends the lease (default 30 s) and records progress. It
// answers whether the claim is still held and whether the job was asked to
// cancel: a worker stops the job when either says so.
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
