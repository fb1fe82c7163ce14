package cli

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// sortie jobs shows a job's durable steps and what a sleeping or awaiting
// job waits for, as text and JSON, and --parent lists its children.
func TestJobsShowSteps(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) adminStore{"sqlite": sqliteAdminStore, "postgres": postgresAdminStore,
		"redis": redisAdminStore} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testJobsShowSteps(t, open(t))
		})
	}
}

func testJobsShowSteps(t *testing.T, a adminStore) {
	ctx := context.Background()
	parent := enqueued(t, a.ok(t, "enqueue", "--kind", "order", "--queue", "orders"))
	p := a.claim(t, "orders", parent)
	now := time.Now()
	if _, err := a.st.StepRecord(ctx, &store.StepRecordParams{Now: now, Steps: []*store.StepRecord{
		{ID: p.ID, ClaimToken: p.ClaimToken, Name: "charge", Result: []byte(`{"charge":"ch_1"}`)}}}); err != nil {
		t.Fatal(err)
	}
	sp, err := a.st.StepSpawn(ctx, &store.StepSpawnParams{ID: p.ID, ClaimToken: p.ClaimToken, Name: "thumbnails", Now: now,
		Jobs: []*store.NewJob{{Kind: "thumb", Queue: "thumbs", Args: []byte(`{}`)}, {Kind: "thumb", Queue: "thumbs", Args: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.st.StepAwait(ctx, &store.StepAwaitParams{ID: p.ID, ClaimToken: p.ClaimToken, Name: "thumbnails", Now: now}); err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(parent, 10)
	shown := a.ok(t, "jobs", id)
	for _, want := range []string{`(?m)^state: +waiting$`, `(?m)^waits for: +the children of "thumbnails": 2 of 2 pending$`,
		`(?m)^step "charge", attempt 1 at [0-9-]+ [0-9:.]+Z: result of 17 bytes$`,
		`(?m)^step "thumbnails", attempt 1 at [0-9-]+ [0-9:.]+Z: spawned 2 jobs, 2 pending$`} {
		if !regexp.MustCompile(want).MatchString(shown) {
			t.Errorf("jobs %s:\n%s\nwant it to match %s", id, shown, want)
		}
	}
	var j jobjson.Job
	decode(t, a.ok(t, "jobs", id, "--json"), &j)
	if j.WaitsFor != "thumbnails" || len(j.Steps) != 2 || j.Steps[0].Size != 17 || j.Steps[1].Children != 2 ||
		j.Steps[1].Pending == nil || *j.Steps[1].Pending != 2 {
		t.Errorf("jobs %s --json = %+v, want its two steps and what it waits for", id, j)
	}
	var kids jobjson.Page
	decode(t, a.ok(t, "jobs", "--parent", id, "--json", "--desc=false"), &kids)
	if len(kids.Jobs) != 2 || kids.Jobs[0].ID != sp.Children[0] || kids.Jobs[0].ParentID != parent || kids.Jobs[0].SpawnStep != "thumbnails" {
		t.Errorf("jobs --parent %s = %+v, want the two children", id, kids)
	}
	child := a.ok(t, "jobs", strconv.FormatInt(sp.Children[0], 10))
	if want := `(?m)^parent: +` + id + ` \(spawn step "thumbnails"\)$`; !regexp.MustCompile(want).MatchString(child) {
		t.Errorf("jobs %d:\n%s\nwant it to match %s", sp.Children[0], child, want)
	}
}
