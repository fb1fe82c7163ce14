package cli

import (
	"context"
	"fmt"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// jobAction is an admin command that acts on jobs by ID.
type jobAction struct {
	name, description string
	act               func(c *sortie.Client, ctx context.Context, id int64) (*store.JobRow, error)
	// say describes, for the text output, what act did given the row it
	// returned.
	say func(row *store.JobRow) string
}

var (
	retryAction = jobAction{name: "retry", act: (*sortie.Client).JobRetry,
		say: func(r *store.JobRow) string { return "now " + string(r.State) }, description: `
Retry makes each job available now: dead, cancelled, completed, scheduled and
retrying jobs alike. A job that used all its attempts gets one more. It prints
each job's new state; a job that is not found is reported, the others are
still retried, and the exit status is then 1.`}
	cancelAction = jobAction{name: "cancel", act: (*sortie.Client).JobCancel, say: sayCancelled, description: `
Cancel ends each job that has not finished: a waiting, scheduled, available
or retrying job becomes cancelled at once; a running job is asked to stop,
and its worker cancels the handler's context at its next heartbeat. A
finished job is left as it is. It prints each job's state afterwards.`}
	deleteAction = jobAction{name: "delete", act: (*sortie.Client).JobDelete,
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
	var a adminFlags
	fs := flagSet(j.name, adminSynopsis+" ID...", j.description)
	a.register(fs)
	pos, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) == 0 {
		return usageError(e, fs, "give the IDs of the jobs to %s", j.name)
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
	status := exitOK
	var done []jobJSON
	for _, id := range ids {
		row, err := j.act(c, ctx, id)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
			status = exitError
			continue
		}
		if a.json {
			done = append(done, jobView(row))
			continue
		}
		fmt.Fprintf(e.stdout, "job %d: %s\n", id, j.say(row))
	}
	if a.json {
		if done == nil {
			done = []jobJSON{}
		}
		if err := writeJSON(e.stdout, done); err != nil {
			return adminFail(e, fs, err)
		}
	}
	return status
}

// queueAction is pause or resume.
type queueAction struct {
	name, description string
	act               func(c *sortie.Client, ctx context.Context, queue string) (*store.QueueRow, error)
}

var (
	pauseAction = queueAction{name: "pause", act: (*sortie.Client).QueuePause, description: `
Pause stops every process sharing the store from starting jobs of each queue,
within one fetch cycle. Jobs already running finish; enqueues are still
accepted and wait until the queue is resumed.`}
	resumeAction = queueAction{name: "resume", act: (*sortie.Client).QueueResume, description: `
Resume lets workers start jobs of each paused queue again.`}
)

func (q queueAction) run(ctx context.Context, e *env, args []string) int {
	var a adminFlags
	fs := flagSet(q.name, adminSynopsis+" QUEUE...", q.description)
	a.register(fs)
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
	rows := []queueJSON{}
	for _, name := range queues {
		row, err := q.act(c, ctx, name)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: queue %q: %v\n", fs.Name(), name, err)
			status = exitError
			continue
		}
		if a.json {
			rows = append(rows, queueView(row, nil))
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
