package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// Durable steps of remote workers. A worker in another language runs a
// job in steps as sortie.Step does in Go: it reads the job's recorded
// steps (GET /api/v1/jobs/{id}/steps), returns a recorded step's result
// without running its code, and records each new step's result under its
// claim token (POST /api/v1/jobs/{id}/steps) before going on. A stale
// claim records nothing (409), as a stale report.

// stepsResponse is a job's steps with their results.
type stepsResponse struct {
	Steps []jobjson.StepDetail `json:"steps"`
}

// steps: GET /api/v1/jobs/{id}/steps, {"steps": [...]}: the job's steps in
// the order recorded, each with its result (a step) or its children's IDs
// (a spawn).
func (a *api) steps(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	list, err := a.c.JobSteps(r.Context(), id)
	if errors.Is(err, sortie.ErrNotFound) {
		return httperr.Errorf(http.StatusNotFound, "job %d not found", id)
	}
	if err != nil {
		return err
	}
	out := stepsResponse{Steps: make([]jobjson.StepDetail, len(list))}
	for i, s := range list {
		out.Steps[i] = jobjson.StepDetailOf(s)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// recordStepRequest records one step of a claimed job.
type recordStepRequest struct {
	ClaimToken int64           `json:"claim_token"`
	Name       string          `json:"name"`
	Result     json.RawMessage `json:"result"`
}

// recordStepResponse says whether the step was recorded now, and the step
// as recorded (an earlier attempt's, when it was not).
type recordStepResponse struct {
	Recorded bool               `json:"recorded"`
	Step     jobjson.StepDetail `json:"step"`
}

// recordStep: POST /api/v1/jobs/{id}/steps, {"claim_token", "name",
// "result"}: records step name of the claimed job with result (any JSON
// value). It answers 201 with the step when it recorded it, and 200 with
// the step recorded before when the job had one of that name (the worker
// uses that result). A stale claim is 409, a missing job 404.
func (a *api) recordStep(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req recordStepRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := needToken("", req.ClaimToken); err != nil {
		return err
	}
	if req.Name == "" || len(req.Name) > store.MaxStepNameLen || !utf8.ValidString(req.Name) {
		return httperr.Errorf(http.StatusBadRequest, "name must be 1 to %d bytes of UTF-8, got %d bytes", store.MaxStepNameLen, len(req.Name))
	}
	if len(req.Result) == 0 {
		return httperr.Errorf(http.StatusBadRequest, "result is required: the step's result, any JSON value (null included)")
	}
	result, err := a.result(req.Result, "")
	if err != nil {
		return err
	}
	if result == nil {
		result = []byte("null")
	}
	rec, err := a.c.RecordStep(r.Context(), id, req.ClaimToken, req.Name, result)
	switch {
	case errors.Is(err, sortie.ErrNotFound):
		return httperr.Errorf(http.StatusNotFound, "job %d not found: the step is not recorded", id)
	case errors.Is(err, sortie.ErrLeaseLost):
		return httperr.Errorf(http.StatusConflict, "job %d: claim %d is no longer the job's (its lease ran out, or it was finished or cancelled): the step is not recorded; stop running the job",
			id, req.ClaimToken)
	case err != nil:
		return err
	}
	status := http.StatusCreated
	if rec.Existed {
		status = http.StatusOK
	}
	writeJSON(w, status, recordStepResponse{Recorded: !rec.Existed, Step: jobjson.StepDetailOf(rec.Step)})
	return nil
}
