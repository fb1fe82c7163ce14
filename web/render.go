package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sortiehq/sortie/auth"
	"github.com/sortiehq/sortie/internal/buildinfo"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// pageNames are the pages, each a template of its own with the layout.
var pageNames = []string{"overview", "queue", "jobs", "job", "busy", "processes", "periodic", "confirm", "login", "error"}

// parsePages parses each page with the layout and the shared parts.
func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		pages[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/parts.html", "templates/"+name+".html"))
	}
	return pages
}

// livePages refresh themselves in place while a browser has JavaScript
// and has not turned refreshing off.
var livePages = map[string]bool{"overview": true, "queue": true, "jobs": true, "busy": true, "processes": true, "periodic": true}

// render writes page with data, adding what the layout needs: the form
// token, whether the session may act (Admin), the nav's section, the
// refresh setting, the banners and the version.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, page string, data map[string]any) {
	data["CSRF"] = d.formToken(w, r)
	data["Auth"] = d.keys != nil
	data["Admin"] = d.mayAct(r)
	data["Section"] = section(r)
	data["Path"] = r.URL.Path
	data["Here"] = r.URL.RequestURI()
	data["Version"] = buildinfo.Version()
	if page == "login" {
		data["Bare"] = true
	}
	if _, ok := data["Banners"]; !ok && page != "login" {
		data["Banners"] = d.banners(r)
	}
	if livePages[page] && d.opts.Refresh > 0 {
		data["Live"] = true
		if c, err := r.Cookie(refreshCookie); err != nil || c.Value != "off" {
			data["Refresh"] = d.opts.Refresh.Seconds()
		}
	}
	var buf bytes.Buffer
	if err := d.pages[page].Execute(&buf, data); err != nil {
		d.opts.Logger.Error("dashboard: render", "page", page, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// banner is a notice shown above every page (a store that may lose jobs,
// a queue everything waits on): Level is "warn" or "info".
type banner struct {
	Level, Text string
	// Link and LinkText, when set, lead to where it can be acted on.
	Link, LinkText string
}

// banners returns the notices to show above the page: the damage the
// client's work found in the store's data, then each problem the client's
// last check found with the store's server (an eviction policy, no
// persistence), which puts jobs at risk.
func (d *Dashboard) banners(*http.Request) []banner {
	var bs []banner
	if err := d.c.StoreCorruption(); err != nil {
		bs = append(bs, banner{Level: "error", Text: "The store is corrupt: " + err.Error()})
	}
	for _, p := range d.c.ServerProblems() {
		bs = append(bs, banner{Level: "warn", Text: "The store's server puts jobs at risk: " + p.Message + "."})
	}
	return bs
}

// mayAct reports whether r's session may retry, cancel, delete, pause and
// command processes: always without tokens, else with an admin token.
func (d *Dashboard) mayAct(r *http.Request) bool {
	if d.keys == nil {
		return true
	}
	t, ok := d.session(r)
	return ok && t.Allows(auth.ScopeAdmin)
}

// section is the nav's entry for r: the jobs page's dead and scheduled
// lists have entries of their own.
func section(r *http.Request) string {
	p := r.URL.Path
	switch {
	case p == "/" || strings.HasPrefix(p, "/queues/"):
		return "queues"
	case p == "/jobs":
		switch s := r.URL.Query().Get("state"); s {
		case "dead", "scheduled", "running":
			return s
		}
		return "jobs"
	case strings.HasPrefix(p, "/jobs/"):
		return "jobs"
	case p == "/busy":
		return "running"
	}
	return strings.TrimPrefix(p, "/")
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"when":   when,
	"ago":    func(t time.Time) string { return relative(t, time.Now()) },
	"exact":  exact,
	"pretty": pretty,
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
	"count":   func(counts map[string]int64, state store.JobState) int64 { return counts[string(state)] },
	"empty":   emptyQueue,
	"num":     num,
	"preview": argsPreview,
	"list":    func(v ...string) []string { return v },
	"seconds": func(s float64) string {
		if s <= 0 {
			return "–"
		}
		return jobjson.Duration(time.Duration(s * float64(time.Second)))
	},
	"waited":       waited,
	"ran":          ran,
	"states":       func() []store.JobState { return jobjson.States },
	"finished":     finished,
	"limits":       limits,
	"title":        func(s any) string { v := fmt.Sprint(s); return strings.ToUpper(v[:1]) + v[1:] },
	"percent":      func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
	"attemptLabel": attemptLabel,
	"moment":       moment,
	"navItem": func(data map[string]any, section, href, text string) navLink {
		return navLink{Href: href, Text: text, Current: data["Section"] == section}
	},
}

// navLink is an entry of the nav.
type navLink struct {
	Href, Text string
	Current    bool
}

// momentOf is the time a list shows for a job, and what it is.
type momentOf struct {
	Label string
	At    time.Time
}

// moment is the time that matters in j's state: when it runs (scheduled,
// retrying), became due (available), started (running), finished, or was
// created (waiting).
func moment(j *store.JobRow) momentOf {
	switch {
	case j.State == store.JobStateScheduled:
		return momentOf{"runs", j.RunAt}
	case j.State == store.JobStateRetrying:
		return momentOf{"retries", j.RunAt}
	case j.State == store.JobStateAvailable:
		return momentOf{"due", j.RunAt}
	case j.State == store.JobStateRunning:
		return momentOf{"started", j.AttemptedAt}
	case finished(j.State) && !j.FinalizedAt.IsZero():
		return momentOf{"ended", j.FinalizedAt}
	}
	return momentOf{"created", j.CreatedAt}
}

func finished(s store.JobState) bool {
	return s == store.JobStateCompleted || s == store.JobStateCancelled || s == store.JobStateDead
}

// exact is t as the dashboard writes a time in full, in UTC.
func exact(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// when is t as a <time> element: relative ("3 min ago", "in 2 h"), with
// the exact time on hover and in its datetime for scripts.
func when(t time.Time) template.HTML {
	if t.IsZero() {
		return "–"
	}
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
		t.UTC().Format(time.RFC3339), exact(t), template.HTMLEscapeString(relative(t, time.Now()))))
}

// relative says how far t is from now in words: "just now", "45 s ago",
// "3 min ago", "in 2 h 5 min", "4 days ago".
func relative(t, now time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 2*time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 24*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		s = fmt.Sprintf("%d h", h)
		if h < 10 && m > 0 {
			s += fmt.Sprintf(" %d min", m)
		}
	default:
		days := int(d / (24 * time.Hour))
		s = fmt.Sprintf("%d %s", days, plural(days, "day", "days"))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// num writes n, an int or int64, with thousands separators: 12,345.
func num(n any) string {
	var s string
	switch v := n.(type) {
	case int:
		s = strconv.Itoa(v)
	case int64:
		s = strconv.FormatInt(v, 10)
	default:
		s = fmt.Sprint(v)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// pretty indents JSON, or returns it as it is when it is not JSON.
func pretty(b []byte) string {
	var buf bytes.Buffer
	if len(b) == 0 {
		return ""
	}
	if json.Indent(&buf, b, "", "  ") != nil {
		return string(b)
	}
	return buf.String()
}

// limits says a queue's limits in words, each a phrase of its own:
// "at most 4 running", "10 per 1s", "2 running per partition",
// "at most 1,000 waiting, then refuse".
func limits(s *jobjson.Settings) []string {
	if s == nil {
		return nil
	}
	var out []string
	if s.MaxRunning > 0 {
		out = append(out, fmt.Sprintf("at most %s running", num(int64(s.MaxRunning))))
	}
	if s.RateLimit > 0 {
		out = append(out, fmt.Sprintf("%s started per %s", num(int64(s.RateLimit)), per(s.RatePeriod)))
	}
	if s.PartitionMaxRunning > 0 {
		out = append(out, fmt.Sprintf("%s running per partition", num(int64(s.PartitionMaxRunning))))
	}
	if s.PartitionRateLimit > 0 {
		out = append(out, fmt.Sprintf("%s started per %s per partition", num(int64(s.PartitionRateLimit)), per(s.PartitionRatePeriod)))
	}
	if s.MaxDepth > 0 {
		then := "then refuse new jobs"
		if s.Overflow == "drop-oldest" {
			then = "then drop the oldest"
		}
		out = append(out, fmt.Sprintf("at most %s queued, %s", num(int64(s.MaxDepth)), then))
	}
	return out
}

// per names a rate's period: "second", "minute", "hour" or the
// duration ("30s").
func per(period string) string {
	d, err := time.ParseDuration(period)
	if err != nil {
		return period
	}
	switch d {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	return period
}

// attemptLabel heads an error of a job's history: the attempt it ended,
// or, for an error recorded before any attempt (a dependency that failed
// cancelled the job), what happened instead.
func attemptLabel(e store.AttemptError, j *store.JobRow) string {
	if e.Attempt > 0 {
		return fmt.Sprintf("Attempt %d", e.Attempt)
	}
	if j.CancelledBy != 0 {
		return fmt.Sprintf("Cancelled before it ran, when job %d ended", j.CancelledBy)
	}
	return "Before it ran"
}

// emptyQueue reports whether a queue's counts per state hold no job, so
// that it can be deleted.
func emptyQueue(counts map[string]int64) bool {
	for _, n := range counts {
		if n != 0 {
			return false
		}
	}
	return true
}
