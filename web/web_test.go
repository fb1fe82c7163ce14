package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/web"
)

// site is the dashboard on a store (a memstore unless a test chooses), over
// real HTTP, with a browser-like client (cookies, no redirects followed
// unless asked).
type site struct {
	url string
	st  store.Store
	// calls counts the dashboard's store calls.
	calls *storefault.Store
	c     *sortie.Client
	hc    *http.Client
}

func newSite(t *testing.T, opts *web.Options) *site {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	return newSiteOn(t, st, opts)
}

// newSiteOn is newSite on st, which the caller closes.
func newSiteOn(t *testing.T, st store.Store, opts *web.Options) *site {
	t.Helper()
	calls := storefault.New(st)
	c, err := sortie.NewClient(calls, &sortie.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if opts == nil {
		opts = &web.Options{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := web.New(c, opts)
	t.Cleanup(d.Close)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &site{url: srv.URL, st: st, calls: calls, c: c, hc: &http.Client{Jar: jar}}
}

// get fetches a page, following redirects, and returns status and HTML.
func (s *site) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := s.hc.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// post submits a form the way a browser does (same origin), following the
// redirect.
func (s *site) post(t *testing.T, path string, form url.Values, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", s.url)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf reads the form token off a page.
func csrf(t *testing.T, html string) url.Values {
	t.Helper()
	m := csrfRe.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no form token in the page:\n%s", html)
	}
	return url.Values{"csrf": {m[1]}}
}

func (s *site) enqueue(t *testing.T, kind, queue string) int64 {
	t.Helper()
	res, err := s.c.Enqueue(context.Background(), rawArgs{kind, `{"to":"ada@example.com"}`}, &sortie.EnqueueOpts{Queue: queue, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

type rawArgs struct{ kind, json string }

func (a rawArgs) Kind() string                 { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error) { return []byte(a.json), nil }

// kill claims id and fails it on its one attempt, with a stack.
func (s *site) kill(t *testing.T, queue string, id int64, msg string) {
	t.Helper()
	ctx := context.Background()
	jobs, err := store.FetchedJobs(s.st.JobFetch(ctx, &store.JobFetchParams{Queue: queue, Limit: 1, Worker: "w", Now: time.Now(), Lease: time.Minute}))
	if err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("JobFetch = %v, %v; want job %d", jobs, err, id)
	}
	_, err = s.st.JobFinish(ctx, &store.JobFinishParams{Now: time.Now(), Reports: []*store.Report{{ID: id, ClaimToken: jobs[0].ClaimToken,
		Kind: store.ReportFailed, Error: &store.AttemptError{Message: msg, Stack: "goroutine 1 [running]:\nmain.send()"}}}})
	if err != nil {
		t.Fatal(err)
	}
}

func mustContain(t *testing.T, what, html string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(html, w) {
			t.Errorf("%s: want %q in\n%s", what, w, html)
		}
	}
}

func TestPages(t *testing.T) {
	t.Parallel()
	testPages(t, newSite(t, nil))
}

// testPages checks the overview, a listing, a job's page, the chart and
// the error pages of s.
func testPages(t *testing.T, s *site) {
	dead := s.enqueue(t, "email.send", "mail")
	s.enqueue(t, "email.send", "mail") // stays available
	s.kill(t, "mail", dead, "first")   // the claim takes the oldest
	other := s.enqueue(t, "report", "reports")

	code, html := s.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d", code)
	}
	mustContain(t, "overview", html, `data-queue="mail"`, `data-queue="reports"`, `<a href="/jobs?queue=mail&amp;state=dead">1</a>`,
		`action="/queues/mail/pause"`, `<a class="tile s-dead" href="/jobs?state=dead"><span class="n">1</span>`)

	code, html = s.get(t, "/jobs?state=dead")
	if code != http.StatusOK {
		t.Fatalf("GET /jobs?state=dead = %d", code)
	}
	mustContain(t, "dead jobs", html, fmt.Sprintf(`data-id="%d"`, dead), `<td class="error" data-label="Last error"><span title="first">first</span></td>`,
		`<a class="tab s-dead" href="/jobs?state=dead" aria-current="page">Dead <span class="n">1</span></a>`, `<nav class="sections" aria-label="Sections">`)
	if !strings.Contains(html, `<a href="/jobs?state=dead" aria-current="page">Dead</a>`) || strings.Contains(html, `<a href="/jobs" aria-current="page">Jobs</a>`) {
		t.Errorf("the nav of the dead list does not mark Dead alone")
	}
	if strings.Contains(html, fmt.Sprintf(`data-id="%d"`, other)) {
		t.Errorf("dead jobs list shows the available job %d", other)
	}

	code, html = s.get(t, fmt.Sprintf("/jobs/%d", dead))
	if code != http.StatusOK {
		t.Fatalf("GET job = %d", code)
	}
	mustContain(t, "job page", html, `<pre id="args">{
  &#34;to&#34;: &#34;ada@example.com&#34;
}</pre>`, "<pre>first</pre>", "<summary>Stack</summary><pre>goroutine 1 [running]:\nmain.send()</pre>", `id="retry"`, `id="delete"`)

	// The chart reads the history the store keeps: the dead job is in the
	// last hour at once, per minute; the other periods are a link away.
	_, html = s.get(t, "/")
	mustContain(t, "chart", html, `<svg class="plot"`, `aria-label="Jobs finished per minute over the last 1h: 0 completed, 0 cancelled, 1 dead"`,
		`<rect class="dead"`, "0 completed, 0 cancelled, 1 dead", "times in UTC", `<a href="/?history=7d">last 7d</a>`,
		`<td class="num latency"`)
	_, html = s.get(t, "/?history=7d")
	mustContain(t, "chart of a week", html, `aria-label="Jobs finished per hour over the last 7d`, `<rect class="dead"`)
	if code, html := s.get(t, "/?history=2h"); code != http.StatusBadRequest || !strings.Contains(html, "1h, 24h or 7d") {
		t.Errorf("GET /?history=2h = %d, want 400 naming the periods", code)
	}

	// Errors are pages with their status, a title in the user's words and
	// links to other pages.
	for _, tt := range []struct {
		path, title string
		code        int
	}{
		{"/jobs/999999", "<h1>No job 999999</h1>", 404},
		{"/jobs/abc", "<h1>No such job</h1>", 404},
		{"/jobs?state=done", "<h1>That did not work</h1>", 400},
		{"/nowhere", "<h1>No such page</h1>", 404},
		{"/jobs?id=x", "<h1>That did not work</h1>", 400},
		{"/queues/nope", "<h1>No queue nope</h1>", 404},
	} {
		code, html := s.get(t, tt.path)
		if code != tt.code || !strings.Contains(html, `role="alert"`) || !strings.Contains(html, tt.title) ||
			!strings.Contains(html, `<p class="links"><a href="/">Overview</a>`) {
			t.Errorf("GET %s = %d, want %d with %s and links", tt.path, code, tt.code, tt.title)
		}
	}
	if code, _ := s.get(t, "/jobs?id="+fmt.Sprint(other)); code != http.StatusOK {
		t.Errorf("jump to job %d = %d", other, code)
	}
}

func TestActions(t *testing.T) {
	t.Parallel()
	testActions(t, newSite(t, nil))
}

// testActions retries, cancels and deletes jobs and pauses a queue through
// the dashboard of s, and checks that forged forms change nothing.
func testActions(t *testing.T, s *site) {
	id := s.enqueue(t, "email.send", "mail")
	s.kill(t, "mail", id, "boom")
	_, html := s.get(t, fmt.Sprintf("/jobs/%d", id))
	form := csrf(t, html)

	code, html := s.post(t, fmt.Sprintf("/jobs/%d/retry", id), form)
	if code != http.StatusOK {
		t.Fatalf("retry = %d", code)
	}
	mustContain(t, "after retry", html, "Retried: now available.", `<dd id="attempt">1 of 2</dd>`)

	// Cancel and delete ask first, on a page of their own, and change
	// nothing until confirmed.
	for _, action := range []string{"cancel", "delete"} {
		code, html = s.post(t, fmt.Sprintf("/jobs/%d/%s", id, action), form)
		mustContain(t, action+" unconfirmed", html, fmt.Sprintf("<h1>%s job %d?</h1>", strings.ToUpper(action[:1])+action[1:], id),
			`<input type="hidden" name="confirmed" value="1">`, fmt.Sprintf(`<a class="button" href="/jobs/%d">No, go back</a>`, id))
		if row, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: id}); code != http.StatusOK || err != nil || row.State != store.JobStateAvailable {
			t.Errorf("after an unconfirmed %s: %d, job %+v, %v; want it untouched", action, code, row, err)
		}
	}
	yes := url.Values{"csrf": form["csrf"], "confirmed": {"1"}}
	_, html = s.post(t, fmt.Sprintf("/jobs/%d/cancel", id), yes)
	mustContain(t, "after cancel", html, "Cancelled.")
	code, html = s.post(t, fmt.Sprintf("/jobs/%d/delete", id), yes)
	if code != http.StatusOK {
		t.Fatalf("delete = %d", code)
	}
	mustContain(t, "after delete", html, fmt.Sprintf("Job %d deleted.", id))
	if _, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: id}); err == nil {
		t.Error("the job is still there after delete")
	}

	s.enqueue(t, "email.send", "mail") // a queue with no job left is not in use: pausing it is refused
	_, html = s.post(t, "/queues/mail/pause", form)
	mustContain(t, "after pause", html, "Queue mail paused.", `action="/queues/mail/resume"`, `<span class="badge paused">paused</span>`)
	if q, err := s.c.QueueGet(context.Background(), "mail"); err != nil || !q.Paused {
		t.Errorf("queue after pause = %+v, %v", q, err)
	}

	// A running job: no delete button; cancel asks it to stop.
	run := s.enqueue(t, "email.send", "live")
	if _, err := store.FetchedJobs(s.st.JobFetch(context.Background(), &store.JobFetchParams{Queue: "live", Limit: 1, Worker: "w", Now: time.Now(), Lease: time.Minute})); err != nil {
		t.Fatal(err)
	}
	_, html = s.get(t, fmt.Sprintf("/jobs/%d", run))
	if strings.Contains(html, `id="delete"`) || strings.Contains(html, `id="retry"`) {
		t.Errorf("running job's page offers delete or retry:\n%s", html)
	}
	// A job waiting for it: retrying would change nothing, so no button.
	res, err := s.c.Enqueue(context.Background(), rawArgs{"email.send", `{}`}, &sortie.EnqueueOpts{Queue: "later", DependsOn: []int64{run}})
	if err != nil || res.State != sortie.JobStateWaiting {
		t.Fatalf("Enqueue(depending on running job %d) = %+v, %v; want a waiting job", run, res, err)
	}
	_, html = s.get(t, fmt.Sprintf("/jobs/%d", res.ID))
	if strings.Contains(html, `id="retry"`) {
		t.Errorf("waiting job's page offers retry:\n%s", html)
	}
	_, html = s.post(t, fmt.Sprintf("/jobs/%d/cancel", run), yes)
	mustContain(t, "cancel running", html, "Cancel requested: its worker stops it at its next heartbeat.")

	// Forged forms change nothing.
	other := s.enqueue(t, "email.send", "mail")
	for _, tt := range []struct {
		form   url.Values
		header []string
		want   string
	}{
		{url.Values{}, nil, "This form is out of date"},
		{url.Values{"csrf": {"00"}}, nil, "This form is out of date"},
		{form, []string{"Origin", "https://evil.example"}, "A page of another site asked for this change"},
		{form, []string{"Sec-Fetch-Site", "cross-site"}, `A page of another site asked for this change; it was refused (its Sec-Fetch-Site header is &#34;cross-site&#34;`},
		{form, []string{"Sec-Fetch-Site", "same-site"}, `A page of another site asked for this change; it was refused (its Sec-Fetch-Site header is &#34;same-site&#34;`},
		{form, []string{"Origin", "null"}, `it was refused (its Origin header is &#34;null&#34;, not this server`},
		{form, []string{"Origin", "https://evil.example"}, `(its Origin header is &#34;https://evil.example&#34;, not this server`},
	} {
		f := url.Values{"confirmed": {"1"}}
		maps.Copy(f, tt.form)
		code, html := s.post(t, fmt.Sprintf("/jobs/%d/delete", other), f, tt.header...)
		if code != http.StatusForbidden || !strings.Contains(html, tt.want) {
			t.Errorf("forged delete (%v %v) = %d, want 403 and %q", tt.form, tt.header, code, tt.want)
		}
	}
	if _, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: other}); err != nil {
		t.Errorf("job %d after forged deletes: %v, want it still there", other, err)
	}
}

// Each browser session has its own form token: one seen in another
// session (a shared screen, a log, another user of the same dashboard)
// is refused.
func TestFormTokenPerSession(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	id := s.enqueue(t, "email.send", "mail")
	_, html := s.get(t, "/")
	mine := csrf(t, html)
	jar, _ := cookiejar.New(nil)
	other := &site{url: s.url, st: s.st, c: s.c, hc: &http.Client{Jar: jar}}
	_, html = other.get(t, "/")
	theirs := csrf(t, html)
	if mine.Get("csrf") == theirs.Get("csrf") {
		t.Fatalf("two sessions got the same form token %s", mine.Get("csrf"))
	}
	mine.Set("confirmed", "1")
	theirs.Set("confirmed", "1")
	if code, html := other.post(t, fmt.Sprintf("/jobs/%d/delete", id), mine); code != http.StatusForbidden || !strings.Contains(html, "This form is out of date") {
		t.Errorf("delete with another session's token = %d, want 403 and the form refused", code)
	}
	if _, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: id}); err != nil {
		t.Fatalf("job %d after a delete with another session's token: %v, want it still there", id, err)
	}
	if code, html := other.post(t, fmt.Sprintf("/jobs/%d/delete", id), theirs); code != http.StatusOK || !strings.Contains(html, "deleted") {
		t.Errorf("delete with the session's own token = %d, want it done", code)
	}
}

func TestLogin(t *testing.T) {
	t.Parallel()
	s := newSite(t, &web.Options{Tokens: []string{"s3cret"}})
	s.enqueue(t, "k", "q")
	code, html := s.get(t, "/jobs?state=available")
	if code != http.StatusOK || !strings.Contains(html, `<h1>Sign in</h1>`) || !strings.Contains(html, `name="next" value="/jobs?state=available"`) {
		t.Fatalf("GET /jobs without a session = %d, want the sign-in page remembering the way back:\n%s", code, html)
	}
	form := csrf(t, html)
	form.Set("next", "/jobs?state=available")
	form.Set("token", "wrong")
	if code, html := s.post(t, "/login", form); code != http.StatusUnauthorized || !strings.Contains(html, "That token is not accepted.") {
		t.Errorf("wrong token = %d", code)
	}
	form.Set("token", "s3cret")
	code, html = s.post(t, "/login", form)
	if code != http.StatusOK || !strings.Contains(html, `<h1>Available jobs</h1>`) || strings.Contains(html, "s3cret") {
		t.Fatalf("sign in = %d, want the jobs page, without the token in it:\n%s", code, html)
	}
	u, _ := url.Parse(s.url)
	for _, c := range s.hc.Jar.Cookies(u) {
		if strings.Contains(c.Value, "s3cret") {
			t.Errorf("session cookie %q carries the token", c.Value)
		}
	}
	form.Set("next", "//evil.example/")
	form.Set("token", "s3cret")
	req, _ := http.NewRequest("POST", s.url+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range s.hc.Jar.Cookies(u) {
		req.AddCookie(c)
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if loc := res.Header.Get("Location"); loc != "/" {
		t.Errorf("sign in with next=//evil.example/ redirects to %q, want /", loc)
	}
	_, html = s.get(t, "/")
	if code, html := s.post(t, "/logout", csrf(t, html)); code != http.StatusOK || !strings.Contains(html, "<h1>Sign in</h1>") {
		t.Errorf("sign out = %d", code)
	}
	if _, html := s.get(t, "/"); !strings.Contains(html, "<h1>Sign in</h1>") {
		t.Error("after sign out the queues page is still shown")
	}
}

// Once the client's own work found the store corrupt, every page says so.
func TestCorruptStoreBanner(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	t.Cleanup(st.Heal)
	c, err := sortie.NewClient(st, &sortie.Config{RescueInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	d := web.New(c, &web.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(d.Close)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	s := &site{url: srv.URL, st: inner, calls: st, c: c, hc: &http.Client{}}
	if _, html := s.get(t, "/"); strings.Contains(html, "is corrupt") {
		t.Fatalf("the overview says the store is corrupt before it is")
	}
	st.Fail("JobRescue", fmt.Errorf("/data/sortie.db is corrupt: database disk image is malformed; restore it from a backup: %w", store.ErrCorrupt))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := st.WaitCalls(ctx, "JobRescue", st.Calls("JobRescue")+2); err != nil { // one failed and was recorded
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/processes"} {
		_, html := s.get(t, path)
		mustContain(t, path+" with a corrupt store", html, `<p class="banner error" role="alert">The store is corrupt: /data/sortie.db is corrupt: database disk image is malformed; restore it from a backup`)
	}
}

// An empty queue's row offers Delete, which asks first on a page of its
// own (it works without a script); a queue with jobs has no Delete, and
// an action on a queue nothing uses is refused.
func TestDeleteQueue(t *testing.T) {
	t.Parallel()
	s := newSite(t, nil)
	ctx := context.Background()
	s.enqueue(t, "k", "mail")
	if _, err := s.c.QueuePause(ctx, "mial"); err != nil {
		t.Fatal(err)
	}
	_, html := s.get(t, "/")
	mustContain(t, "overview", html, `action="/queues/mial/delete"`)
	if strings.Contains(html, `action="/queues/mail/delete"`) {
		t.Errorf("a queue with a job offers Delete")
	}
	form := csrf(t, html)
	code, html := s.post(t, "/queues/mial/delete", form)
	mustContain(t, "the confirmation", html, "Delete queue mial?", `name="confirmed" value="1"`)
	if q, err := s.c.QueueList(ctx); code != http.StatusOK || err != nil || len(q) != 2 {
		t.Fatalf("after Delete without confirming: %d, queues %v, %v; want the page and both queues", code, q, err)
	}
	form.Set("confirmed", "1")
	_, html = s.post(t, "/queues/mial/delete", form)
	mustContain(t, "after delete", html, "Queue mial deleted.")
	if q, err := s.c.QueueList(ctx); err != nil || len(q) != 1 || q[0].Name != "mail" {
		t.Errorf("queues after the confirmed delete: %v, %v; want mail only", q, err)
	}
	if code, html := s.post(t, "/queues/mial/pause", form); code != http.StatusNotFound || !strings.Contains(html, "Queue mial is not in use") {
		t.Errorf("pause of a deleted queue: %d, want 404 saying it is not in use", code)
	}
	if code, html := s.post(t, "/queues/mail/delete", form); code != http.StatusConflict || !strings.Contains(html, `queue &#34;mail&#34; holds 1 job`) {
		t.Errorf("delete of a queue with a job: %d, want 409 saying it holds a job:\n%s", code, html)
	}
}
