package store

import "context"

// ServerProblem is a state of a store's server that puts jobs at risk: a
// setting that lets the server delete jobs or lose them in a crash, or
// memory about to run out, after which it refuses new ones.
type ServerProblem struct {
	// Code names the problem: ProblemEviction, ProblemNoPersistence,
	// ProblemNoAppendOnly or ProblemMemory.
	Code string
	// Message says what is wrong, what it costs and how to fix it.
	Message string
}

// The ServerProblem codes.
const (
	// ProblemEviction: the server may delete keys when its memory runs
	// short (Redis: maxmemory-policy other than noeviction), and a deleted
	// key is a lost job.
	ProblemEviction = "eviction"
	// ProblemNoPersistence: the server keeps nothing on disk, so a restart
	// loses every job.
	ProblemNoPersistence = "no-persistence"
	// ProblemNoAppendOnly: the server writes only periodic snapshots, so a
	// crash loses every job written since the last one.
	ProblemNoAppendOnly = "no-append-only"
	// ProblemMemory: the server is at or near its memory limit (Redis:
	// maxmemory); at the limit it refuses enqueues, claims and outcomes
	// (ErrStoreFull) until room is made.
	ProblemMemory = "memory"
)

// ServerChecker is implemented by a Store whose server has settings that
// can lose jobs and can change while it runs (redisstore): the client
// calls ServerCheck when it starts and on every maintenance round, and
// reports the problems in its logs, health and metrics.
type ServerChecker interface {
	// ServerCheck reads the server's settings and returns the problems
	// they have now, none when they are sound.
	ServerCheck(ctx context.Context, p *ServerCheckParams) ([]ServerProblem, error)
}

// ServerCheckParams are ServerCheck's; none yet.
type ServerCheckParams struct{}
