package sortie

import "github.com/sortiehq/sortie/internal/logkey"

// Keys of the attributes the client logs (declared in internal/logkey).
const (
	logKeyJobID    = logkey.JobID
	logKeyKind     = logkey.Kind
	logKeyQueue    = logkey.Queue
	logKeyAttempt  = logkey.Attempt
	logKeyDuration = logkey.Duration
	logKeyOutcome  = logkey.Outcome
	logKeyError    = logkey.Error
	logKeyCount    = logkey.Count
	logKeyRetryIn  = logkey.RetryIn
	logKeySchedule = logkey.Schedule
	logKeyFailed   = logkey.Failed
	logKeyProblem  = "problem"
	logKeySteps    = logkey.Steps
	logKeyWaitsFor = logkey.WaitsFor
)
