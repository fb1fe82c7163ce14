package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/auth"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"pretty": func(b []byte) string {
		var buf bytes.Buffer
		if len(b) == 0 {
			return ""
		}
		if json.Indent(&buf, b, "", "  ") != nil {
			return string(b)
		}
		return buf.String()
	},
	"firstLine": func(s string) string {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			return s[:i] + " …"
		}
		return s
	},
	"lastError": func(errs []store.AttemptError) string {
		if len(errs) == 0 {
			return ""
		}
		return errs[len(errs)-1].Message
	},
	"count": func(counts map[string]int64, state store.JobState) int64 { return counts[string(state)] },
	// empty reports whether a queue's counts hold no job.
	"empty": func(counts map[string]int64) bool {
		for _, n := range counts {
			if n != 0 {
				return false
			}
		}
		return true
	},
	"preview": argsPreview,
	"min":     func(a, b int) int { return min(a, b) },
	"list":    func(v ...string) []string { return v },
	"seconds": func(s float64) string {
		if s <= 0 {
			return "–"
		}
		return jobjson.Duration(time.Duration(s * float64(time.Second)))
	},
	"waited": waited,
	"ran":    ran,
	"states": func() []store.JobState { return jobjson.States },
	"finished": func(s store.JobState) bool {
		return s == store.JobStateCompleted || s == store.JobStateCancelled || s == store.JobStateDead
	},
}

// parsePages parses each page with the layout.
func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "jobs", "job", "processes", "periodic", "login", "error", "confirm"} {
		pages[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return pages
}

// render writes page with data, adding what the layout needs.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, page string, data map[string]any) {
	data["CSRF"] = d.formToken(w, r)
	data["Auth"] = d.keys != nil
	if page == "overview" || page == "jobs" || page == "processes" || page == "periodic" {
		data["Live"] = true
		if c, err := r.Cookie(refreshCookie); err != nil || c.Value != "off" {
			data["Refresh"] = int(refreshEvery.Seconds())
		}
		data["Here"] = r.URL.RequestURI()
	}
	data["Path"] = r.URL.Path
	if err := d.c.StoreCorruption(); err != nil {
		data["Corrupt"] = err.Error()
	}
	var buf bytes.Buffer
	if err := d.pages[page].Execute(&buf, data); err != nil {
		d.opts.Logger.Error("dashboard: render", "page", page, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// overview: GET /?history=1h|24h|7d, the queues and the chart of the jobs
// finished over that period.
func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) error {
	p, ok := chartPeriod(r.URL.Query().Get("history"))
	if !ok {
		return httperr.Errorf(http.StatusBadRequest, "%q is not a period of the chart: 1h, 24h or 7d.", r.URL.Query().Get("history"))
	}
	queues, err := jobjson.ListQueues(r.Context(), d.c)
	if err != nil {
		return err
	}
	period := chartPeriods[p].period
	step := jobjson.HistoryStep(period)
	h, err := jobjson.ReadHistory(r.Context(), d.c, "", period, step, time.Now())
	if err != nil {
		return err
	}
	totals := map[string]int64{}
	for _, q := range queues {
		for s, n := range q.Counts {
			totals[s] += n
		}
	}
	d.render(w, r, http.StatusOK, "overview", map[string]any{
		"Title": "Queues", "Queues": queues, "Totals": totals, "Chart": chart(h, p, step),
		"Done": r.URL.Query().Get("done"),
	})
	return nil
}

// jobsPage is the page size of the job list.
const jobsPage = 50

// jobs: GET /jobs?state=&queue=&kind=&after=, a page of jobs.
func (d *Dashboard) jobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if s := strings.TrimSpace(q.Get("id")); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return httperr.Errorf(http.StatusBadRequest, "%q is not a job ID.", s)
		}
		http.Redirect(w, r, fmt.Sprintf("/jobs/%d", id), http.StatusSeeOther)
		return nil
	}
	p, filter, err := searchOf(q)
	if err != nil {
		return err
	}
	p.Limit, p.Desc, p.ScanMax = jobsPage, true, dashboardScanMax
	if s := q.Get("before"); s != "" {
		c, err := strconv.ParseInt(s, 10, 64)
		if err != nil || c < 1 {
			return httperr.Errorf(http.StatusBadRequest, "%q is not a job ID.", s)
		}
		p.Cursor = c
	}
	res, err := d.c.JobSearch(r.Context(), p)
	if err != nil {
		return err
	}
	var next string
	if res.NextCursor != 0 {
		v := url.Values{}
		for k, vs := range filter {
			v[k] = vs
		}
		v.Set("before", strconv.FormatInt(res.NextCursor, 10))
		next = "/jobs?" + v.Encode()
	}
	data := map[string]any{
		"Title": "Jobs", "Jobs": res.Jobs, "Next": next, "First": p.Cursor == 0, "Done": q.Get("done"),
		"Filtered": len(filter) > 0, "Capped": res.Capped, "Scanned": res.Scanned, "Filter": filter,
	}
	for _, k := range searchFields {
		data[fieldKey(k)] = filter.Get(k)
	}
	d.render(w, r, http.StatusOK, "jobs", data)
	return nil
}

// dashboardScanMax caps the jobs a search page looks at, so that a page
// answers in a few tens of milliseconds whatever the store holds; the page
// links further back.
const dashboardScanMax = 2000

// searchFields are the jobs page's filters, as query or form fields.
var searchFields = []string{"queue", "state", "kind", "tag", "unique_key", "error", "args", "within"}

// fieldKey is the template's name of a search field: "unique_key" is
// UniqueKey.
func fieldKey(f string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(f, "_") {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// withins are the choices of the "created within" filter.
var withins = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// searchOf reads the jobs page's filters (query or form values) into a
// search, and returns the filters given, to carry into links and forms.
func searchOf(v url.Values) (*sortie.JobSearch, url.Values, error) {
	filter := url.Values{}
	for _, k := range searchFields {
		if x := strings.TrimSpace(v.Get(k)); x != "" {
			filter.Set(k, x)
		}
	}
	s := &sortie.JobSearch{JobListParams: sortie.JobListParams{Queue: filter.Get("queue"), State: store.JobState(filter.Get("state")),
		Kind: filter.Get("kind")}, Tag: filter.Get("tag"), UniqueKey: filter.Get("unique_key"), ErrorContains: filter.Get("error")}
	if s.State != "" && !jobjson.ValidState(s.State) {
		return nil, nil, httperr.Errorf(http.StatusBadRequest, "%q is not a job state: one of %s.", s.State, jobjson.StateNames())
	}
	if a := filter.Get("args"); a != "" {
		m, err := sortie.ParseArgsMatch(a)
		if err != nil {
			return nil, nil, httperr.Errorf(http.StatusBadRequest, "Args: %v.", err)
		}
		s.Args = []sortie.ArgsMatch{m}
	}
	if w := filter.Get("within"); w != "" {
		d, ok := withins[w]
		if !ok {
			return nil, nil, httperr.Errorf(http.StatusBadRequest, "Created within %q: choose 1h, 24h, 7d or 30d.", w)
		}
		s.CreatedAfter = time.Now().Add(-d)
	}
	return s, filter, nil
}

// job: GET /jobs/{id}, one job whole.
func (d *Dashboard) job(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	row, err := d.c.JobGet(r.Context(), id)
	if err != nil {
		return err
	}
	data := map[string]any{"Title": fmt.Sprintf("Job %d", id), "Job": row, "Done": r.URL.Query().Get("done")}
	if row.WorkflowID != 0 {
		graph, more, err := d.workflow(r.Context(), row.WorkflowID)
		if err != nil {
			return err
		}
		data["Workflow"], data["WorkflowMore"] = graph, more
	}
	d.render(w, r, http.StatusOK, "job", data)
	return nil
}

// workflowMax bounds the jobs of a workflow a job's page shows.
const workflowMax = 200

// workflowNode is one job of a workflow as its graph shows it: indented by
// its depth (the longest chain of dependencies above it).
type workflowNode struct {
	Job   *store.JobRow
	Depth int
}

// workflow returns the jobs of workflow id in dependency order (each after
// the jobs it depends on; by ID among equals), with their depths, and
// whether there were more than workflowMax.
func (d *Dashboard) workflow(ctx context.Context, id int64) ([]workflowNode, bool, error) {
	res, err := d.c.JobList(ctx, &sortie.JobListParams{WorkflowID: id, Limit: workflowMax})
	if err != nil {
		return nil, false, err
	}
	depth := map[int64]int{}
	for _, j := range res.Jobs { // by ID: a job's dependencies come before it
		for _, dep := range j.DependsOn {
			if dd, ok := depth[dep]; ok && dd+1 > depth[j.ID] {
				depth[j.ID] = dd + 1
			}
		}
		if _, ok := depth[j.ID]; !ok {
			depth[j.ID] = 0
		}
	}
	nodes := make([]workflowNode, len(res.Jobs))
	for i, j := range res.Jobs {
		nodes[i] = workflowNode{Job: j, Depth: depth[j.ID]}
	}
	slices.SortStableFunc(nodes, func(a, b workflowNode) int { return a.Depth - b.Depth })
	return nodes, res.NextCursor != 0, nil
}

func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, httperr.Errorf(http.StatusNotFound, "%q is not a job ID.", s)
	}
	return id, nil
}

// argsPreview is the start of a job's args JSON, for a list row.
func argsPreview(b []byte) string {
	const n = 60
	s := string(b)
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// waited is how long a job waited from due to its latest start, or "".
func waited(j *store.JobRow) string {
	if j.AttemptedAt.IsZero() || j.AttemptedAt.Before(j.RunAt) {
		return ""
	}
	return jobjson.Duration(j.AttemptedAt.Sub(j.RunAt))
}

// ran is how long a finished job's last attempt took, or a running one's
// so far, or "".
func ran(j *store.JobRow) string {
	switch {
	case j.AttemptedAt.IsZero():
		return ""
	case j.State == store.JobStateRunning:
		return jobjson.Duration(time.Since(j.AttemptedAt)) + "…"
	case !j.FinalizedAt.IsZero() && !j.FinalizedAt.Before(j.AttemptedAt):
		return jobjson.Duration(j.FinalizedAt.Sub(j.AttemptedAt))
	}
	return ""
}

// bulkActions are the dashboard's actions on many jobs.
var bulkActions = map[string]sortie.BulkAction{"retry": sortie.BulkRetry, "cancel": sortie.BulkCancel, "delete": sortie.BulkDelete}

// dashboardBulkMax bounds one press of an "all matching" button.
const dashboardBulkMax = 10_000

// jobsBulk: POST /jobs/bulk, action and either the IDs of the selected rows
// or all=1 with the list's filter (queue, state, kind): acts on them and
// goes back to the list saying how many changed.
func (d *Dashboard) jobsBulk(w http.ResponseWriter, r *http.Request) error {
	action, ok := bulkActions[r.PostFormValue("action")]
	if !ok {
		return httperr.Errorf(http.StatusBadRequest, "No bulk action %q: retry, cancel or delete.", r.PostFormValue("action"))
	}
	_ = r.ParseForm()
	filter, back, err := searchOf(r.PostForm)
	if err != nil {
		return err
	}
	var msg string
	if r.PostFormValue("all") == "1" {
		if len(back) == 0 {
			return httperr.Errorf(http.StatusBadRequest, "Choose a filter first: every job at once is not offered.")
		}
		res, err := d.c.JobsBulk(r.Context(), action, filter, &sortie.BulkOpts{Max: dashboardBulkMax})
		if err != nil {
			return err
		}
		msg = bulkMessage(action, res.Changed, len(res.Failed))
		if res.Next != 0 {
			msg += fmt.Sprintf(" More match: press again for the next %d.", dashboardBulkMax)
		}
	} else {
		changed, failed, err := d.actOnIDs(r, action)
		if err != nil {
			return err
		}
		msg = bulkMessage(action, changed, failed)
	}
	back.Set("done", msg)
	http.Redirect(w, r, "/jobs?"+back.Encode(), http.StatusSeeOther)
	return nil
}

// actOnIDs applies action to the selected rows (at most a page of them).
func (d *Dashboard) actOnIDs(r *http.Request, action sortie.BulkAction) (changed, failed int, err error) {
	ids := r.PostForm["id"]
	if len(ids) == 0 {
		return 0, 0, httperr.Errorf(http.StatusBadRequest, "No jobs selected: tick the rows first.")
	}
	if len(ids) > jobsPage {
		return 0, 0, httperr.Errorf(http.StatusBadRequest, "At most %d jobs at once.", jobsPage)
	}
	parsed := make([]int64, len(ids))
	for i, s := range ids {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return 0, 0, httperr.Errorf(http.StatusBadRequest, "%q is not a job ID.", s)
		}
		parsed[i] = id
	}
	res, err := d.c.JobsBulkIDs(r.Context(), action, parsed)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range res.Failed {
		if httperr.Status(f.Err) >= 500 {
			return res.Changed, len(res.Failed), f.Err
		}
	}
	return res.Changed, len(res.Failed), nil
}

// bulkMessage says what a bulk action did.
func bulkMessage(action sortie.BulkAction, changed, failed int) string {
	did := map[sortie.BulkAction]string{sortie.BulkRetry: "retried", sortie.BulkCancel: "cancelled (running ones at their next heartbeat)", sortie.BulkDelete: "deleted"}[action]
	msg := fmt.Sprintf("%d %s %s.", changed, plural(changed, "job", "jobs"), did)
	if failed > 0 {
		msg += fmt.Sprintf(" %d could not be (running, or gone meanwhile).", failed)
	}
	return msg
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// jobAction: POST /jobs/{id}/retry|cancel|delete, then back to the job
// (or, once deleted, to the list) saying what was done.
func (d *Dashboard) jobAction(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var act func(*sortie.Client, context.Context, int64) (*store.JobRow, error)
	switch r.PathValue("action") {
	case "retry":
		act = (*sortie.Client).JobRetry
	case "cancel":
		act = (*sortie.Client).JobCancel
	case "delete":
		act = (*sortie.Client).JobDelete
	default:
		return httperr.Errorf(http.StatusNotFound, "No action %q on jobs.", r.PathValue("action"))
	}
	row, err := act(d.c, r.Context(), id)
	if err != nil {
		return err
	}
	to := fmt.Sprintf("/jobs/%d?done=", id)
	switch r.PathValue("action") {
	case "retry":
		to += url.QueryEscape("Retried: now " + string(row.State) + ".")
	case "cancel":
		msg := "Cancelled."
		if row.State == store.JobStateRunning {
			msg = "Cancel requested: its worker stops it at its next heartbeat."
		} else if row.State != store.JobStateCancelled {
			msg = "Not cancelled: it had already finished (" + string(row.State) + ")."
		}
		to += url.QueryEscape(msg)
	case "delete":
		to = "/jobs?done=" + url.QueryEscape(fmt.Sprintf("Job %d deleted.", id))
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

// queueAction: POST /queues/{queue}/pause|resume|delete, then back to the
// queues. A queue nothing uses is refused (a page older than a deletion).
// Delete asks first: without confirm=yes it answers a page that does.
func (d *Dashboard) queueAction(w http.ResponseWriter, r *http.Request) error {
	queue, action := r.PathValue("queue"), r.PathValue("action")
	if action != "pause" && action != "resume" && action != "delete" {
		return httperr.Errorf(http.StatusNotFound, "No action %q on queues.", action)
	}
	if err := d.c.QueueKnown(r.Context(), queue); err != nil {
		if _, ok := errors.AsType[*sortie.UnknownQueueError](err); ok {
			return httperr.Errorf(http.StatusNotFound, "Queue %s is not in use: no job, setting, pause or running process uses it.", queue)
		}
		return err
	}
	var err error
	switch action {
	case "pause":
		_, err = d.c.QueuePause(r.Context(), queue)
	case "resume":
		_, err = d.c.QueueResume(r.Context(), queue)
	case "delete":
		if r.PostFormValue("confirm") != "yes" {
			d.render(w, r, http.StatusOK, "confirm", map[string]any{"Title": "Delete queue " + queue, "Queue": queue})
			return nil
		}
		err = d.c.QueueDelete(r.Context(), queue)
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/?done="+url.QueryEscape(fmt.Sprintf("Queue %s %sd.", queue, action)), http.StatusSeeOther)
	return nil
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) error {
	d.render(w, r, http.StatusOK, "login", map[string]any{"Title": "Sign in", "Next": safeNext(r.URL.Query().Get("next"))})
	return nil
}

// login: POST /login with a token; sets the session cookie.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) error {
	next := safeNext(r.PostFormValue("next"))
	if d.keys == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return nil
	}
	addr := auth.ClientAddr(r)
	if th := d.opts.Throttle; th != nil {
		if wait := th.Wait(addr); wait > 0 {
			return httperr.Errorf(http.StatusTooManyRequests, "Too many tokens that were not accepted came from %s: wait %s and try again.",
				addr, wait.Round(time.Second))
		}
	}
	t, ok := d.keys.Check(r.PostFormValue("token"))
	if !ok || !t.Allows(auth.ScopeRead) {
		if !ok && d.opts.Throttle != nil {
			d.opts.Throttle.Refused(addr)
		}
		d.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Title": "Sign in", "Next": next, "Failed": true,
			"Scope": ok})
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: d.sessionValue(t), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) error {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

// safeNext keeps a post-login redirect on this site.
func safeNext(s string) string {
	if !strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//") || strings.Contains(s, "\\") {
		return "/"
	}
	return s
}

// refreshCookie turns the pages' refresh off ("off") for a browser.
const refreshCookie = "sortie_refresh"

// refreshEvery is how often the queues and jobs pages reload themselves.
const refreshEvery = 5 * time.Second

// refreshToggle: GET /refresh?to=on|off&next=PATH turns the pages' refresh
// on or off for this browser, then goes back.
func (d *Dashboard) refreshToggle(w http.ResponseWriter, r *http.Request) error {
	c := &http.Cookie{Name: refreshCookie, Value: "off", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: 365 * 24 * 3600}
	switch r.URL.Query().Get("to") {
	case "off":
	case "on":
		c.Value, c.MaxAge = "", -1
	default:
		return httperr.Errorf(http.StatusBadRequest, "Refresh goes on or off, not %q.", r.URL.Query().Get("to"))
	}
	http.SetCookie(w, c)
	http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
	return nil
}

// processes: GET /processes, the client processes registered in the store.
func (d *Dashboard) processes(w http.ResponseWriter, r *http.Request) error {
	rows, err := d.c.Processes(r.Context())
	if err != nil {
		return err
	}
	out := make([]jobjson.Process, len(rows))
	for i, row := range rows {
		out[i] = jobjson.FromProcess(row, d.c.ProcessAlive(row))
	}
	d.render(w, r, http.StatusOK, "processes", map[string]any{"Title": "Processes", "Processes": out, "Self": d.c.ID(), "Done": r.URL.Query().Get("done")})
	return nil
}

// processAction: POST /processes/{id}/quiet|stop, then back to the list.
func (d *Dashboard) processAction(w http.ResponseWriter, r *http.Request) error {
	cmd := sortie.ProcessCommand(r.PathValue("action"))
	if cmd != sortie.ProcessQuiet && cmd != sortie.ProcessStop {
		return httperr.Errorf(http.StatusNotFound, "No action %q on processes.", r.PathValue("action"))
	}
	id := r.PathValue("id")
	if id == d.c.ID() {
		return httperr.Errorf(http.StatusConflict, "Process %s is the one serving this dashboard: stop it with SIGTERM (or Ctrl-C), not from here.", id)
	}
	if _, err := d.c.CommandProcess(r.Context(), id, cmd); err != nil {
		if errors.Is(err, sortie.ErrNotFound) {
			return httperr.Errorf(http.StatusNotFound, "Process %s is gone: it stopped, or aged out.", id)
		}
		return err
	}
	msg := fmt.Sprintf("Process %s asked to %s; it acts at its next beat.", id, cmd)
	http.Redirect(w, r, "/processes?done="+url.QueryEscape(msg), http.StatusSeeOther)
	return nil
}

// periodic: GET /periodic, every periodic schedule: the store's last slot
// and what the live processes running it report.
func (d *Dashboard) periodic(w http.ResponseWriter, r *http.Request) error {
	rows, err := d.c.PeriodicStatuses(r.Context())
	if err != nil {
		return err
	}
	d.render(w, r, http.StatusOK, "periodic", map[string]any{"Title": "Periodic", "Schedules": rows})
	return nil
}
