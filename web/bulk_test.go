package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// Rows selected on the jobs page are retried, cancelled or deleted at
// once; "all" acts on every job the filter matches and no other.
func TestBulkActions(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	var ids []int64
	for range 4 {
		ids = append(ids, s.enqueue(t, "email.send", "mail"))
	}
	other := s.enqueue(t, "email.send", "other")
	_, html := s.get(t, "/jobs?queue=mail")
	mustContain(t, "jobs page", html, `name="id" value="`+fmt.Sprint(ids[0])+`"`, "Retry all", `{&#34;to&#34;:&#34;ada@example.com&#34;}`)
	form := csrf(t, html)
	form.Set("action", "cancel")
	form["id"] = []string{fmt.Sprint(ids[0]), fmt.Sprint(ids[1])}
	// Asked first: nothing changes until confirmed.
	_, html = s.post(t, "/jobs/bulk", form)
	mustContain(t, "cancel two unconfirmed", html, "<h1>Cancel 2 selected jobs?</h1>", fmt.Sprintf("<li>Job %d</li>", ids[1]),
		fmt.Sprintf(`<input type="hidden" name="id" value="%d">`, ids[0]), `<input type="hidden" name="confirmed" value="1">`)
	if row, _ := s.st.JobGet(context.Background(), &store.JobGetParams{ID: ids[0]}); row.State != store.JobStateAvailable {
		t.Errorf("job %d is %s after an unconfirmed cancel", ids[0], row.State)
	}
	form.Set("confirmed", "1")
	_, html = s.post(t, "/jobs/bulk", form)
	mustContain(t, "after cancelling two", html, "2 jobs cancelled")
	for i, id := range ids {
		row, _ := s.st.JobGet(context.Background(), &store.JobGetParams{ID: id})
		if want := i < 2; (row.State == store.JobStateCancelled) != want {
			t.Errorf("job %d is %s after cancelling the first two", id, row.State)
		}
	}
	all := csrf(t, html)
	all.Set("action", "delete")
	all.Set("all", "1")
	all.Set("queue", "mail")
	all.Set("state", "available")
	_, html = s.post(t, "/jobs/bulk", all)
	mustContain(t, "delete all unconfirmed", html, "<h1>Delete all 2 available jobs?</h1>", "<li>Queue: mail</li>", "<li>State: available</li>")
	all.Set("confirmed", "1")
	_, html = s.post(t, "/jobs/bulk", all)
	mustContain(t, "after deleting all available mail jobs", html, "2 jobs deleted")
	for _, id := range append(ids, other) {
		_, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: id})
		if gone := err != nil; gone != (id == ids[2] || id == ids[3]) {
			t.Errorf("job %d: gone %v after deleting the available mail jobs", id, gone)
		}
	}
	for _, c := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"action": {"retry"}}, "No jobs selected"},
		{url.Values{"action": {"purge"}, "id": {"1"}}, "No bulk action"},
		{url.Values{"action": {"retry"}, "all": {"1"}}, "Choose a filter first"},
	} {
		f := url.Values{"csrf": form["csrf"]}
		for k, v := range c.form {
			f[k] = v
		}
		if code, page := s.post(t, "/jobs/bulk", f); code != http.StatusBadRequest || !strings.Contains(page, c.want) {
			t.Errorf("bulk %v: %d, want 400 with %q", c.form, code, c.want)
		}
	}
}

// The live pages update themselves in place (live.js) until a browser
// turns it off, and again when it turns it back on; none reloads itself
// whole.
func TestRefreshToggle(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	_, html := s.get(t, "/")
	mustContain(t, "overview", html, `<body data-refresh="5">`, `<script src="/static/live.js" defer></script>`, "Updates every 5 s")
	if strings.Contains(html, `http-equiv="refresh"`) {
		t.Errorf("the overview reloads itself whole, wiping what the user does")
	}
	_, html = s.get(t, "/refresh?to=off&next=%2Fjobs")
	if strings.Contains(html, `data-refresh=`) || !strings.Contains(html, "Live updates off") {
		t.Errorf("after turning refresh off, the jobs page still refreshes:\n%s", html)
	}
	_, html = s.get(t, "/refresh?to=on&next=%2F")
	mustContain(t, "after turning it on", html, `<body data-refresh="5">`)
	if _, html := s.get(t, fmt.Sprintf("/jobs/%d", s.enqueue(t, "k", "q"))); strings.Contains(html, `data-refresh=`) {
		t.Errorf("a job's page refreshes itself")
	}
}

// The Processes page lists the registry; Quiet and Stop send commands.
func TestProcessesPage(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	_, html := s.get(t, "/processes")
	mustContain(t, "empty registry", html, "No processes registered")
	now := time.Now()
	if _, err := s.st.ProcessBeat(context.Background(), &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "w-1", Host: "box",
		PID: 9, Busy: 2, StartedAt: now, Queues: []store.ProcessQueue{{Queue: "mail", Workers: 4}}}}); err != nil {
		t.Fatal(err)
	}
	_, html = s.get(t, "/processes")
	mustContain(t, "processes page", html, `data-process="w-1"`, "box", `<a href="/queues/mail">mail</a> (4)`, `action="/processes/w-1/quiet"`)
	_, html = s.post(t, "/processes/w-1/quiet", csrf(t, html))
	mustContain(t, "after quiet", html, "Process w-1 asked to quiet", `<span class="badge paused">quiet</span>`)
	if strings.Contains(html, `action="/processes/w-1/quiet"`) {
		t.Errorf("a quiet process still offers Quiet")
	}
	_, html = s.post(t, "/processes/w-1/stop", csrf(t, html))
	mustContain(t, "stop unconfirmed", html, "<h1>Stop process w-1?</h1>")
	if rows, _ := s.c.Processes(context.Background()); len(rows) != 1 || rows[0].Stop {
		t.Errorf("processes after an unconfirmed stop: %+v, want w-1 not asked to stop", rows)
	}
	yes := csrf(t, html)
	yes.Set("confirmed", "1")
	if code, html := s.post(t, "/processes/gone/stop", yes); code != http.StatusNotFound || !strings.Contains(html, "<h1>No process gone</h1>") {
		t.Errorf("stop of an unknown process: %d, want 404", code)
	}
}

// The dashboard offers neither Quiet nor Stop on the row of the client
// serving it, and refuses them: a server stops on SIGTERM.
func TestProcessesPageOwnRow(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	now := time.Now()
	self := s.c.ID()
	for _, id := range []string{self, "w-2"} {
		if _, err := s.st.ProcessBeat(context.Background(), &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: id, StartedAt: now}}); err != nil {
			t.Fatal(err)
		}
	}
	_, html := s.get(t, "/processes")
	mustContain(t, "another process's row", html, `action="/processes/w-2/stop"`)
	mustContain(t, "processes page", html, fmt.Sprintf(`data-process="%s"`, self), "this server")
	if strings.Contains(html, "/processes/"+self+"/") {
		t.Errorf("the serving client's row offers Quiet or Stop:\n%s", html)
	}
	for _, cmd := range []string{"quiet", "stop"} {
		code, body := s.post(t, "/processes/"+self+"/"+cmd, csrf(t, html))
		if code != http.StatusConflict || !strings.Contains(body, "stop it with SIGTERM") {
			t.Errorf("%s of the serving client: %d, want 409 saying to stop the server with SIGTERM", cmd, code)
		}
	}
	rows, err := s.c.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.ID == self && (row.Stop || row.Quiet) {
			t.Errorf("the serving client's row after the refusals: %+v; want no command", row)
		}
	}
}

// The Periodic page joins the store's last slot with what the live
// processes running a schedule report; a schedule no live process runs
// says so.
func TestPeriodicPage(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	if _, err := s.st.PeriodicAdvance(ctx, &store.PeriodicAdvanceParams{Name: "orphan", To: now.Add(-time.Hour), Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.ProcessBeat(ctx, &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "w-1", StartedAt: now,
		Periodic: []store.ProcessSchedule{{Name: "nightly", Spec: "0 3 * * *", Misfire: "catch_up", Next: now.Add(time.Hour),
			MissedAt: now, Missed: 12, Enqueued: 10}}}}); err != nil {
		t.Fatal(err)
	}
	_, html := s.get(t, "/periodic")
	mustContain(t, "periodic page", html, `data-schedule="nightly"`, "0 3 * * *", "catch_up", "12 missed, 10 enqueued", "w-1",
		`data-schedule="orphan"`, "no live process")
}

// A job of a workflow draws the workflow's jobs as a graph, each right of
// the ones it depends on, with an edge from each dependency.
func TestWorkflowGraph(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	wf := sortie.NewWorkflow()
	a := wf.Add(rawArgs{"fetch", `{}`}, nil)
	b := wf.Add(rawArgs{"resize", `{}`}, nil, a)
	c := wf.Add(rawArgs{"thumb", `{}`}, nil, a)
	wf.Add(rawArgs{"publish", `{}`}, nil, b, c)
	res, err := s.c.EnqueueWorkflow(context.Background(), wf)
	if err != nil {
		t.Fatal(err)
	}
	_, html := s.get(t, fmt.Sprintf("/jobs/%d", res[3].ID))
	mustContain(t, "workflow graph", html, fmt.Sprintf("Workflow %d", res[0].ID), `<svg id="workflow" class="graph"`,
		fmt.Sprintf(`<a href="/jobs/%d" data-id="%d" aria-current="page">`, res[3].ID, res[3].ID))
	// Columns by depth: fetch at x=4, resize and thumb at 228, publish at
	// 452; four edges.
	for i, x := range []int{4, 228, 228, 452} {
		mustContain(t, "workflow graph", html, fmt.Sprintf(`<title>Job %d, %s:`, res[i].ID, []string{"fetch", "resize", "thumb", "publish"}[i]))
		if !regexp.MustCompile(fmt.Sprintf(`data-id="%d"[^>]*>[^<]*<title>[^<]*</title>\s*<rect class="node [^"]*" x="%d"`, res[i].ID, x)).MatchString(html) {
			t.Errorf("job %d is not drawn at x=%d", res[i].ID, x)
		}
	}
	if n := strings.Count(html, `<path class="edge`); n != 4 {
		t.Errorf("the graph has %d edges, want 4", n)
	}
}

// The jobs page searches by tag, args and error text, and its "all"
// actions act on what the search matches.
func TestJobsPageSearch(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	ctx := context.Background()
	vip, err := s.c.Enqueue(ctx, rawArgs{"mail", `{"user":{"id":42}}`}, &sortie.EnqueueOpts{Tags: []string{"vip"}})
	if err != nil {
		t.Fatal(err)
	}
	other := s.enqueue(t, "mail", "default")
	_, html := s.get(t, "/jobs?tag=vip")
	mustContain(t, "tag search", html, fmt.Sprintf(`<tr data-id="%d"`, vip.ID), `name="tag" value="vip"`)
	if strings.Contains(html, fmt.Sprintf(`<tr data-id="%d"`, other)) {
		t.Errorf("tag search lists a job without the tag")
	}
	_, html = s.get(t, "/jobs?args=user.id%3D42")
	mustContain(t, "args search", html, fmt.Sprintf(`<tr data-id="%d"`, vip.ID))
	form := csrf(t, html)
	form.Set("action", "cancel")
	form.Set("all", "1")
	form.Set("args", "user.id=42")
	form.Set("confirmed", "1")
	_, html = s.post(t, "/jobs/bulk", form)
	mustContain(t, "cancel all matching the args", html, "1 job cancelled")
	if row, _ := s.st.JobGet(ctx, &store.JobGetParams{ID: other}); row.State != store.JobStateAvailable {
		t.Errorf("a job the search did not match was %s", row.State)
	}
	if code, _ := s.get(t, "/jobs?within=forever"); code != http.StatusBadRequest {
		t.Errorf("within=forever: %d, want 400", code)
	}
}
