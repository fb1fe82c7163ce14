package sortie

import "time"

// EnqueueOpts are one job's options. A zero field means the kind's default
// (WorkerOpts), then the client's.
type EnqueueOpts struct {
	// Queue to enqueue into. Defaults to the kind's WorkerOpts.Queue, then "default".
	Queue string
	// Priority, 1 (runs first) to 4. Defaults to the kind's, then 2.
	Priority int
	// RunAt delays the job until then. Not together with RunIn.
	RunAt time.Time
	// RunIn delays the job by this long. Not together with RunAt.
	RunIn time.Duration
	// MaxAttempts is how many attempts the job gets. Defaults to the kind's,
	// then Config.MaxAttempts (25).
	MaxAttempts int
	// UniqueKey, when set, keeps the job out while another job with the same
	// key is scheduled, available, running or retrying: the enqueue then
	// reports Duplicate with the existing job's ID. At most 255 bytes.
	UniqueKey string
	// Tags label the job for search and display: at most 16, each at most 64 bytes.
	Tags []string
	// Meta is a small JSON object of the application's own; at most 64 KiB encoded.
	Meta map[string]any
	// Timeout cancels this job's handler context after this long, overriding
	// the kind's and client's timeouts.
	Timeout time.Duration
	// PartitionKey puts the job in a partition (a tenant, customer or API
	// key) for the queue's partition limits. Defaults to the args'
	// PartitionKey() when they implement PartitionedArgs. At most 255 bytes.
	PartitionKey string
	// DependsOn are existing jobs that must finish before this one starts;
	// until then the job is waiting. If one ends dead or cancelled, this job
	// is cancelled too, unless IgnoreDepFailure.
	DependsOn []int64
	// IgnoreDepFailure runs the job even when a dependency ends dead or
	// cancelled.
	IgnoreDepFailure bool
}

// PartitionedArgs are args that name their own partition key, so every job
// of the kind is partitioned without setting EnqueueOpts.PartitionKey:
//
//	func (s SyncAccount) PartitionKey() string { return "account:" + s.AccountID }
type PartitionedArgs interface {
	JobArgs
	PartitionKey() string
}

// EnqueueParams is one job of EnqueueMany.
type EnqueueParams struct {
	Args JobArgs
	Opts *EnqueueOpts
}
