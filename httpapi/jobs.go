package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// enqueueRequest is one job to enqueue. Only kind is required; args default
// to {}.
type enqueueRequest struct {
	Kind             string          `json:"kind"`
	Args             json.RawMessage `json:"args"`
	Queue            string          `json:"queue"`
	Priority         int             `json:"priority"`
	RunAt            string          `json:"run_at"`
	RunIn            string          `json:"run_in"`
	MaxAttempts      int             `json:"max_attempts"`
	UniqueKey        string          `json:"unique_key"`
	Tags             []string        `json:"tags"`
	Meta             map[string]any  `json:"meta"`
	Timeout          string          `json:"timeout"`
	PartitionKey     string          `json:"partition_key"`
	DependsOn        []int64         `json:"depends_on"`
	IgnoreDepFailure bool            `json:"ignore_dep_failure"`
}

// enqueueResult is what an enqueue did.
type enqueueResult struct {
	ID        int64  `json:"id"`
	Duplicate bool   `json:"duplicate"`
	State     string `json:"state"`
	// Warnings say what may keep the job from running though it was
	// stored: a queue the store did not know.
	Warnings []string `json:"warnings,omitempty"`
}

// params turns the request into the client's enqueue arguments; what names
// the job in messages ("jobs[3]").
func (q *enqueueRequest) params(what string) (sortie.EnqueueParams, error) {
	if q.Kind == "" {
		return sortie.EnqueueParams{}, httperr.Errorf(http.StatusBadRequest, "%skind is required", what)
	}
	args := q.Args
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if c := bytes.TrimLeft(args, " \t\r\n"); c[0] != '{' && c[0] != '[' {
		return sortie.EnqueueParams{}, httperr.Errorf(http.StatusBadRequest, "%sargs must be a JSON object or array, got %s", what, shown(string(c)))
	}
	runAt, err := timeOf(what+"run_at", q.RunAt)
	if err != nil {
		return sortie.EnqueueParams{}, err
	}
	runIn, err := duration(what+"run_in", q.RunIn)
	if err != nil {
		return sortie.EnqueueParams{}, err
	}
	if q.RunAt != "" && q.RunIn != "" {
		return sortie.EnqueueParams{}, httperr.Errorf(http.StatusBadRequest, "%srun_at and %srun_in together: send one of them", what, what)
	}
	timeout, err := duration(what+"timeout", q.Timeout)
	if err != nil {
		return sortie.EnqueueParams{}, err
	}
	opts := &sortie.EnqueueOpts{Queue: q.Queue, Priority: q.Priority, RunIn: runIn, MaxAttempts: q.MaxAttempts,
		UniqueKey: q.UniqueKey, Tags: q.Tags, Meta: q.Meta, Timeout: timeout, PartitionKey: q.PartitionKey,
		DependsOn: q.DependsOn, IgnoreDepFailure: q.IgnoreDepFailure, RunAt: runAt}
	return sortie.EnqueueParams{Args: jobjson.RawArgs{JobKind: q.Kind, JSON: args}, Opts: opts}, nil
}

func resultOf(r sortie.EnqueueResult) enqueueResult {
	return enqueueResult{ID: r.ID, Duplicate: r.Duplicate, State: string(r.State)}
}

// enqueue: POST /api/v1/jobs. 201 with the new job's ID, or 200 naming the
// pending job that holds the unique key.
func (a *api) enqueue(w http.ResponseWriter, r *http.Request) error {
	var req enqueueRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	p, err := req.params("")
	if err != nil {
		return err
	}
	warn := a.known.unknown(r.Context(), a.c, req.Queue)
	res, err := a.c.Enqueue(r.Context(), p.Args, p.Opts)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	out := resultOf(res)
	out.Warnings = warn
	writeJSON(w, status, out)
	return nil
}

// enqueueBatch: POST /api/v1/jobs/batch, {"jobs": [...]}: all or none, one
// result per job in order.
func (a *api) enqueueBatch(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Jobs []enqueueRequest `json:"jobs"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	if len(req.Jobs) == 0 || len(req.Jobs) > maxBatch {
		return httperr.Errorf(http.StatusBadRequest, "jobs must hold 1 to %d jobs, got %d", maxBatch, len(req.Jobs))
	}
	params := make([]sortie.EnqueueParams, len(req.Jobs))
	warns := make([][]string, len(req.Jobs))
	for i := range req.Jobs {
		p, err := req.Jobs[i].params(fmt.Sprintf("jobs[%d].", i))
		if err != nil {
			return err
		}
		params[i] = p
		warns[i] = a.known.unknown(r.Context(), a.c, req.Jobs[i].Queue)
	}
	res, err := a.c.EnqueueMany(r.Context(), params)
	if err != nil {
		return err
	}
	out := make([]enqueueResult, len(res))
	for i, x := range res {
		out[i] = resultOf(x)
		out[i].Warnings = warns[i]
	}
	writeJSON(w, http.StatusCreated, map[string]any{"results": out})
	return nil
}

// list: GET /api/v1/jobs?queue=&state=&kind=&workflow=&after=&limit=&desc=
// plus the search's tag=&unique_key=&error=&args=PATH=VALUE (repeatable)&
// created_after=&created_before=&scan_max=. The indexed filters page
// through the store; the others are checked on at most scan_max jobs a
// request (default 10,000): a page that stopped there says "capped": true
// and continues from next_after.
func (a *api) list(w http.ResponseWriter, r *http.Request) error {
	s, err := searchOf(r.URL.Query())
	if err != nil {
		return err
	}
	res, err := a.c.JobSearch(r.Context(), s)
	if err != nil {
		return err
	}
	page := jobjson.Page{Jobs: make([]jobjson.Job, len(res.Jobs)), NextAfter: res.NextCursor}
	for i, row := range res.Jobs {
		page.Jobs[i] = jobjson.FromRow(row)
	}
	writeJSON(w, http.StatusOK, struct {
		jobjson.Page
		Scanned int  `json:"scanned"`
		Capped  bool `json:"capped"`
	}{page, res.Scanned, res.Capped})
	return nil
}

// searchParams are the query parameters of GET /api/v1/jobs.
var searchParams = []string{"queue", "state", "kind", "workflow", "after", "limit", "desc", "tag", "unique_key", "error", "args",
	"created_after", "created_before", "scan_max"}

// searchOf reads a job search from query parameters.
func searchOf(q url.Values) (*sortie.JobSearch, error) {
	for key := range q {
		if !slices.Contains(searchParams, key) {
			return nil, httperr.Errorf(http.StatusBadRequest, "unknown query parameter %q: want one of %s", key, strings.Join(searchParams, ", "))
		}
	}
	s := &sortie.JobSearch{JobListParams: sortie.JobListParams{Queue: q.Get("queue"), State: store.JobState(q.Get("state")),
		Kind: q.Get("kind"), Limit: 100}, Tag: q.Get("tag"), UniqueKey: q.Get("unique_key"), ErrorContains: q.Get("error")}
	if st := q.Get("state"); st != "" && !jobjson.ValidState(s.State) {
		return nil, httperr.Errorf(http.StatusBadRequest, "state %q is not a job state: want one of %s", st, jobjson.StateNames())
	}
	var err error
	if s.WorkflowID, err = intParam(q.Get("workflow"), "workflow", 0, 1<<62); err != nil {
		return nil, err
	}
	if s.Cursor, err = intParam(q.Get("after"), "after", 0, 1<<62); err != nil {
		return nil, err
	}
	limit, err := intParam(q.Get("limit"), "limit", 1, maxBatch)
	if err != nil {
		return nil, err
	}
	if limit != 0 {
		s.Limit = int(limit)
	}
	scan, err := intParam(q.Get("scan_max"), "scan_max", 1, 100_000)
	if err != nil {
		return nil, err
	}
	s.ScanMax = int(scan)
	switch q.Get("desc") {
	case "", "false":
	case "true":
		s.Desc = true
	default:
		return nil, httperr.Errorf(http.StatusBadRequest, "desc must be true or false, got %q", q.Get("desc"))
	}
	for _, m := range q["args"] {
		am, err := sortie.ParseArgsMatch(m)
		if err != nil {
			return nil, httperr.Errorf(http.StatusBadRequest, "args: %v", err)
		}
		s.Args = append(s.Args, am)
	}
	if s.CreatedAfter, err = timeOf("created_after", q.Get("created_after")); err != nil {
		return nil, err
	}
	if s.CreatedBefore, err = timeOf("created_before", q.Get("created_before")); err != nil {
		return nil, err
	}
	return s, nil
}

// intParam parses an optional integer query parameter within [lo, hi];
// absent is 0.
func intParam(s, name string, lo, hi int64) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, httperr.Errorf(http.StatusBadRequest, "%s must be an integer from %d to %d, got %q", name, lo, hi, s)
	}
	return n, nil
}

// get: GET /api/v1/jobs/{id}.
func (a *api) get(w http.ResponseWriter, r *http.Request) error {
	return a.onJob(w, r, (*sortie.Client).JobGet)
}

// retry: POST /api/v1/jobs/{id}/retry.
func (a *api) retry(w http.ResponseWriter, r *http.Request) error {
	return a.onJob(w, r, (*sortie.Client).JobRetry)
}

// cancel: POST /api/v1/jobs/{id}/cancel. A running job stays running with
// cancel_requested until its worker's next heartbeat.
func (a *api) cancel(w http.ResponseWriter, r *http.Request) error {
	return a.onJob(w, r, (*sortie.Client).JobCancel)
}

// delete: DELETE /api/v1/jobs/{id}; answers with the job as it was.
func (a *api) delete(w http.ResponseWriter, r *http.Request) error {
	return a.onJob(w, r, (*sortie.Client).JobDelete)
}

// onJob runs act on the path's job and answers with the job it returns.
func (a *api) onJob(w http.ResponseWriter, r *http.Request, act func(*sortie.Client, context.Context, int64) (*store.JobRow, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	row, err := act(a.c, r.Context(), id)
	if errors.Is(err, sortie.ErrNotFound) {
		return httperr.Errorf(http.StatusNotFound, "job %d not found", id)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jobjson.FromRow(row))
	return nil
}
