package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/store"
)

// Actions that lose something (delete, cancel, stop) or touch many jobs
// at once are asked twice: their first POST answers with a page saying
// what will happen, whose button posts the same form again with
// confirmed=1. It works without JavaScript, and a forged first POST does
// nothing.

// confirmation is what the confirm page shows.
type confirmation struct {
	Title, Message string
	// Items lists what is acted on, when it is a short list.
	Items []string
	// Action is where the form posts; Fields are its values, as posted.
	Action string
	Fields []field
	Button string
	Danger bool
	Back   string
}

type field struct{ Name, Value string }

// confirmed reports whether r's form says yes; when it does not, it
// renders the confirm page c, with r's form as its fields.
func (d *Dashboard) confirmed(w http.ResponseWriter, r *http.Request, c *confirmation) bool {
	if r.PostFormValue("confirmed") == "1" {
		return true
	}
	c.Action = r.URL.Path
	keys := make([]string, 0, len(r.PostForm))
	for k := range r.PostForm {
		if k != "csrf" && k != "confirmed" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range r.PostForm[k] {
			c.Fields = append(c.Fields, field{k, v})
		}
	}
	d.render(w, r, http.StatusOK, "confirm", map[string]any{"Title": c.Title, "Confirm": c})
	return false
}

// jobAction: POST /jobs/{id}/retry|run|cancel|delete, then back to the job
// (or, once deleted, to the list) saying what was done. Cancel and delete
// are confirmed first.
func (d *Dashboard) jobAction(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	action := r.PathValue("action")
	back := fmt.Sprintf("/jobs/%d", id)
	if b := safeNext(r.PostFormValue("back")); b != "/" {
		back = b
	}
	var act func(*sortie.Client, context.Context, int64) (*store.JobRow, error)
	switch action {
	case "retry", "run":
		act = (*sortie.Client).JobRetry
	case "cancel":
		act = (*sortie.Client).JobCancel
		if !d.confirmed(w, r, &confirmation{Title: fmt.Sprintf("Cancel job %d?", id), Button: fmt.Sprintf("Cancel job %d", id), Danger: true,
			Message: "It will not run again unless retried. A running job is asked to stop at its next heartbeat; jobs waiting for it are cancelled too.",
			Back:    back}) {
			return nil
		}
	case "delete":
		act = (*sortie.Client).JobDelete
		if !d.confirmed(w, r, &confirmation{Title: fmt.Sprintf("Delete job %d?", id), Button: fmt.Sprintf("Delete job %d", id), Danger: true,
			Message: "Its args, result and errors are gone for good; this cannot be undone.", Back: back}) {
			return nil
		}
	default:
		return notFound("No such action", fmt.Sprintf("Jobs can be retried, run now, cancelled or deleted, not %q.", action))
	}
	row, err := act(d.c, r.Context(), id)
	if errors.Is(err, sortie.ErrNotFound) {
		return notFound(fmt.Sprintf("No job %d", id), fmt.Sprintf("There is no job %d: it was deleted, or pruned after it finished.", id))
	}
	if err != nil {
		return err
	}
	msg := ""
	switch action {
	case "retry":
		msg = "Retried: now " + string(row.State) + "."
	case "run":
		msg = fmt.Sprintf("Job %d runs now: %s.", id, row.State)
	case "cancel":
		msg = "Cancelled."
		if row.State == store.JobStateRunning {
			msg = "Cancel requested: its worker stops it at its next heartbeat."
		} else if row.State != store.JobStateCancelled {
			msg = "Not cancelled: it had already finished (" + string(row.State) + ")."
		}
	case "delete":
		back = "/jobs"
		msg = fmt.Sprintf("Job %d deleted.", id)
	}
	http.Redirect(w, r, withDone(back, msg), http.StatusSeeOther)
	return nil
}

// withDone adds the message done to the page at path.
func withDone(path, done string) string {
	u, err := url.Parse(path)
	if err != nil {
		return "/?done=" + url.QueryEscape(done)
	}
	q := u.Query()
	q.Set("done", done)
	u.RawQuery = q.Encode()
	return u.String()
}

// bulkActions are the dashboard's actions on many jobs.
var bulkActions = map[string]sortie.BulkAction{"retry": sortie.BulkRetry, "cancel": sortie.BulkCancel, "delete": sortie.BulkDelete}

// bulkWords are each bulk action's verb, past tense and warning.
var bulkWords = map[sortie.BulkAction]struct{ verb, did, warn string }{
	sortie.BulkRetry:  {"Retry", "retried", "Each runs again as soon as a worker is free (a scheduled one now)."},
	sortie.BulkCancel: {"Cancel", "cancelled (running ones at their next heartbeat)", "They will not run again unless retried."},
	sortie.BulkDelete: {"Delete", "deleted", "Their args, results and errors are gone for good; this cannot be undone."},
}

// dashboardBulkMax bounds one press of an "all matching" button.
const dashboardBulkMax = 10_000

// jobsBulk: POST /jobs/bulk, action and either the IDs of the selected rows
// or all=1 with the list's filter: confirmed first, then acts on them and
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
	words := bulkWords[action]
	var msg string
	if r.PostFormValue("all") == "1" {
		if len(back) == 0 {
			return httperr.Errorf(http.StatusBadRequest, "Choose a filter first: every job at once is not offered.")
		}
		what, err := d.matching(r.Context(), filter, back)
		if err != nil {
			return err
		}
		if !d.confirmed(w, r, &confirmation{Title: fmt.Sprintf("%s %s?", words.verb, what), Button: words.verb + " " + what,
			Danger: action != sortie.BulkRetry, Message: words.warn + fmt.Sprintf(" At most %s jobs change per press.", num(dashboardBulkMax)),
			Items: describeFilter(back), Back: "/jobs?" + back.Encode()}) {
			return nil
		}
		res, err := d.c.JobsBulk(r.Context(), action, filter, &sortie.BulkOpts{Max: dashboardBulkMax})
		if err != nil {
			return err
		}
		msg = bulkMessage(words.did, res.Changed, len(res.Failed))
		if res.Next != 0 {
			msg += fmt.Sprintf(" More match: press again for the next %s.", num(dashboardBulkMax))
		}
	} else {
		ids, err := selectedIDs(r)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("%d selected %s", len(ids), plural(len(ids), "job", "jobs"))
		items := make([]string, len(ids))
		for i, id := range ids {
			items[i] = "Job " + strconv.FormatInt(id, 10)
		}
		if !d.confirmed(w, r, &confirmation{Title: fmt.Sprintf("%s %s?", words.verb, what), Button: words.verb + " " + what,
			Danger: action != sortie.BulkRetry, Message: words.warn, Items: items, Back: "/jobs?" + back.Encode()}) {
			return nil
		}
		changed, failed, err := d.actOnIDs(r.Context(), action, ids)
		if err != nil {
			return err
		}
		msg = bulkMessage(words.did, changed, failed)
	}
	back.Set("done", msg)
	http.Redirect(w, r, "/jobs?"+back.Encode(), http.StatusSeeOther)
	return nil
}

// matching says how many jobs filter matches, in words: counted when
// the filter is a queue and a state, else "every job matching".
func (d *Dashboard) matching(ctx context.Context, filter *sortie.JobSearch, values url.Values) (string, error) {
	if narrowed(values) {
		return "every job matching", nil
	}
	counts, err := d.c.JobCounts(ctx, filter.Queue)
	if err != nil {
		return "", err
	}
	var n int64
	for _, c := range counts {
		if filter.State == "" || c.State == filter.State {
			n += c.Count
		}
	}
	what := "jobs"
	if filter.State != "" {
		what = string(filter.State) + " " + plural(int(min(n, 2)), "job", "jobs")
	}
	return fmt.Sprintf("all %s %s", num(n), what), nil
}

// describeFilter lists a jobs filter in words.
func describeFilter(v url.Values) []string {
	names := map[string]string{"queue": "Queue", "state": "State", "kind": "Kind", "tag": "Tag", "unique_key": "Unique key",
		"error": "Last error contains", "args": "Args", "within": "Created within"}
	var out []string
	for _, k := range searchFields {
		if x := v.Get(k); x != "" {
			out = append(out, names[k]+": "+x)
		}
	}
	return out
}

// selectedIDs reads the IDs of the ticked rows (at most a page of them).
func selectedIDs(r *http.Request) ([]int64, error) {
	ids := r.PostForm["id"]
	if len(ids) == 0 {
		return nil, httperr.Errorf(http.StatusBadRequest, "No jobs selected: tick the rows first.")
	}
	if len(ids) > jobsPage {
		return nil, httperr.Errorf(http.StatusBadRequest, "At most %d jobs at once.", jobsPage)
	}
	parsed := make([]int64, len(ids))
	for i, s := range ids {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 {
			return nil, httperr.Errorf(http.StatusBadRequest, "%q is not a job ID.", s)
		}
		parsed[i] = id
	}
	return parsed, nil
}

// actOnIDs applies action to ids.
func (d *Dashboard) actOnIDs(ctx context.Context, action sortie.BulkAction, ids []int64) (changed, failed int, err error) {
	res, err := d.c.JobsBulkIDs(ctx, action, ids)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range res.Failed {
		if statusOf(f.Err) >= 500 {
			return res.Changed, len(res.Failed), f.Err
		}
	}
	return res.Changed, len(res.Failed), nil
}

// bulkMessage says what a bulk action did.
func bulkMessage(did string, changed, failed int) string {
	msg := fmt.Sprintf("%d %s %s.", changed, plural(changed, "job", "jobs"), did)
	if failed > 0 {
		msg += fmt.Sprintf(" %d could not be (running, or gone meanwhile).", failed)
	}
	return msg
}

// queueAction: POST /queues/{queue}/pause|resume|delete, then back to
// where the form was (the overview or the queue's page; the overview after
// a delete). A queue nothing uses is refused (a page older than a
// deletion, a typed URL). Delete is confirmed first.
func (d *Dashboard) queueAction(w http.ResponseWriter, r *http.Request) error {
	queue, action := r.PathValue("queue"), r.PathValue("action")
	if action != "pause" && action != "resume" && action != "delete" {
		return notFound("No such action", fmt.Sprintf("Queues can be paused, resumed or deleted, not %q.", action))
	}
	if err := d.c.QueueKnown(r.Context(), queue); err != nil {
		if _, ok := errors.AsType[*sortie.UnknownQueueError](err); ok {
			return notFound("No queue "+queue, fmt.Sprintf("Queue %s is not in use: no job, setting, pause or running process uses it.", queue))
		}
		return err
	}
	back := safeNext(r.PostFormValue("back"))
	var err error
	switch action {
	case "pause":
		_, err = d.c.QueuePause(r.Context(), queue)
	case "resume":
		_, err = d.c.QueueResume(r.Context(), queue)
	case "delete":
		if !d.confirmed(w, r, &confirmation{Title: "Delete queue " + queue + "?", Button: "Delete queue " + queue, Danger: true,
			Message: "It holds no jobs. Its settings and pause go, and it is no longer listed; a later job or pause makes it anew, with no settings.",
			Back:    back}) {
			return nil
		}
		err, back = d.c.QueueDelete(r.Context(), queue), "/"
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, withDone(back, fmt.Sprintf("Queue %s %sd.", queue, action)), http.StatusSeeOther)
	return nil
}

// processAction: POST /processes/{id}/quiet|stop, then back to the list.
// Stop is confirmed first.
func (d *Dashboard) processAction(w http.ResponseWriter, r *http.Request) error {
	cmd := sortie.ProcessCommand(r.PathValue("action"))
	if cmd != sortie.ProcessQuiet && cmd != sortie.ProcessStop {
		return notFound("No such action", fmt.Sprintf("Processes can be quieted or stopped, not %q.", r.PathValue("action")))
	}
	id := r.PathValue("id")
	if id == d.c.ID() {
		return httperr.Errorf(http.StatusConflict, "Process %s is the one serving this dashboard: stop it with SIGTERM (or Ctrl-C), not from here.", id)
	}
	if cmd == sortie.ProcessStop && !d.confirmed(w, r, &confirmation{Title: "Stop process " + id + "?", Button: "Stop " + id, Danger: true,
		Message: "It stops fetching, finishes its running jobs (or hands them back at its shutdown timeout) and exits its client; " +
			"whatever started it decides whether it comes back.", Back: "/processes"}) {
		return nil
	}
	if _, err := d.c.CommandProcess(r.Context(), id, cmd); err != nil {
		if errors.Is(err, sortie.ErrNotFound) {
			return notFound("No process "+id, fmt.Sprintf("Process %s is gone: it stopped, or aged out of the registry.", id))
		}
		return err
	}
	msg := fmt.Sprintf("Process %s asked to %s; it acts at its next beat.", id, cmd)
	http.Redirect(w, r, "/processes?done="+url.QueryEscape(msg), http.StatusSeeOther)
	return nil
}

// safeNext keeps a redirect on this site.
func safeNext(s string) string {
	if !strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//") || strings.Contains(s, "\\") {
		return "/"
	}
	return s
}
