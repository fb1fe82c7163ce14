package store

import (
	"errors"
	"fmt"
)

// Sentinel errors a store returns, wrapped with context. The sortie package
// re-exports them, so errors.Is works at every layer.
var (
	// ErrNotFound: no job with that ID.
	ErrNotFound = errors.New("sortie: job not found")
	// ErrUnsupported: this store cannot do that. The conformance suite expects
	// exactly this error where a store documents a limit.
	ErrUnsupported = errors.New("sortie: not supported by this store")
	// ErrJobRunning: the operation needs a job that is not running.
	ErrJobRunning = errors.New("sortie: job is running")
	// ErrUniqueConflict: the job cannot be made pending again because another
	// pending job holds its unique key.
	ErrUniqueConflict = errors.New("sortie: another pending job holds the unique key")
	// ErrQueueFull: the queue is at its MaxDepth and rejects new jobs.
	ErrQueueFull = errors.New("sortie: queue is full")
	// ErrQueueNotEmpty: the queue holds jobs, so it cannot be deleted.
	ErrQueueNotEmpty = errors.New("sortie: queue is not empty")
	// ErrClosed: the store (or client) was closed.
	ErrClosed = errors.New("sortie: closed")
	// ErrSchemaNewer: the database was written by a newer version of sortie.
	ErrSchemaNewer = errors.New("sortie: database schema is newer than this version of sortie")
	// ErrInvalidArgument: a job, option or argument is invalid; the message
	// names it.
	ErrInvalidArgument = errors.New("sortie: invalid argument")
	// ErrNotSortieDatabase: the database holds something other than sortie's tables.
	ErrNotSortieDatabase = errors.New("sortie: not a sortie database")
	// ErrCorrupt: the store's data is damaged (a SQLite file's pages).
	// Unlike an outage, retrying does not help: restore from a backup.
	ErrCorrupt = errors.New("sortie: store data is corrupt")
	// ErrStoreFull: the store has no room for more data (a Redis server at
	// its maxmemory, a full disk) and refuses writes until some is made:
	// deleting or pruning finished jobs, or giving the store more room.
	// Retrying alone does not help.
	ErrStoreFull = errors.New("sortie: store is full")
)

// FullError returns an error saying msg (what is full, what to do) and
// err, the server's or driver's, that wraps both ErrStoreFull and err.
func FullError(msg string, err error) error {
	return &fullError{msg: msg, err: err}
}

type fullError struct {
	msg string
	err error
}

func (e *fullError) Error() string   { return e.msg + ": " + e.err.Error() }
func (e *fullError) Unwrap() []error { return []error{ErrStoreFull, e.err} }

// Plain reports whether err is one of the contract's own refusals (bad
// input, a full or non-empty queue, a missing or running job, a held unique
// key), which already says what failed in the caller's terms. A store
// returns such an error as it is and prefixes only the errors of its engine
// with its name.
func Plain(err error) bool {
	for _, s := range []error{ErrInvalidArgument, ErrQueueFull, ErrQueueNotEmpty, ErrNotFound, ErrJobRunning, ErrUniqueConflict} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// QueueNotEmptyError is the error of QueueDelete on a queue holding jobs
// (in any state). Every store returns this text; it wraps
// ErrQueueNotEmpty.
func QueueNotEmptyError(queue string, jobs int64) error {
	what := fmt.Sprintf("%d jobs", jobs)
	if jobs == 1 {
		what = "1 job"
	}
	return fmt.Errorf("%w: queue %q holds %s: delete its jobs (or let retention prune the finished ones) first", ErrQueueNotEmpty, queue, what)
}
