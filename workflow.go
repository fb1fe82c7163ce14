package sortie

import (
	"context"
	"fmt"
)

// Workflow is a graph of jobs enqueued together: a job starts when every
// job it depends on has completed. Build it with Add, then EnqueueWorkflow.
// If a dependency ends dead or cancelled, its dependents are cancelled, and
// theirs in turn, unless a dependent was added with IgnoreDepFailure.
//
//	wf := sortie.NewWorkflow()
//	fetch := wf.Add(Fetch{URL: u}, nil)
//	resize := wf.Add(Resize{}, nil, fetch)
//	thumb := wf.Add(Thumbnail{}, nil, fetch)
//	wf.Add(Publish{}, nil, resize, thumb)
//	res, err := client.EnqueueWorkflow(ctx, wf)
type Workflow struct {
	steps []workflowStep
}

type workflowStep struct {
	args JobArgs
	opts *EnqueueOpts
	deps []WorkflowStep
}

// WorkflowStep is a handle on a job added to a Workflow, used to name it
// as another job's dependency.
type WorkflowStep struct {
	wf    *Workflow
	index int
}

// NewWorkflow returns an empty workflow.
func NewWorkflow() *Workflow { return &Workflow{} }

// Add adds a job that starts once every job in deps has completed, and
// returns its handle. opts may be nil; opts.DependsOn may add existing jobs.
func (w *Workflow) Add(args JobArgs, opts *EnqueueOpts, deps ...WorkflowStep) WorkflowStep {
	w.steps = append(w.steps, workflowStep{args: args, opts: opts, deps: deps})
	return WorkflowStep{wf: w, index: len(w.steps) - 1}
}

// EnqueueWorkflow inserts every job of wf atomically. Jobs without
// dependencies are available (or scheduled) at once; the others wait. All
// jobs share a WorkflowID (the first job's ID), so JobList can show the
// workflow as one unit. It returns one result per job, in the order added.
func (c *Client) EnqueueWorkflow(ctx context.Context, wf *Workflow) ([]EnqueueResult, error) {
	if wf == nil || len(wf.steps) == 0 {
		return nil, invalidf("EnqueueWorkflow: the workflow has no jobs")
	}
	now := c.clock.Now()
	rows := make([]*NewJob, len(wf.steps))
	for i, st := range wf.steps {
		nj, err := c.newJob(st.args, st.opts, now)
		if err != nil {
			return nil, fmt.Errorf("enqueue workflow job %d of %d: %w", i+1, len(wf.steps), err)
		}
		for _, d := range st.deps {
			if d.wf != wf {
				return nil, invalidf("enqueue workflow job %d of %d: a dependency belongs to another workflow", i+1, len(wf.steps))
			}
			// Add returns handles of steps already added, so d.index < i always.
			nj.DependsOnIndex = append(nj.DependsOnIndex, d.index)
		}
		rows[i] = nj
	}
	return c.enqueueRows(context.WithValue(ctx, workflowKey{}, workflowKey{}), rows)
}

// EnqueueChain inserts jobs that run one after another: each starts only
// when the one before it completed; if one ends dead or cancelled, the rest
// are cancelled. The chain is one workflow (shared WorkflowID).
func (c *Client) EnqueueChain(ctx context.Context, steps ...EnqueueParams) ([]EnqueueResult, error) {
	if len(steps) == 0 {
		return nil, invalidf("EnqueueChain: no steps")
	}
	wf := NewWorkflow()
	var prev []WorkflowStep
	for _, s := range steps {
		prev = []WorkflowStep{wf.Add(s.Args, s.Opts, prev...)}
	}
	return c.EnqueueWorkflow(ctx, wf)
}
