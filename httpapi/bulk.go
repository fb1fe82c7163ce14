package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// maxBulk caps the jobs one bulk request acts on; a client goes on with
// the cursor it answers.
const maxBulk = 10_000

// bulkRequest is a bulk action on the jobs a filter matches.
type bulkRequest struct {
	Action        string   `json:"action"`
	Queue         string   `json:"queue"`
	State         string   `json:"state"`
	Kind          string   `json:"kind"`
	Workflow      int64    `json:"workflow"`
	Tag           string   `json:"tag"`
	UniqueKey     string   `json:"unique_key"`
	Error         string   `json:"error"`
	Args          []string `json:"args"`
	CreatedAfter  string   `json:"created_after"`
	CreatedBefore string   `json:"created_before"`
	Max           *int     `json:"max"`
	After         int64    `json:"after"`
}

// search is the request's filter; at least one is required.
func (req *bulkRequest) search() (*sortie.JobSearch, error) {
	s := &sortie.JobSearch{JobListParams: sortie.JobListParams{Queue: req.Queue, State: store.JobState(req.State), Kind: req.Kind,
		WorkflowID: req.Workflow}, Tag: req.Tag, UniqueKey: req.UniqueKey, ErrorContains: req.Error}
	if req.State != "" && !jobjson.ValidState(s.State) {
		return nil, httperr.Errorf(http.StatusBadRequest, "state %s is not a job state: want one of %s", shown(req.State), jobjson.StateNames())
	}
	for i, a := range req.Args {
		m, err := sortie.ParseArgsMatch(a)
		if err != nil {
			return nil, httperr.Errorf(http.StatusBadRequest, "args[%d]: %v", i, err)
		}
		s.Args = append(s.Args, m)
	}
	var err error
	if s.CreatedAfter, err = timeOf("created_after", req.CreatedAfter); err != nil {
		return nil, err
	}
	if s.CreatedBefore, err = timeOf("created_before", req.CreatedBefore); err != nil {
		return nil, err
	}
	if req.Queue == "" && req.State == "" && req.Kind == "" && req.Workflow == 0 && req.Tag == "" && req.UniqueKey == "" &&
		req.Error == "" && len(req.Args) == 0 && req.CreatedAfter == "" && req.CreatedBefore == "" {
		return nil, httperr.Errorf(http.StatusBadRequest, "a filter is required: queue, state, kind, workflow, tag, unique_key, error, args, created_after or created_before")
	}
	return s, nil
}

// bulkFailure is one job a bulk action could not act on.
type bulkFailure struct {
	ID    int64  `json:"id"`
	Error string `json:"error"`
}

// bulk: POST /api/v1/jobs/bulk, {"action": "retry"|"cancel"|"delete",
// "queue", "state", "kind", "workflow", "max", "after"}: acts on up to max
// (default 1,000, at most 10,000) jobs the filter matches, newest first,
// through Client.JobsBulk, and answers {"changed", "failed", "next_after"}:
// with next_after not 0, send the same request with "after" set to it for
// the next batch. A filter is required: "every job" is asked for by name
// through the state.
func (a *api) bulk(w http.ResponseWriter, r *http.Request) error {
	var req bulkRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	action := sortie.BulkAction(req.Action)
	switch action {
	case sortie.BulkRetry, sortie.BulkCancel, sortie.BulkDelete:
	case "":
		return httperr.Errorf(http.StatusBadRequest, "action is required: retry, cancel or delete")
	default:
		return httperr.Errorf(http.StatusBadRequest, "action must be retry, cancel or delete, got %s", shown(req.Action))
	}
	filter, err := req.search()
	if err != nil {
		return err
	}
	if req.Workflow < 0 || req.After < 0 {
		return httperr.Errorf(http.StatusBadRequest, "workflow and after must not be negative")
	}
	max := 1000
	if req.Max != nil {
		max = *req.Max
	}
	if max < 1 || max > maxBulk {
		return httperr.Errorf(http.StatusBadRequest, "max must be 1 to %d, got %d", maxBulk, max)
	}
	res, err := a.c.JobsBulk(r.Context(), action, filter, &sortie.BulkOpts{Max: max, After: req.After})
	if err != nil && res == nil {
		return err
	}
	if err != nil {
		// Stopped part way: say how far it got, so the client can go on.
		if errors.Is(err, r.Context().Err()) {
			return nil
		}
		return fmt.Errorf("after changing %d jobs: %w", res.Changed, err)
	}
	failed := make([]bulkFailure, len(res.Failed))
	for i, f := range res.Failed {
		failed[i] = bulkFailure{ID: f.ID, Error: f.Err.Error()}
	}
	writeJSON(w, http.StatusOK, map[string]any{"changed": res.Changed, "failed": failed, "next_after": res.Next})
	return nil
}
