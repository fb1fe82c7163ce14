package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
)

// Reports: a remote worker says how its claims ended, one job a request on
// the job's path (complete, fail, snooze, release), or many jobs in one
// request (POST /api/v1/reports), which costs the store one write for the
// whole batch. Both check reports the same way and record them in one
// store call; a report whose claim is stale is refused on its own.

// The outcomes a report names.
const (
	outcomeComplete = "complete"
	outcomeFail     = "fail"
	outcomeCancel   = "cancel"
	outcomeSnooze   = "snooze"
	outcomeRelease  = "release"
)

// report is how one claim ended, as a worker reports it.
type report struct {
	ID         int64           `json:"id"`
	ClaimToken int64           `json:"claim_token"`
	Outcome    string          `json:"outcome"`
	Result     json.RawMessage `json:"result"`
	Error      string          `json:"error"`
	RetryIn    string          `json:"retry_in"`
	RunIn      string          `json:"run_in"`
}

// reportResult is what became of one report: recorded with the job's new
// state, or refused with the status and error a single report would get
// (404: no such job; 409: the claim is no longer the job's).
type reportResult struct {
	ID       int64  `json:"id"`
	Recorded bool   `json:"recorded"`
	State    string `json:"state,omitempty"`
	Status   int    `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
}

// needToken refuses a report without its claim token.
func needToken(what string, token int64) error {
	if token == 0 {
		return httperr.Errorf(http.StatusBadRequest, "%sclaim_token is required: send the one the fetch gave", what)
	}
	return nil
}

// check validates rep, named what in messages ("reports[2]." or ""), and
// returns the client's report of it.
func (a *api) check(rep *report, what string, now time.Time) (*sortie.Report, error) {
	if err := needToken(what, rep.ClaimToken); err != nil {
		return nil, err
	}
	if err := onlyWith(rep, what); err != nil {
		return nil, err
	}
	c := &sortie.Report{ID: rep.ID, ClaimToken: rep.ClaimToken}
	switch rep.Outcome {
	case outcomeComplete:
		c.Kind = sortie.ReportCompleted
		result, err := a.result(rep.Result, what)
		if err != nil {
			return nil, err
		}
		c.Result = result
	case outcomeFail:
		c.Kind, c.Err = sortie.ReportFailed, errors.New(rep.Error)
		retryIn, err := duration(what+"retry_in", rep.RetryIn)
		if err != nil {
			return nil, err
		}
		if rep.RetryIn != "" {
			// Otherwise the kind's retry policy decides.
			c.RunAt = now.Add(retryIn)
		}
	case outcomeCancel:
		c.Kind = sortie.ReportCancelled
		if rep.Error != "" {
			c.Err = errors.New(rep.Error)
		}
	case outcomeSnooze:
		c.Kind = sortie.ReportSnoozed
		runIn, err := duration(what+"run_in", rep.RunIn)
		if err != nil {
			return nil, err
		}
		c.RunAt = now.Add(runIn)
	case outcomeRelease:
		c.Kind = sortie.ReportReleased
	default:
		return nil, httperr.Errorf(http.StatusBadRequest, "%soutcome must be complete, fail, cancel, snooze or release, got %s", what, shown(rep.Outcome))
	}
	return c, nil
}

// onlyWith refuses a field the report's outcome does not take, which is a
// mistake the worker would want to hear about (a result sent with a fail).
func onlyWith(rep *report, what string) error {
	for _, f := range []struct {
		name     string
		set      bool
		outcomes []string
	}{
		{"result", len(rep.Result) > 0 && string(rep.Result) != "null", []string{outcomeComplete}},
		{"error", rep.Error != "", []string{outcomeFail, outcomeCancel}},
		{"retry_in", rep.RetryIn != "", []string{outcomeFail}},
		{"run_in", rep.RunIn != "", []string{outcomeSnooze}},
	} {
		if f.set && rep.Outcome != f.outcomes[0] && (len(f.outcomes) == 1 || rep.Outcome != f.outcomes[1]) {
			return httperr.Errorf(http.StatusBadRequest, "%s%s does not go with outcome %s", what, f.name, shown(rep.Outcome))
		}
	}
	return nil
}

// result checks a completed job's result and compacts it, as the library
// stores a handler's result; JSON null is no result.
func (a *api) result(raw json.RawMessage, what string) ([]byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if len(raw) > a.opts.MaxResultBytes {
		return nil, httperr.Errorf(http.StatusRequestEntityTooLarge, "%sresult is %d bytes, more than %d", what, len(raw), a.opts.MaxResultBytes)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, httperr.Errorf(http.StatusBadRequest, "%sresult is not valid JSON: %v", what, err)
	}
	return buf.Bytes(), nil
}

// record applies checked reports through the client, in one store call,
// and says what became of each, in order.
func (a *api) record(ctx context.Context, cs []*sortie.Report) ([]reportResult, error) {
	res, err := a.c.Report(ctx, cs...)
	if err != nil {
		return nil, err
	}
	results := make([]reportResult, len(cs))
	for i, r := range res {
		results[i].ID = cs[i].ID
		switch {
		case errors.Is(r.Err, sortie.ErrNotFound):
			results[i].Status = http.StatusNotFound
			results[i].Error = fmt.Sprintf("job %d not found: the outcome is not recorded", cs[i].ID)
		case r.Err != nil:
			results[i].Status = http.StatusConflict
			results[i].Error = fmt.Sprintf("job %d: claim %d is no longer the job's (its lease ran out, or it was finished or cancelled): the outcome is not recorded",
				cs[i].ID, cs[i].ClaimToken)
		default:
			results[i].Recorded, results[i].State = true, string(r.State)
			a.logJob(ctx, "job finished", slog.Int64("job_id", cs[i].ID), slog.String("outcome", string(r.Outcome)),
				slog.String("state", string(r.State)))
		}
	}
	return results, nil
}

// reports: POST /api/v1/reports, {"reports": [{"id", "claim_token",
// "outcome", ...}]}: 1 to 1,000 reports, one per job, recorded in one store
// call. A malformed report refuses the request (400, nothing recorded); a
// stale claim or a missing job is refused on its own, in its result. It
// answers {"results": [...]}, one per report, in order.
func (a *api) reports(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Reports []report `json:"reports"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	if len(req.Reports) == 0 || len(req.Reports) > maxBatch {
		return httperr.Errorf(http.StatusBadRequest, "reports must hold 1 to %d reports, got %d", maxBatch, len(req.Reports))
	}
	now := time.Now()
	cs := make([]*sortie.Report, len(req.Reports))
	first := make(map[int64]int, len(req.Reports))
	for i := range req.Reports {
		rep := &req.Reports[i]
		what := fmt.Sprintf("reports[%d].", i)
		if rep.ID < 1 {
			return httperr.Errorf(http.StatusBadRequest, "%sid must be a job ID (a positive integer), got %d", what, rep.ID)
		}
		if j, dup := first[rep.ID]; dup {
			return httperr.Errorf(http.StatusBadRequest, "reports[%d] and reports[%d] are both about job %d: send one report per job", j, i, rep.ID)
		}
		first[rep.ID] = i
		c, err := a.check(rep, what, now)
		if err != nil {
			return err
		}
		cs[i] = c
	}
	results, err := a.record(r.Context(), cs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
	return nil
}

// reportOne records the report on the path's job: 200 with the job's new
// state, or the refusal's status.
func (a *api) reportOne(w http.ResponseWriter, r *http.Request, rep *report) error {
	now := time.Now()
	c, err := a.check(rep, "", now)
	if err != nil {
		return err
	}
	res, err := a.record(r.Context(), []*sortie.Report{c})
	if err != nil {
		return err
	}
	if !res[0].Recorded {
		return httperr.Errorf(res[0].Status, "%s", res[0].Error)
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": rep.ID, "state": res[0].State})
	return nil
}

// decodeReport reads the path's job ID and the body into req.
func decodeReport(r *http.Request, req any) (int64, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, err
	}
	return id, decode(r, req)
}

// complete: POST /api/v1/jobs/{id}/complete, {"claim_token", "result"}.
func (a *api) complete(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ClaimToken int64           `json:"claim_token"`
		Result     json.RawMessage `json:"result"`
	}
	id, err := decodeReport(r, &req)
	if err != nil {
		return err
	}
	return a.reportOne(w, r, &report{ID: id, ClaimToken: req.ClaimToken, Outcome: outcomeComplete, Result: req.Result})
}

// fail: POST /api/v1/jobs/{id}/fail, {"claim_token", "error", "retry_in",
// "discard"}. The job is retried after retry_in, or after the delay the
// serving client's retry policy gives its kind (WorkerOpts.RetryPolicy of
// AddWorker or Workers.AddKind, else Config.RetryPolicy), until it runs
// out of attempts and is dead; discard cancels it instead, never to be
// retried.
func (a *api) fail(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ClaimToken int64  `json:"claim_token"`
		Error      string `json:"error"`
		RetryIn    string `json:"retry_in"`
		Discard    bool   `json:"discard"`
	}
	id, err := decodeReport(r, &req)
	if err != nil {
		return err
	}
	if req.Discard && req.RetryIn != "" {
		return httperr.Errorf(http.StatusBadRequest, "discard and retry_in together: a discarded job is not retried")
	}
	rep := &report{ID: id, ClaimToken: req.ClaimToken, Outcome: outcomeFail, Error: req.Error, RetryIn: req.RetryIn}
	if req.Discard {
		rep.Outcome = outcomeCancel
	}
	return a.reportOne(w, r, rep)
}

// snooze: POST /api/v1/jobs/{id}/snooze, {"claim_token", "run_in"}: the job
// runs again after run_in, and the attempt is not counted.
func (a *api) snooze(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ClaimToken int64  `json:"claim_token"`
		RunIn      string `json:"run_in"`
	}
	id, err := decodeReport(r, &req)
	if err != nil {
		return err
	}
	return a.reportOne(w, r, &report{ID: id, ClaimToken: req.ClaimToken, Outcome: outcomeSnooze, RunIn: req.RunIn})
}

// release: POST /api/v1/jobs/{id}/release, {"claim_token"}: the job is
// available again at once and the attempt is not counted, for a worker
// that stops before running the jobs it claimed.
func (a *api) release(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ClaimToken int64 `json:"claim_token"`
	}
	id, err := decodeReport(r, &req)
	if err != nil {
		return err
	}
	return a.reportOne(w, r, &report{ID: id, ClaimToken: req.ClaimToken, Outcome: outcomeRelease})
}
