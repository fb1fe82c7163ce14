package sortie

// Keys of the attributes the client logs.
const (
	logKeyJobID    = "job_id"
	logKeyKind     = "kind"
	logKeyQueue    = "queue"
	logKeyAttempt  = "attempt"
	logKeyDuration = "duration"
	logKeyOutcome  = "outcome"
	logKeyError    = "error"
	logKeyCount    = "count"
	logKeyRetryIn  = "retry_in"
	logKeySchedule = "schedule"
	logKeyFailed   = "failed_calls"
)
