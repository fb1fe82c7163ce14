// Package logkey declares, once, the keys of the attributes sortie logs, so
// the client and the machinery under internal/ log the same names.
package logkey

// Keys of the attributes the client logs.
const (
	JobID    = "job_id"
	Kind     = "kind"
	Queue    = "queue"
	Attempt  = "attempt"
	Duration = "duration"
	Outcome  = "outcome"
	Error    = "error"
	Count    = "count"
	RetryIn  = "retry_in"
	Schedule = "schedule"
	Failed   = "failed_calls"
	Steps    = "steps"
	WaitsFor = "waits_for"
)
