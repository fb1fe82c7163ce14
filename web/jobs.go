package web

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// jobsPage is the page size of the job list.
const jobsPage = 50

// dashboardScanMax caps the jobs a search page looks at, so that a page
// answers in a few tens of milliseconds whatever the store holds; the page
// links further back.
const dashboardScanMax = 2000

// scheduledMax caps the scheduled jobs read to order them by run time.
const scheduledMax = 2000

// stateTab is a tab of the jobs page: a state (or "" for all), its jobs in
// the tab's scope and the link to it.
type stateTab struct {
	State   string
	Count   int64
	Link    string
	Current bool
}

// jobs: GET /jobs?state=&queue=&kind=&...&before=, a page of jobs, newest
// first; scheduled jobs soonest first.
func (d *Dashboard) jobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if s := strings.TrimSpace(q.Get("id")); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return httperr.Errorf(http.StatusBadRequest, "%q is not a job ID: a job ID is a whole number such as 42.", s)
		}
		http.Redirect(w, r, fmt.Sprintf("/jobs/%d", id), http.StatusSeeOther)
		return nil
	}
	p, filter, err := searchOf(q)
	if err != nil {
		return err
	}
	counts, err := d.c.JobCounts(r.Context(), p.Queue)
	if err != nil {
		return err
	}
	tabs, total := stateTabs(counts, filter)
	data := map[string]any{"Title": "Jobs", "Done": q.Get("done"), "Tabs": tabs, "Filter": filter,
		"Filtered": len(filter) > 0, "Narrowed": narrowed(filter), "StateName": filter.Get("state")}
	if p.State == store.JobStateScheduled {
		err = d.scheduledPage(r, p, data)
	} else {
		err = d.searchPage(r, p, filter, data)
	}
	if err != nil {
		return err
	}
	if !narrowed(filter) {
		data["Total"] = total
	}
	for _, k := range searchFields {
		data[fieldKey(k)] = filter.Get(k)
	}
	if filter.Get("state") != "" {
		data["Title"] = title(filter.Get("state")) + " jobs"
	}
	d.render(w, r, http.StatusOK, "jobs", data)
	return nil
}

// searchPage fills data with a page of the jobs p matches, newest first.
func (d *Dashboard) searchPage(r *http.Request, p *sortie.JobSearch, filter url.Values, data map[string]any) error {
	p.Limit, p.Desc, p.ScanMax = jobsPage, true, dashboardScanMax
	if s := r.URL.Query().Get("before"); s != "" {
		c, err := strconv.ParseInt(s, 10, 64)
		if err != nil || c < 1 {
			return httperr.Errorf(http.StatusBadRequest, "%q is not a job ID: a job ID is a whole number such as 42.", s)
		}
		p.Cursor = c
	}
	res, err := d.c.JobSearch(r.Context(), p)
	if err != nil {
		return err
	}
	if res.NextCursor != 0 {
		v := cloneValues(filter)
		v.Set("before", strconv.FormatInt(res.NextCursor, 10))
		data["Next"] = "/jobs?" + v.Encode()
	}
	data["Jobs"], data["First"], data["Capped"], data["Scanned"] = res.Jobs, p.Cursor == 0, res.Capped, res.Scanned
	return nil
}

// scheduledPage fills data with the scheduled jobs p matches, soonest
// first: up to scheduledMax of them are read and ordered by run time, a
// page at a time (?page=N).
func (d *Dashboard) scheduledPage(r *http.Request, p *sortie.JobSearch, data map[string]any) error {
	page := 1
	if s := r.URL.Query().Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return httperr.Errorf(http.StatusBadRequest, "Page %q: pages are numbered from 1.", s)
		}
		page = n
	}
	var all []*store.JobRow
	p.Limit, p.ScanMax = 500, dashboardScanMax
	more := true
	for round := 0; more && len(all) < scheduledMax && round < scheduledMax/500*2; round++ {
		res, err := d.c.JobSearch(r.Context(), p)
		if err != nil {
			return err
		}
		all = append(all, res.Jobs...)
		p.Cursor, more = res.NextCursor, res.NextCursor != 0
	}
	if more {
		data["SortCapped"] = len(all)
	}
	slices.SortStableFunc(all, func(a, b *store.JobRow) int {
		return cmp.Or(a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID))
	})
	from := min((page-1)*jobsPage, len(all))
	to := min(from+jobsPage, len(all))
	data["Jobs"], data["First"], data["BySchedule"] = all[from:to], page == 1, true
	if to < len(all) {
		v := cloneValues(data["Filter"].(url.Values))
		v.Set("page", strconv.Itoa(page+1))
		data["Next"] = "/jobs?" + v.Encode()
	}
	return nil
}

// stateTabs returns the tabs of the jobs page for the counts of its queue
// (or of all queues), each keeping the other filters, and the jobs of the
// current tab.
func stateTabs(counts []store.QueueStateCount, filter url.Values) ([]stateTab, int64) {
	by := map[string]int64{}
	var all int64
	for _, c := range counts {
		by[string(c.State)] += c.Count
		all += c.Count
	}
	link := func(state string) string {
		v := cloneValues(filter)
		v.Del("state")
		if state != "" {
			v.Set("state", state)
		}
		if len(v) == 0 {
			return "/jobs"
		}
		return "/jobs?" + v.Encode()
	}
	cur := filter.Get("state")
	tabs := []stateTab{{State: "", Count: all, Link: link(""), Current: cur == ""}}
	for _, s := range jobjson.States {
		tabs = append(tabs, stateTab{State: string(s), Count: by[string(s)], Link: link(string(s)), Current: cur == string(s)})
	}
	for _, t := range tabs {
		if t.Current {
			return tabs, t.Count
		}
	}
	return tabs, 0
}

// narrowed reports whether filter has more than a queue and a state, so
// the counts per state do not count what the list shows.
func narrowed(filter url.Values) bool {
	for k := range filter {
		if k != "queue" && k != "state" {
			return true
		}
	}
	return false
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

func title(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

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

// argsPreview is the start of a job's args JSON, for a list row.
func argsPreview(b []byte) string {
	const n = 80
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
