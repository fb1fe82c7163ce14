package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

// claim claims job id of queue at now through the store.
func (s *site) claim(t *testing.T, queue string, id int64, now time.Time) *store.JobRow {
	t.Helper()
	rows, err := store.FetchedJobs(s.st.JobFetch(context.Background(), &store.JobFetchParams{Queue: queue, Limit: 10, Now: now, Lease: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("JobFetch(%s) did not claim job %d", queue, id)
	return nil
}

// A job's page shows its steps as a timeline, in the order recorded: a
// step with its result's start, a spawn with links to its children and,
// while the job awaits them, how many are pending; a sleeping job says
// until when. A child's page links its parent.
func TestJobStepsTimeline(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	ctx := context.Background()
	now := time.Now()
	order := s.enqueue(t, "order", "shop")
	a := s.claim(t, "shop", order, now)
	if _, err := s.st.StepRecord(ctx, &store.StepRecordParams{Now: now, Steps: []*store.StepRecord{
		{ID: a.ID, ClaimToken: a.ClaimToken, Name: "charge", Result: []byte(`{"charge_id":"ch_42"}`)}}}); err != nil {
		t.Fatal(err)
	}
	sp, err := s.st.StepSpawn(ctx, &store.StepSpawnParams{ID: a.ID, ClaimToken: a.ClaimToken, Name: "thumbnails", Now: now.Add(time.Second),
		CancelWithParent: true, Jobs: []*store.NewJob{{Kind: "thumb", Queue: "thumbs", Args: []byte(`{}`)}, {Kind: "thumb", Queue: "thumbs", Args: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.st.StepAwait(ctx, &store.StepAwaitParams{ID: a.ID, ClaimToken: a.ClaimToken, Name: "thumbnails", Now: now.Add(time.Second)}); err != nil || !res.Suspended {
		t.Fatalf("StepAwait = %+v, %v", res, err)
	}
	_, html := s.get(t, fmt.Sprintf("/jobs/%d", order))
	mustContain(t, "the awaiting parent's page", html,
		`<ol id="steps" class="timeline">`,
		`<li class="step k-step" data-step="charge">`, `{&#34;charge_id&#34;:&#34;ch_42&#34;}`,
		`<li class="step k-spawn waiting" data-step="thumbnails">`, `<strong>Awaiting</strong> 2 of 2 children`,
		fmt.Sprintf(`<a href="/jobs/%d">%d</a>`, sp.Children[0], sp.Children[0]),
		`<dd id="waits-for">step <span class="mono">thumbnails</span></dd>`)
	if strings.Index(html, `data-step="charge"`) > strings.Index(html, `data-step="thumbnails"`) {
		t.Error("steps are not in the order recorded")
	}
	// Each step shows the time since the one before: the spawn came a
	// second after the charge.
	spawn := html[strings.Index(html, `data-step="thumbnails"`):]
	if spawn = spawn[:strings.Index(spawn, "</li>")]; !strings.Contains(spawn, `<span class="muted">+1s</span>`) {
		t.Errorf("the spawn step does not show +1s since the charge:\n%s", spawn)
	}
	_, html = s.get(t, fmt.Sprintf("/jobs/%d", sp.Children[1]))
	mustContain(t, "a child's page", html, fmt.Sprintf(`job <a href="/jobs/%d">%d</a>, spawn <span class="mono">thumbnails</span>`, order, order))

	nap := s.enqueue(t, "nap", "shop")
	b := s.claim(t, "shop", nap, now)
	if _, err := s.st.StepSleep(ctx, &store.StepSleepParams{ID: b.ID, ClaimToken: b.ClaimToken, Name: "cool-off", Until: now.Add(72 * time.Hour), Now: now}); err != nil {
		t.Fatal(err)
	}
	_, html = s.get(t, fmt.Sprintf("/jobs/%d", nap))
	mustContain(t, "a sleeping job's page", html, `<li class="step k-sleep waiting" data-step="cool-off">`, `<strong>Sleeping</strong> until <time`)

	plain := s.enqueue(t, "plain", "shop")
	if _, html = s.get(t, fmt.Sprintf("/jobs/%d", plain)); strings.Contains(html, `id="steps"`) {
		t.Error("a job without steps shows a steps section")
	}
}
