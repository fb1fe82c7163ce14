package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

func TestQueuesHistory(t *testing.T) { onStores(t, testQueuesHistory) }

// GET /api/v1/queues/history answers the jobs finished per queue and
// outcome over the last hour, or since, per step, with the totals; it
// refuses a period or a step it cannot answer.
func testQueuesHistory(t *testing.T, s *server) {
	ctx := context.Background()
	now := time.Now()
	if _, err := s.st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: now, Jobs: []*store.NewJob{
		{Kind: "k", Queue: "mail", Args: []byte(`{}`)}, {Kind: "k", Queue: "mail", Args: []byte(`{}`), MaxAttempts: 1},
		{Kind: "k", Queue: "media", Args: []byte(`{}`)},
	}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"mail", "media"} {
		jobs, err := store.FetchedJobs(s.st.JobFetch(ctx, &store.JobFetchParams{Queue: q, Limit: 10, Now: now, Lease: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		var reports []*store.Report
		for i, j := range jobs {
			r := &store.Report{ID: j.ID, ClaimToken: j.ClaimToken, Kind: store.ReportCompleted}
			if i == 1 {
				r.Kind, r.Error = store.ReportFailed, &store.AttemptError{Message: "no"}
			}
			reports = append(reports, r)
		}
		if _, err := s.st.JobFinish(ctx, &store.JobFinishParams{Reports: reports, Now: now}); err != nil {
			t.Fatal(err)
		}
	}

	var h jobjson.History
	get := func(path string) {
		t.Helper()
		req := httptest.NewRequest("GET", path, nil)
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d %s", path, rec.Code, rec.Body)
		}
		h = jobjson.History{}
		if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	get("/api/v1/queues/history")
	mail, media := jobjson.Outcomes{Completed: 1, Dead: 1}, jobjson.Outcomes{Completed: 1}
	if h.Step != "1m0s" || h.Until.Sub(h.Since) != time.Hour || len(h.Queues) != 2 || h.Queues[0].Totals != mail ||
		h.Queues[1].Totals != media || h.Totals != (jobjson.Outcomes{Completed: 2, Dead: 1}) ||
		len(h.Points) != 1 || !h.Points[0].At.Equal(now.UTC().Truncate(time.Minute)) {
		t.Errorf("history of the last hour = %+v, want mail %+v and media %+v in the minute of now", h, mail, media)
	}
	get("/api/v1/queues/history?since=7d&queue=media")
	if h.Step != "1h0m0s" || len(h.Queues) != 1 || h.Queues[0].Name != "media" || len(h.Queues[0].Points) != 1 ||
		!h.Queues[0].Points[0].At.Equal(now.UTC().Truncate(time.Hour)) || h.Queues[0].Points[0].Outcomes != media {
		t.Errorf("history of media over 7 days = %+v, want one point in the hour of now", h)
	}
	get("/api/v1/queues/history?since=24h&step=5m")
	if h.Step != "5m0s" || h.Until.Sub(h.Since) != 24*time.Hour {
		t.Errorf("history over 24h per 5m = %+v", h)
	}

	for _, tt := range []struct {
		path, want string
	}{
		{"/api/v1/queues/history?since=-1h", `since must be a positive duration like 1h, 24h or 7d, at most 366d, got "-1h"`},
		{"/api/v1/queues/history?since=24h&step=90s", `step must be a whole number of minutes like 1m, 15m or 1h, got "90s"`},
		{"/api/v1/queues/history?since=30d&step=1m", `step "1m" makes 43200 points over 720h0m0s, more than 10080: take a longer step`},
	} {
		code, out := s.malformedOnPurpose().call(t, "GET", tt.path, "")
		if code != http.StatusBadRequest || !strings.Contains(out["error"].(string), tt.want) {
			t.Errorf("GET %s = %d %v, want 400 saying %q", tt.path, code, out, tt.want)
		}
	}
}
