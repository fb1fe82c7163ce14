package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

func TestRemoteSteps(t *testing.T) { onStores(t, testRemoteSteps) }

// testRemoteSteps walks a remote worker's durable steps: the first attempt
// records "charge" and is rescued; the next reads the recorded step,
// records "receipt", and a record of "charge" again keeps the first
// result; the stale claim records nothing; the job shows its steps.
func testRemoteSteps(t *testing.T, s *server) {
	ctx := context.Background()
	fetch := func() map[string]any {
		t.Helper()
		out := s.must(t, http.StatusOK, "POST", "/api/v1/fetch", `{"queue": "shop", "lease": "1s"}`)
		jobs, _ := out["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("fetch = %v, want one job", out)
		}
		return jobs[0].(map[string]any)
	}
	record := func(want int, j map[string]any, name, result string) map[string]any {
		t.Helper()
		return s.must(t, want, "POST", fmt.Sprintf("/api/v1/jobs/%v/steps", j["id"]),
			fmt.Sprintf(`{"claim_token": %v, "name": %q, "result": %s}`, j["claim_token"], name, result))
	}
	job := id(t, s.must(t, http.StatusCreated, "POST", "/api/v1/jobs", `{"kind": "order", "queue": "shop"}`))
	first := fetch()
	out := record(http.StatusCreated, first, "charge", `{"charge_id": "ch_1"}`)
	if step, _ := out["step"].(map[string]any); out["recorded"] != true || step["name"] != "charge" || step["attempt"] != 1.0 ||
		fmt.Sprint(step["result"]) != "map[charge_id:ch_1]" {
		t.Errorf("record charge = %v, want recorded by attempt 1 with its result", out)
	}
	if n, err := s.st.JobRescue(ctx, &store.JobRescueParams{Now: time.Now().Add(2 * time.Second), Limit: 10}); n != 1 || err != nil {
		t.Fatalf("JobRescue = %d, %v", n, err)
	}
	second := fetch()
	list := s.must(t, http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d/steps", job), "")
	steps, _ := list["steps"].([]any)
	if len(steps) != 1 || fmt.Sprint(steps[0].(map[string]any)["result"]) != "map[charge_id:ch_1]" {
		t.Fatalf("steps after the rescue = %v, want charge with its result", list)
	}
	out = record(http.StatusOK, second, "charge", `{"charge_id": "ch_2"}`)
	if step, _ := out["step"].(map[string]any); out["recorded"] != false || fmt.Sprint(step["result"]) != "map[charge_id:ch_1]" {
		t.Errorf("record charge again = %v, want the first record, not recorded", out)
	}
	if out := record(http.StatusConflict, first, "receipt", `1`); !strings.Contains(fmt.Sprint(out["error"]), "no longer the job's") {
		t.Errorf("record with the stale claim = %v, want 409 naming the claim", out)
	}
	record(http.StatusCreated, second, "receipt", `null`)
	for _, bad := range []struct{ body, names string }{
		{fmt.Sprintf(`{"claim_token": %v, "name": "", "result": 1}`, second["claim_token"]), "name"},
		{fmt.Sprintf(`{"claim_token": %v, "name": "x"}`, second["claim_token"]), "result"},
		{`{"name": "x", "result": 1}`, "claim_token"},
	} {
		code, out := s.malformedOnPurpose().call(t, "POST", fmt.Sprintf("/api/v1/jobs/%d/steps", job), bad.body)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), bad.names) {
			t.Errorf("record %s = %d %v, want 400 naming %s", bad.body, code, out, bad.names)
		}
	}
	s.must(t, http.StatusNotFound, "GET", "/api/v1/jobs/987654321/steps", "")
	got := s.must(t, http.StatusOK, "GET", fmt.Sprintf("/api/v1/jobs/%d", job), "")
	if steps, _ := got["steps"].([]any); len(steps) != 2 || steps[0].(map[string]any)["name"] != "charge" ||
		steps[1].(map[string]any)["name"] != "receipt" || steps[0].(map[string]any)["result"] != nil {
		t.Errorf("job's steps = %v, want charge and receipt without results", got["steps"])
	}
}
