package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// jobAction is an admin command that acts on jobs by ID.
type jobAction struct {
	name, description string
	act               func(c *sortie.Client, ctx context.Context, id int64) (*store.JobRow, error)
	// say describes, for the text output, what act did given the row it
	// returned.
	say func(row *store.JobRow) string
	// did says what --all did to the jobs it counts ("retried").
	did string
}

var (
	retryAction = jobAction{name: "retry", act: (*sortie.Client).JobRetry, did: "retried",
		say: func(r *store.JobRow) string { return "now " + string(r.State) }, description: `
Retry makes each job available now: dead, cancelled, completed, scheduled and
retrying jobs alike. A job that used all its attempts gets one more. A job
whose dependencies have not all completed (one is pending, dead or cancelled)
waits for them instead, and a waiting job is left as it is, so a chain never
runs out of order. Retrying a job also revives the jobs its ending cancelled
(the rest of its chain or workflow): they wait for it again. It prints each
job's new state; a job that is not found is reported, the others are still
retried, and the exit status is then 1.`}
	cancelAction = jobAction{name: "cancel", act: (*sortie.Client).JobCancel, say: sayCancelled,
		did: "cancelled (running ones at their next heartbeat; finished ones left as they were)", description: `
Cancel ends each job that has not finished: a waiting, scheduled, available
or retrying job becomes cancelled at once; a running job is asked to stop,
and its worker cancels the handler's context at its next heartbeat. A
finished job is left as it is. It prints each job's state afterwards.`}
	deleteAction = jobAction{name: "delete", act: (*sortie.Client).JobDelete, did: "deleted",
		say: func(r *store.JobRow) string { return "deleted (it was " + string(r.State) + ")" }, description: `
Delete removes each job that is not running (cancel a running job first). It
prints the state each job had.`}
)

func sayCancelled(r *store.JobRow) string {
	switch r.State {
	case store.JobStateCancelled:
		return "cancelled"
	case store.JobStateRunning:
		return "cancel requested: its worker stops it at its next heartbeat"
	}
	return "not cancelled: already " + string(r.State)
}

func (j jobAction) run(ctx context.Context, e *env, args []string) int {
	var (
		a                  adminFlags
		all                bool
		queue, state, kind string
	)
	fs := flagSet(j.name, adminSynopsis+" ID... | --all [--queue Q] [--state S] [--kind K]", j.description+bulkDescription)
	a.register(fs)
	fs.BoolVar(&all, "all", false, "act on every job matching --queue, --state and --kind, instead of IDs")
	fs.StringVar(&queue, "queue", "", "with --all: only jobs of this `queue`")
	fs.StringVar(&state, "state", "", "with --all: only jobs in this `state`")
	fs.StringVar(&kind, "kind", "", "with --all: only jobs of this `kind`")
	pos, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	filter := &sortie.JobListParams{Queue: queue, State: store.JobState(state), Kind: kind}
	switch {
	case all && len(pos) > 0:
		return usageError(e, fs, "give job IDs or --all, not both")
	case all && *filter == sortie.JobListParams{}:
		return usageError(e, fs, "--all needs --queue, --state or --kind: it acts on every job they match")
	case !all && *filter != sortie.JobListParams{}:
		return usageError(e, fs, "--queue, --state and --kind choose the jobs of --all")
	case !all && len(pos) == 0:
		return usageError(e, fs, "give the IDs of the jobs to %s, or --all with filters", j.name)
	case state != "" && !jobjson.ValidState(filter.State):
		return usageError(e, fs, "--state %q is not a job state: want one of %s", state, jobjson.StateNames())
	}
	ids := make([]int64, len(pos))
	for i, p := range pos {
		id, err := parseJobID(p)
		if err != nil {
			return usageError(e, fs, "%v", err)
		}
		ids[i] = id
	}
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	if all {
		return j.runAll(ctx, e, fs.Name(), c, filter, a.json)
	}
	status := exitOK
	var done []jobjson.Job
	for _, id := range ids {
		row, err := j.act(c, ctx, id)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %s\n", fs.Name(), say(err))
			status = exitError
			continue
		}
		if a.json {
			done = append(done, jobjson.FromRow(row))
			continue
		}
		fmt.Fprintf(e.stdout, "job %d: %s\n", id, j.say(row))
	}
	if a.json {
		if done == nil {
			done = []jobjson.Job{}
		}
		if err := writeJSON(e.stdout, done); err != nil {
			return adminFail(e, fs, err)
		}
	}
	return status
}

const bulkDescription = `

With --all instead of IDs it acts on every job that --queue, --state and
--kind match (at least one of them) when it starts, a page at a time, and
prints how many it acted on; jobs added meanwhile are left alone. It is
not one transaction: a job that changed state since the page was read is
acted on as it is then, and one that fails is reported while the rest go
on.`

// bulkFailure is one job an --all action could not act on.
type bulkFailure struct {
	ID    int64  `json:"id"`
	Error string `json:"error"`
}

// runAll acts on every job filter matches, up to the newest that matched
// when it started (Client.JobsBulk).
func (j jobAction) runAll(ctx context.Context, e *env, cmd string, c *sortie.Client, filter *sortie.JobListParams, asJSON bool) int {
	res, err := c.JobsBulk(ctx, sortie.BulkAction(j.name), &sortie.JobSearch{JobListParams: *filter}, nil)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v (after acting on %d jobs)\n", cmd, err, res.Changed)
		return exitError
	}
	failures := make([]bulkFailure, len(res.Failed))
	for i, f := range res.Failed {
		failures[i] = bulkFailure{ID: f.ID, Error: say(f.Err)}
	}
	if asJSON {
		out := struct {
			Done   int           `json:"done"`
			Failed []bulkFailure `json:"failed"`
		}{res.Changed, failures}
		if err := writeJSON(e.stdout, out); err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", cmd, err)
			return exitError
		}
	} else {
		fmt.Fprintf(e.stdout, "%d %s %s\n", res.Changed, plural(res.Changed, "job", "jobs"), j.did)
	}
	for _, f := range failures {
		fmt.Fprintf(e.stderr, "%s: %s\n", cmd, f.Error)
	}
	if len(failures) > 0 {
		return exitError
	}
	return exitOK
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// queueAction is pause or resume.
type queueAction struct {
	name, description string
	act               func(c *sortie.Client, ctx context.Context, queue string) (*store.QueueRow, error)
	// creates says the action may make a queue on purpose (--create).
	creates bool
}

var (
	pauseAction = queueAction{name: "pause", act: (*sortie.Client).QueuePause, creates: true, description: `
Pause stops every process sharing the store from starting jobs of each queue,
within one fetch cycle. Jobs already running finish; enqueues are still
accepted and wait until the queue is resumed.

A queue no job, setting, pause or running process uses is refused, with the
known queues, as a likely typo; --create pauses it anyway, so that its
first jobs wait. 'sortie queues --delete QUEUE' deletes an empty queue.`}
	resumeAction = queueAction{name: "resume", act: (*sortie.Client).QueueResume, description: `
Resume lets workers start jobs of each paused queue again. A queue no job,
setting, pause or running process uses is refused, with the known queues.`}
)

// createFlagHelp is the help of --create.
const createFlagHelp = "act on a queue that nothing uses yet, making it (otherwise refused as a likely typo)"

// unknownQueue reports, for command fs, that queue is not in use, when
// QueueKnown says so (create skips the check). It returns whether it did.
func unknownQueue(ctx context.Context, e *env, fs *flag.FlagSet, c *sortie.Client, queue string, create bool) bool {
	if create {
		return false
	}
	err := c.QueueKnown(ctx, queue)
	if err == nil {
		return false
	}
	if _, ok := errors.AsType[*sortie.UnknownQueueError](err); !ok {
		fmt.Fprintf(e.stderr, "%s: queue %q: %s\n", fs.Name(), queue, say(err))
		return true
	}
	hint := ""
	if fs.Lookup("create") != nil {
		hint = "; give --create to make it"
	}
	fmt.Fprintf(e.stderr, "%s: %s%s\n", fs.Name(), say(err), hint)
	return true
}

func (q queueAction) run(ctx context.Context, e *env, args []string) int {
	var (
		a      adminFlags
		create bool
	)
	fs := flagSet(q.name, adminSynopsis+" QUEUE...", q.description)
	a.register(fs)
	if q.creates {
		fs.BoolVar(&create, "create", false, createFlagHelp)
	}
	queues, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	if len(queues) == 0 {
		return usageError(e, fs, "give the queues to %s", q.name)
	}
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	status := exitOK
	rows := []jobjson.Queue{}
	for _, name := range queues {
		if unknownQueue(ctx, e, fs, c, name, create) {
			status = exitError
			continue
		}
		row, err := q.act(c, ctx, name)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: queue %q: %s\n", fs.Name(), name, say(err))
			status = exitError
			continue
		}
		if a.json {
			rows = append(rows, jobjson.FromQueue(row, nil))
			continue
		}
		state := "running"
		if row.Paused {
			state = "paused"
		}
		fmt.Fprintf(e.stdout, "queue %s: %s\n", row.Name, state)
	}
	if a.json {
		if err := writeJSON(e.stdout, rows); err != nil {
			return adminFail(e, fs, err)
		}
	}
	return status
}
