package sortie

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sortiehq/sortie/store"
)

// Errors a store returns, re-exported so errors.Is works at every layer.
var (
	// ErrNotFound: no job with that ID.
	ErrNotFound = store.ErrNotFound
	// ErrUnsupported: the store cannot do that.
	ErrUnsupported = store.ErrUnsupported
	// ErrJobRunning: the operation needs a job that is not running.
	ErrJobRunning = store.ErrJobRunning
	// ErrUniqueConflict: another pending job holds the job's unique key.
	ErrUniqueConflict = store.ErrUniqueConflict
	// ErrClosed: the store or client was closed.
	ErrClosed = store.ErrClosed
	// ErrSchemaNewer: the database was written by a newer sortie.
	ErrSchemaNewer = store.ErrSchemaNewer
	// ErrNotSortieDatabase: the database is not sortie's.
	ErrNotSortieDatabase = store.ErrNotSortieDatabase
	// ErrCorrupt: the store's data is damaged; retrying does not help,
	// restore it from a backup.
	ErrCorrupt = store.ErrCorrupt
	// ErrStoreFull: the store has no room for more data (a Redis server
	// at its maxmemory, a full disk) and refuses writes until some is
	// made; retrying alone does not help.
	ErrStoreFull = store.ErrStoreFull
	// ErrQueueNotEmpty: the queue holds jobs, so QueueDelete refuses it.
	ErrQueueNotEmpty = store.ErrQueueNotEmpty
)

// Errors of the client itself.
var (
	// ErrInvalidArgument: an option or argument is invalid; the message names it.
	ErrInvalidArgument = store.ErrInvalidArgument
	// ErrAlreadyStarted: Start was called on a running client.
	ErrAlreadyStarted = errors.New("sortie: client already started")
	// ErrNotStarted: Stop was called on a client that is not running.
	ErrNotStarted = errors.New("sortie: client not started")
	// ErrLeaseLost: the claim is no longer the job's (its lease ran out and
	// the job was rescued, or it was finished, cancelled or deleted), so
	// the report or heartbeat was refused and the job left as it is. It is
	// also the cause of a running job's context cancelled for that reason.
	ErrLeaseLost = errors.New("sortie: job lease lost")
)

// invalidf returns an error wrapping ErrInvalidArgument whose text is
// "sortie: " and the formatted message, without the sentinel's own words.
func invalidf(format string, args ...any) error {
	return &invalidError{msg: "sortie: " + fmt.Sprintf(format, args...)}
}

// invalidError is an invalid argument, described in its message.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

// Unwrap returns ErrInvalidArgument.
func (e *invalidError) Unwrap() error { return ErrInvalidArgument }

// jobError is the error of operation op ("retry") on job id: a missing
// job's is "job 42: sortie: job not found" whatever words the store used,
// and other errors are wrapped with op and id unless the store's text
// already names them.
func jobError(op string, id int64, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("job %d: %w", id, ErrNotFound)
	case strings.Contains(err.Error(), fmt.Sprintf("%s job %d", op, id)):
		return err
	}
	return fmt.Errorf("%s job %d: %w", op, id, err)
}

// FieldError reports a job field outside its range (see the store package's
// limits, such as store.MaxAttemptsLimit). Field is the field's name as the
// HTTP API spells it (max_attempts); the client's own messages name the
// EnqueueOpts field, with the *FieldError still in the chain for errors.As.
type FieldError = store.FieldError

// BatchJobError is EnqueueMany's error when one job of the batch is
// invalid; nothing of the batch was stored.
type BatchJobError struct {
	// Index is the job's index in the batch, from 0; Len is the batch's size.
	Index, Len int
	// Err says what is wrong with the job.
	Err error
}

func (e *BatchJobError) Error() string {
	return fmt.Sprintf("enqueue job %d of %d: %v", e.Index+1, e.Len, e.Err)
}

// Unwrap returns Err.
func (e *BatchJobError) Unwrap() error { return e.Err }

// UnknownKindError reports a job whose kind has no registered worker.
type UnknownKindError struct {
	Kind string
}

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("sortie: no worker registered for kind %q", e.Kind)
}

// UnknownQueueError is QueueKnown's error for a queue that no job,
// setting, pause or registered process uses: most likely a typo. The
// command line, the HTTP API and the dashboard refuse to pause or
// configure such a queue unless told to create it.
type UnknownQueueError struct {
	Queue string
	// Known are the queues in use, by name.
	Known []string
}

func (e *UnknownQueueError) Error() string {
	known := "none"
	if len(e.Known) > 0 {
		known = strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("sortie: unknown queue %q: no job, setting, pause or running process uses it (known queues: %s)", e.Queue, known)
}

// ArgsDecodeError reports a payload the worker could not decode into its
// args type. The attempt fails (and is retried like any error), so a fixed
// worker deployed later can still run the job.
type ArgsDecodeError struct {
	Kind string
	Err  error
}

func (e *ArgsDecodeError) Error() string {
	return fmt.Sprintf("sortie: decode args of kind %q: %v", e.Kind, e.Err)
}

func (e *ArgsDecodeError) Unwrap() error { return e.Err }

// PanicError is the error recorded when a handler panics.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine stack at the panic.
	Stack string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v", e.Value)
}

// StopError is what Stop returns when its context ended before every job
// of the client was finished and recorded. The jobs it names are not lost:
// they stay claimed until their leases expire, and the rescue then makes
// them available again (counting the attempt), on this store, for any
// client.
type StopError struct {
	// Running are the IDs of jobs whose handlers had not returned by the
	// deadline, in increasing order. A handler may still be running: its
	// job is not handed to another worker before its lease expires.
	Running []int64
	// Unrecorded is how many finished attempts' outcomes the store did not
	// record by the deadline (it was unreachable or failing).
	Unrecorded int
	// Err is why: the store's last error, or ctx's.
	Err error
}

func (e *StopError) Error() string {
	return fmt.Sprintf("sortie: stop: %d job(s) still running and %d outcome(s) not recorded at the deadline, left to their leases: %v",
		len(e.Running), e.Unrecorded, e.Err)
}

// Unwrap returns Err, so errors.Is(err, context.DeadlineExceeded) works.
func (e *StopError) Unwrap() error { return e.Err }

var (
	// errStopping is the cause of job contexts cancelled by Stop's deadline.
	errStopping = errors.New("sortie: client stopping")
	// errLeaseLost is the cause of job contexts cancelled because the lease
	// was lost (the job was rescued and may run elsewhere).
	errLeaseLost = ErrLeaseLost
	// errCancelRequested is the cause of job contexts cancelled because
	// JobCancel asked the running job to stop.
	errCancelRequested = errors.New("sortie: job cancelled on request")
)
