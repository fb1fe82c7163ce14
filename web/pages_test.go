package web_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/auth"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/web"
)

// The jobs page has a tab per state with its count, keeping the other
// filters, and the total of the tab shown.
func TestJobsPageTabs(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	dead := s.enqueue(t, "email.send", "mail")
	s.kill(t, "mail", dead, "boom")
	for range 3 {
		s.enqueue(t, "email.send", "mail")
	}
	s.enqueue(t, "report", "reports")
	_, html := s.get(t, "/jobs?queue=mail")
	mustContain(t, "tabs of queue mail", html, `<a class="tab" href="/jobs?queue=mail" aria-current="page">All <span class="n">4</span></a>`,
		`<a class="tab s-dead" href="/jobs?queue=mail&amp;state=dead">Dead <span class="n">1</span></a>`,
		`<a class="tab s-available" href="/jobs?queue=mail&amp;state=available">Available <span class="n">3</span></a>`,
		`4 jobs in queue <a href="/queues/mail">mail</a>`)
	_, html = s.get(t, "/jobs?state=available")
	mustContain(t, "the available tab", html, `<h1>Available jobs</h1>`, "4 jobs", `<a class="tab" href="/jobs">All <span class="n">5</span></a>`)
}

// Scheduled jobs are listed soonest first, whatever their IDs, each with
// a Run now button that makes it available.
func TestScheduledByRunTime(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	ctx := context.Background()
	var ids []int64
	for _, in := range []time.Duration{3 * time.Hour, time.Hour, 2 * time.Hour} {
		res, err := s.c.Enqueue(ctx, rawArgs{"k", `{}`}, &sortie.EnqueueOpts{RunIn: in})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	_, html := s.get(t, "/jobs?state=scheduled")
	order := regexp.MustCompile(`<tr data-id="(\d+)">`).FindAllStringSubmatch(html, -1)
	var got []string
	for _, m := range order {
		got = append(got, m[1])
	}
	if want := []string{fmt.Sprint(ids[1]), fmt.Sprint(ids[2]), fmt.Sprint(ids[0])}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("scheduled jobs listed %v, want soonest first %v", got, want)
	}
	mustContain(t, "scheduled list", html, fmt.Sprintf(`action="/jobs/%d/run"`, ids[0]), `<span class="muted">runs</span> <time`, "Run all now")
	form := csrf(t, html)
	form.Set("back", "/jobs?state=scheduled")
	_, html = s.post(t, fmt.Sprintf("/jobs/%d/run", ids[0]), form)
	mustContain(t, "after run now", html, fmt.Sprintf("Job %d runs now: available.", ids[0]), "<h1>Scheduled jobs</h1>")
	if row, _ := s.c.JobGet(ctx, ids[0]); row.State != sortie.JobStateAvailable {
		t.Errorf("job %d after Run now: %s, want available", ids[0], row.State)
	}
}

// The running page groups the running jobs by the process or remote
// worker that claimed them, with their progress; the processes page lists
// the remote workers beside the registered processes.
func TestRunningAndRemoteWorkers(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	ctx := context.Background()
	now := time.Now()
	if _, err := s.st.ProcessBeat(ctx, &store.ProcessBeatParams{Now: now, Process: store.ProcessRow{ID: "box-1", Host: "box", PID: 7,
		StartedAt: now, Queues: []store.ProcessQueue{{Queue: "mail", Workers: 4}}}}); err != nil {
		t.Fatal(err)
	}
	local, remote := s.enqueue(t, "email.send", "mail"), s.enqueue(t, "webhook.deliver", "hooks")
	claim := func(queue, worker string, progress float64) {
		jobs, err := store.FetchedJobs(s.st.JobFetch(ctx, &store.JobFetchParams{Queue: queue, Limit: 1, Worker: worker, Now: now, Lease: time.Minute}))
		if err != nil || len(jobs) != 1 {
			t.Fatalf("JobFetch(%s) = %v, %v", queue, jobs, err)
		}
		ref := store.LeaseRef{ID: jobs[0].ID, ClaimToken: jobs[0].ClaimToken}
		if _, err := s.st.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: []store.LeaseRef{ref}, Now: now, Lease: time.Minute,
			Progress: map[store.LeaseRef]float64{ref: progress}}); err != nil {
			t.Fatal(err)
		}
	}
	claim("mail", "box-1", 40)
	claim("hooks", "py-worker@ingest", 75)
	_, html := s.get(t, "/busy")
	mustContain(t, "running page", html, "2 jobs running", `<section class="panel worker" data-worker="box-1">`, "1 of 4 workers busy",
		`<section class="panel worker" data-worker="py-worker@ingest">`, `Remote worker <span class="mono">py-worker@ingest</span>`,
		fmt.Sprintf(`<progress max="100" value="40" aria-label="progress of job %d"></progress> 40%%`, local),
		fmt.Sprintf(`<progress max="100" value="75" aria-label="progress of job %d"></progress> 75%%`, remote))
	_, html = s.get(t, "/processes")
	mustContain(t, "processes page", html, `data-process="box-1"`, `<tr data-worker="py-worker@ingest">`, `<a href="/queues/hooks">hooks</a>`)
	if strings.Contains(html, `<tr data-worker="box-1">`) {
		t.Errorf("a registered process is listed as a remote worker")
	}
}

// A queue has a page of its own: counts per state, limits in words, its
// chart, and Pause.
func TestQueuePage(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	ctx := context.Background()
	if _, err := s.c.QueueConfigure(ctx, "mail", sortie.QueueSettings{MaxRunning: 4, RateLimit: 10, RatePeriod: time.Second}); err != nil {
		t.Fatal(err)
	}
	id := s.enqueue(t, "email.send", "mail")
	s.kill(t, "mail", id, "boom")
	code, html := s.get(t, "/queues/mail")
	if code != http.StatusOK {
		t.Fatalf("GET /queues/mail = %d", code)
	}
	mustContain(t, "queue page", html, "<h1>Queue mail</h1>", `<span class="pill">at most 4 running</span>`, `<span class="pill">10 started per second</span>`,
		`<a class="tile s-dead" href="/jobs?queue=mail&amp;state=dead"><span class="n">1</span>`, `<a href="/queues/mail?history=7d">last 7d</a>`,
		`<rect class="dead"`, `<input type="hidden" name="back" value="/queues/mail">`)
	if strings.Contains(html, "max running 4 10 per 1s") {
		t.Errorf("the limits read as one run-on phrase")
	}
	form := csrf(t, html)
	form.Set("back", "/queues/mail")
	_, html = s.post(t, "/queues/mail/pause", form)
	mustContain(t, "after pause", html, "Queue mail paused.", "<h1>Queue mail</h1>")
}

// A session whose token may only read sees no button that would answer
// 403, and its POSTs are refused; an admin's session sees them.
func TestButtonsFollowScope(t *testing.T) {
	t.Parallel()
	s := newSite(t, &web.Options{Keyring: auth.NewKeyring([]auth.Token{
		{Name: "viewer", Secret: "look-only-0123456789", Scopes: []auth.Scope{auth.ScopeRead}},
		{Name: "ops", Secret: "ops-secret-0123456789", Scopes: []auth.Scope{auth.ScopeAdmin}},
	})})
	id := s.enqueue(t, "email.send", "mail")
	s.kill(t, "mail", id, "boom")
	if _, err := s.st.ProcessBeat(context.Background(), &store.ProcessBeatParams{Now: time.Now(), Process: store.ProcessRow{ID: "p-1", StartedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	pages := []string{"/", "/queues/mail", "/jobs?state=dead", fmt.Sprintf("/jobs/%d", id), "/processes"}
	for _, tt := range []struct {
		token   string
		buttons bool
	}{{"look-only-0123456789", false}, {"ops-secret-0123456789", true}} {
		_, html := s.get(t, "/login")
		form := csrf(t, html)
		form.Set("token", tt.token)
		form.Set("next", "/")
		if code, _ := s.post(t, "/login", form); code != http.StatusOK {
			t.Fatalf("sign in with %s: %d", tt.token, code)
		}
		for _, p := range pages {
			_, html := s.get(t, p)
			posts := regexp.MustCompile(`<form [^>]*method="post"`).FindAllString(html, -1)
			n := 0
			for _, f := range posts {
				if !strings.Contains(f, `action="/logout"`) {
					n++
				}
			}
			if (n > 0) != tt.buttons {
				t.Errorf("%s with token %s: %d action forms, want some: %v", p, tt.token, n, tt.buttons)
			}
		}
		if !tt.buttons {
			if code, html := s.post(t, fmt.Sprintf("/jobs/%d/retry", id), form); code != http.StatusForbidden || !strings.Contains(html, "<h1>Not allowed</h1>") {
				t.Errorf("retry by a read-only session: %d, want 403 Not allowed", code)
			}
		}
	}
}

// The sign-in page shows no nav and no Sign out: nothing there works
// before signing in.
func TestLoginPageIsBare(t *testing.T) {
	t.Parallel()
	s := newSite(t, &web.Options{Tokens: []string{"s3cret"}})
	_, html := s.get(t, "/")
	mustContain(t, "sign-in page", html, "<h1>Sign in</h1>")
	for _, not := range []string{`<nav class="sections"`, "Sign out", `class="jump"`} {
		if strings.Contains(html, not) {
			t.Errorf("the sign-in page shows %s", not)
		}
	}
}

// The favicon is an icon, not a 404.
func TestFavicon(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	res, err := s.hc.Get(s.url + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "image/x-icon" || len(b) < 22 || string(b[:4]) != "\x00\x00\x01\x00" ||
		string(b[22:26]) != "\x89PNG" {
		t.Errorf("GET /favicon.ico = %d %s, %d bytes starting %q; want an .ico holding a PNG", res.StatusCode, res.Header.Get("Content-Type"), len(b), b[:min(len(b), 26)])
	}
}

// With the store down, a page says so in plain words and offers to try
// again, not a link back to itself dressed as a way out.
func TestStoreDownPage(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	s.calls.Fail("*", errors.New("dial tcp 10.0.0.5:5432: connection refused"))
	code, html := s.get(t, "/")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("GET / with the store down = %d, want 503", code)
	}
	mustContain(t, "store down", html, "<h1>The store did not answer</h1>", "could not reach the store", "connection refused",
		`<a href="/">Try again</a>`)
	if strings.Contains(html, "Back to the queues") {
		t.Errorf("the 503 page offers a way back to the page that failed")
	}
}

// A full store is said to be full, with what to do, not to be out of
// reach.
func TestStoreFullPage(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	s.calls.Fail("*", store.FullError("the Redis server is at its maxmemory", errors.New("OOM command not allowed")))
	code, html := s.get(t, "/")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("GET / with the store full = %d, want 503", code)
	}
	mustContain(t, "store full", html, "<h1>The store is full</h1>", "delete or prune finished jobs", "maxmemory")
	if strings.Contains(html, "could not reach") {
		t.Errorf("the page of a full store says the store could not be reached")
	}
}

// A store outage fails every page, and a live page asks again every few
// seconds: the dashboard warns of it once a minute, not once a page.
func TestStoreDownWarnedOnce(t *testing.T) {
	t.Parallel()
	var logs testkit.LogBuffer
	s := newSite(t, &web.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s.calls.Fail("*", errors.New("dial tcp 10.0.0.5:5432: connection refused"))
	for range 4 {
		if code, _ := s.get(t, "/"); code != http.StatusServiceUnavailable {
			t.Fatalf("GET / with the store down = %d, want 503", code)
		}
	}
	if n := strings.Count(logs.String(), "dashboard: store call failed"); n != 1 {
		t.Errorf("4 pages with the store down logged %d warnings, want 1:\n%s", n, logs.String())
	}
}

// A job cancelled because its dependency died says so over its error,
// not "Attempt 0".
func TestCancelledDependentsError(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	ctx := context.Background()
	wf := sortie.NewWorkflow()
	first := wf.Add(rawArgs{"download", `{}`}, &sortie.EnqueueOpts{Queue: "imports", MaxAttempts: 1})
	wf.Add(rawArgs{"parse", `{}`}, &sortie.EnqueueOpts{Queue: "imports"}, first)
	res, err := s.c.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	s.kill(t, "imports", res[0].ID, "404")
	_, html := s.get(t, fmt.Sprintf("/jobs/%d", res[1].ID))
	mustContain(t, "cancelled dependent", html, fmt.Sprintf("Cancelled before it ran, when job %d ended", res[0].ID))
	if strings.Contains(html, "Attempt 0") {
		t.Errorf("a cancelled dependent's error is labelled Attempt 0")
	}
}
