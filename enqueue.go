package sortie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sortiehq/sortie/internal/strictjson"
	"github.com/sortiehq/sortie/store"
)

// Enqueue inserts one job. It returns once the job is committed to the store.
// A job whose UniqueKey is already held is not inserted: the result says
// Duplicate and carries the holder's ID.
func (c *Client) Enqueue(ctx context.Context, args JobArgs, opts *EnqueueOpts) (EnqueueResult, error) {
	res, err := c.EnqueueMany(ctx, []EnqueueParams{{Args: args, Opts: opts}})
	if err != nil {
		return EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueMany inserts jobs atomically: all are committed or none. It returns
// one result per job, in order.
func (c *Client) EnqueueMany(ctx context.Context, jobs []EnqueueParams) ([]EnqueueResult, error) {
	if len(jobs) == 0 {
		return nil, invalidf("EnqueueMany: no jobs")
	}
	now := c.clock.Now()
	rows := make([]*NewJob, len(jobs))
	njs := make([]NewJob, len(jobs)) // one allocation for the batch
	for i, j := range jobs {
		if err := c.fillJob(&njs[i], j.Args, j.Opts, now); err != nil {
			if len(jobs) > 1 {
				return nil, &BatchJobError{Index: i, Len: len(jobs), Err: err}
			}
			return nil, err
		}
		rows[i] = &njs[i]
	}
	return c.enqueueRows(ctx, rows)
}

// enqueueRows runs the enqueue middleware and the store insert on rows.
func (c *Client) enqueueRows(ctx context.Context, rows []*NewJob) ([]EnqueueResult, error) {
	res, err := c.enqueue(ctx, rows)
	if err != nil {
		return nil, err
	}
	if len(res) != len(rows) {
		return nil, fmt.Errorf("sortie: enqueue returned %d results for %d jobs", len(res), len(rows))
	}
	return res, nil
}

// insert is the innermost EnqueueFunc: one store call for the whole batch.
func (c *Client) insert(ctx context.Context, jobs []*NewJob) ([]EnqueueResult, error) {
	now := c.clock.Now()
	_, workflow := ctx.Value(workflowKey{}).(workflowKey)
	res, err := c.storeEnqueue(ctx, &store.JobEnqueueManyParams{Jobs: jobs, Now: now, Workflow: workflow})
	if err != nil {
		// The store's error is whole: a refusal of the contract in the
		// caller's terms, or its engine's failure prefixed with the store
		// and the operation (docs/writing-a-store.md).
		return nil, err
	}
	c.events.publishEnqueued(now, jobs, res)
	return res, nil
}

// newJob validates args and opts and resolves the defaults.
func (c *Client) newJob(args JobArgs, opts *EnqueueOpts, now time.Time) (*NewJob, error) {
	nj := new(NewJob)
	if err := c.fillJob(nj, args, opts, now); err != nil {
		return nil, err
	}
	return nj, nil
}

// fillJob is newJob writing the job into nj.
func (c *Client) fillJob(nj *NewJob, args JobArgs, opts *EnqueueOpts, now time.Time) error {
	if args == nil {
		return invalidf("args are nil")
	}
	kind, err := safeKind(args)
	if err != nil {
		return err
	}
	var o EnqueueOpts
	if opts != nil {
		o = *opts
	}
	var kindOpts WorkerOpts
	if e := c.cfg.Workers.entry(kind); e != nil {
		kindOpts = e.opts
	}
	queue := firstNonZero(o.Queue, kindOpts.Queue, QueueDefault)
	// The store's validators enforce the rule too; checked here, the
	// error names the caller's option and its JSON field.
	if err := store.ValidateQueueName(queue); err != nil {
		problem := strings.TrimPrefix(err.Error(), "queue name ")
		return &optionError{msg: fmt.Sprintf("sortie: EnqueueOpts.Queue of kind %q: %v", kind, err),
			field: &FieldError{Field: "queue", Problem: problem}}
	}
	if !o.RunAt.IsZero() && o.RunIn != 0 {
		return invalidf("EnqueueOpts of kind %q: set RunAt or RunIn, not both", kind)
	}
	if o.RunIn < 0 {
		return invalidf("EnqueueOpts.RunIn of kind %q must not be negative, got %s", kind, o.RunIn)
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return invalidf("encode args of kind %q to JSON: %v", kind, err)
	}
	var meta []byte
	if len(o.Meta) > 0 {
		meta, err = json.Marshal(o.Meta)
		if err != nil {
			return invalidf("encode EnqueueOpts.Meta of kind %q to JSON: %v", kind, err)
		}
	}
	runAt := o.RunAt
	if o.RunIn > 0 {
		runAt = now.Add(o.RunIn)
	}
	partition := o.PartitionKey
	if pa, ok := args.(PartitionedArgs); ok && partition == "" {
		partition = pa.PartitionKey()
	}
	if err := checkJSONText(kind, payload, meta); err != nil {
		return err
	}
	*nj = NewJob{
		Kind:        kind,
		Queue:       queue,
		Args:        payload,
		Priority:    firstNonZero(o.Priority, kindOpts.Priority, store.PriorityDefault),
		MaxAttempts: firstNonZero(o.MaxAttempts, kindOpts.MaxAttempts, c.cfg.MaxAttempts),
		RunAt:       runAt,
		UniqueKey:   o.UniqueKey,
		Tags:        append([]string(nil), o.Tags...),
		Meta:        meta,
		Timeout:     o.Timeout,

		PartitionKey:     partition,
		DependsOn:        append([]int64(nil), o.DependsOn...),
		IgnoreDepFailure: o.IgnoreDepFailure,
	}
	if err := store.ValidateJobs([]*NewJob{nj}); err != nil {
		return optsError(kind, o.RunIn > 0, err)
	}
	return nil
}

// optsFields names EnqueueOpts' field for each of store.FieldError's.
var optsFields = map[string]string{
	"priority": "Priority", "max_attempts": "MaxAttempts", "run_at": "RunAt", "timeout": "Timeout",
	"unique_key": "UniqueKey", "partition_key": "PartitionKey", "tags": "Tags", "meta": "Meta",
	"depends_on": "DependsOn", "queue": "Queue",
}

// optsError restates a job's range error in EnqueueOpts' terms; the
// *FieldError stays in the chain for surfaces that name fields their way.
func optsError(kind string, runIn bool, err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name := "EnqueueOpts." + optsFields[fe.Field]
	switch {
	case fe.Field == "run_at" && runIn:
		name = "EnqueueOpts.RunIn"
	case fe.Field == "kind":
		name = "Kind()"
	case fe.Field == "queue":
		return &optionError{msg: fmt.Sprintf("sortie: EnqueueOpts.Queue of kind %q: %v", kind, fe), field: fe}
	}
	return &optionError{msg: fmt.Sprintf("sortie: %s of kind %q %s", name, kind, fe.Problem), field: fe}
}

// optionError is an invalid option named in the Go API's terms. It wraps
// the *FieldError that found it, and so ErrInvalidArgument.
type optionError struct {
	msg   string
	field *FieldError
}

func (e *optionError) Error() string { return e.msg }
func (e *optionError) Unwrap() error { return e.field }

// checkJSONText refuses args and meta whose JSON text is not valid UTF-8:
// it may come as is from a json.Marshaler (raw args from another program)
// that encoding/json does not check. Such text is served back broken to
// workers in other languages, and PostgreSQL refuses it. The job's strings
// are checked once, by store.ValidateJobs.
func checkJSONText(kind string, payload, meta []byte) error {
	if err := strictjson.ValidText(payload); err != nil {
		return invalidf("args of kind %q: their JSON %v", kind, err)
	}
	if err := strictjson.ValidText(meta); err != nil {
		return invalidf("EnqueueOpts.Meta of kind %q: its JSON %v", kind, err)
	}
	return nil
}

// safeKind calls args.Kind(), turning a panic (a nil pointer, say) into an error.
func safeKind(args JobArgs) (kind string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = invalidf("Kind() of %T panicked: %v", args, r)
		}
	}()
	kind = args.Kind()
	if err := store.ValidateKind(kind); err != nil {
		return "", invalidf("args type %T: %v", args, err)
	}
	return kind, nil
}

func firstNonZero[T comparable](vals ...T) T {
	var zero T
	for _, v := range vals {
		if v != zero {
			return v
		}
	}
	return zero
}

// workflowKey marks an enqueue's context as a workflow batch, so the insert
// at the end of the middleware chain asks the store for a WorkflowID.
type workflowKey struct{}

// txKey marks an enqueue's context as running inside the application's
// transaction; its value is a txValue. The insert at the bottom of the
// enqueue middleware reads it, so middleware and events see a
// transactional enqueue like any other.
type txKey struct{}

type txValue struct{ tx store.Tx }

// storeEnqueue is the store call of an enqueue: inside the application's
// transaction when ctx carries one.
func (c *Client) storeEnqueue(ctx context.Context, p *store.JobEnqueueManyParams) ([]EnqueueResult, error) {
	if v, ok := ctx.Value(txKey{}).(txValue); ok {
		return v.tx.JobEnqueueMany(ctx, p)
	}
	return c.store.JobEnqueueMany(ctx, p)
}
