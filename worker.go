package sortie

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Worker runs jobs whose args are of type T.
type Worker[T JobArgs] interface {
	// Work runs one attempt. Return nil when done, an error to retry with
	// backoff (dead once attempts are exhausted), Cancel(err) to end the job
	// without retry, or Snooze(d) to run it again later without counting the
	// attempt. ctx is cancelled on timeout, on graceful stop's deadline and
	// when the job's lease is lost.
	Work(ctx context.Context, job *Job[T]) error
}

// WorkFunc returns a Worker that calls f; T is inferred from f:
//
//	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Email]) error {
//		return send(ctx, job.Args)
//	}), nil)
func WorkFunc[T JobArgs](f func(ctx context.Context, job *Job[T]) error) Worker[T] {
	return workFunc[T](f)
}

type workFunc[T JobArgs] func(ctx context.Context, job *Job[T]) error

func (f workFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// WorkerOpts are a kind's defaults. A zero field means the client's default.
type WorkerOpts struct {
	// Queue is where jobs of this kind are enqueued unless EnqueueOpts says
	// otherwise. Defaults to "default".
	Queue string
	// Priority is the default priority, 1 (highest) to 4. Defaults to 2.
	Priority int
	// MaxAttempts is the default number of attempts. Defaults to
	// Config.MaxAttempts.
	MaxAttempts int
	// Timeout cancels a handler's context after this long. Defaults to
	// Config.JobTimeout; a job's own EnqueueOpts.Timeout wins over both.
	Timeout time.Duration
	// RetryPolicy replaces Config.RetryPolicy for this kind.
	RetryPolicy RetryPolicy
}

// Workers is the registry of workers by kind, with each kind's defaults.
// Fill it before NewClient; it is not safe to add workers while a client
// that uses it runs.
type Workers struct {
	byKind map[string]*workerEntry
}

type workerEntry struct {
	kind string
	opts WorkerOpts
	// work decodes the row's args and calls the typed worker; nil for a
	// kind registered with AddKind, which this program does not run.
	work func(ctx context.Context, row *JobRow) error
}

// NewWorkers returns an empty registry.
func NewWorkers() *Workers {
	return &Workers{byKind: make(map[string]*workerEntry)}
}

// AddWorker registers worker for the kind named by T, with opts (nil for
// defaults). It panics when the kind is invalid, the opts are invalid, or the
// kind is registered twice: these are mistakes in the program's setup. Use
// RegisterWorker to get an error instead.
func AddWorker[T JobArgs](w *Workers, worker Worker[T], opts *WorkerOpts) {
	if err := RegisterWorker(w, worker, opts); err != nil {
		panic(err)
	}
}

// RegisterWorker is AddWorker returning an error instead of panicking.
func RegisterWorker[T JobArgs](w *Workers, worker Worker[T], opts *WorkerOpts) error {
	if w == nil || w.byKind == nil {
		return invalidf("RegisterWorker: Workers is nil or not made by NewWorkers")
	}
	if worker == nil {
		return invalidf("RegisterWorker: worker is nil")
	}
	kind, err := kindOf[T]()
	if err != nil {
		return err
	}
	if _, dup := w.byKind[kind]; dup {
		return invalidf("worker for kind %q registered twice", kind)
	}
	var o WorkerOpts
	if opts != nil {
		o = *opts
	}
	if err := o.validate(kind); err != nil {
		return err
	}
	w.byKind[kind] = &workerEntry{
		kind: kind,
		opts: o,
		work: func(ctx context.Context, row *JobRow) error {
			var args T
			if err := json.Unmarshal(row.Args, &args); err != nil {
				return &ArgsDecodeError{Kind: row.Kind, Err: err}
			}
			return worker.Work(ctx, &Job[T]{JobRow: row, Args: args})
		},
	}
	return nil
}

// AddKind registers the options of a kind that has no worker in this
// program: its jobs are taken by remote workers (over the HTTP API) or
// with Client.Take. opts apply as they do to a worker's kind: Queue,
// Priority and MaxAttempts are the kind's enqueue defaults, RetryPolicy
// decides when a failed attempt reported for it runs again, and Timeout
// bounds a taken job's context (and is told to remote workers). It panics
// when the kind or the opts are invalid or the kind is registered twice;
// use RegisterKind to get an error instead.
func (w *Workers) AddKind(kind string, opts *WorkerOpts) {
	if err := w.RegisterKind(kind, opts); err != nil {
		panic(err)
	}
}

// RegisterKind is AddKind returning an error instead of panicking.
func (w *Workers) RegisterKind(kind string, opts *WorkerOpts) error {
	if w == nil || w.byKind == nil {
		return invalidf("RegisterKind: Workers is nil or not made by NewWorkers")
	}
	if err := store.ValidateKind(kind); err != nil {
		return invalidf("RegisterKind: %v", err)
	}
	if _, dup := w.byKind[kind]; dup {
		return invalidf("kind %q registered twice", kind)
	}
	var o WorkerOpts
	if opts != nil {
		o = *opts
	}
	if err := o.validate(kind); err != nil {
		return err
	}
	w.byKind[kind] = &workerEntry{kind: kind, opts: o}
	return nil
}

// Kinds returns the kinds that have a worker in this program, sorted: the
// kinds a client working queues claims. Kinds registered with AddKind are
// left out.
func (w *Workers) Kinds() []string {
	if w == nil {
		return nil
	}
	kinds := make([]string, 0, len(w.byKind))
	for k, e := range w.byKind {
		if e.work == nil {
			continue
		}
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

func (w *Workers) entry(kind string) *workerEntry {
	if w == nil {
		return nil
	}
	return w.byKind[kind]
}

func (o *WorkerOpts) validate(kind string) error {
	if o.Queue != "" {
		if err := store.ValidateQueueName(o.Queue); err != nil {
			return invalidf("WorkerOpts.Queue of kind %q: %v", kind, err)
		}
	}
	if o.Priority != 0 && (o.Priority < store.PriorityHighest || o.Priority > store.PriorityLowest) {
		return invalidf("WorkerOpts.Priority of kind %q must be between %d and %d, got %d", kind, store.PriorityHighest, store.PriorityLowest, o.Priority)
	}
	if o.MaxAttempts < 0 || o.MaxAttempts > store.MaxAttemptsLimit {
		return invalidf("WorkerOpts.MaxAttempts of kind %q must be between 1 and %d, got %d", kind, store.MaxAttemptsLimit, o.MaxAttempts)
	}
	if o.Timeout < 0 || o.Timeout > store.MaxTimeout {
		return invalidf("WorkerOpts.Timeout of kind %q must be between 0 and %s, got %s", kind, store.MaxTimeout, o.Timeout)
	}
	return nil
}

// kindOf returns T's kind, checking that it is usable.
func kindOf[T JobArgs]() (kind string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = invalidf("Kind() of %T panicked (it must have a value receiver and return a constant): %v", *new(T), r)
		}
	}()
	var zero T
	kind = zero.Kind()
	if err := store.ValidateKind(kind); err != nil {
		return "", invalidf("args type %T: %v", zero, err)
	}
	return kind, nil
}
