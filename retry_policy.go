package sortie

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides how long a failed job waits before its next attempt.
// It is consulted only when the job has attempts left.
type RetryPolicy interface {
	// RetryDelay returns the wait after job's attempt job.Attempt failed.
	// Zero (or less) retries the job at once, in its original place in
	// the queue: ahead of jobs enqueued after it.
	RetryDelay(job *JobRow) time.Duration
}

// RetryPolicyFunc adapts a function to RetryPolicy.
type RetryPolicyFunc func(job *JobRow) time.Duration

// RetryDelay calls f.
func (f RetryPolicyFunc) RetryDelay(job *JobRow) time.Duration { return f(job) }

// ExponentialBackoff is the default retry policy: about attempt^4 seconds
// (1s, 16s, 81s, 4m16s, 10m25s, ...), plus or minus Jitter, capped at Max.
type ExponentialBackoff struct {
	// Max caps the delay. Defaults to 24 hours.
	Max time.Duration
	// Jitter is the fraction of random spread around the delay, so retries
	// of many jobs that failed together spread out. Defaults to 0.1; a
	// negative value disables jitter.
	Jitter float64
}

// RetryDelay implements RetryPolicy.
func (b ExponentialBackoff) RetryDelay(job *JobRow) time.Duration {
	maxDelay := b.Max
	if maxDelay <= 0 {
		maxDelay = 24 * time.Hour
	}
	jitter := b.Jitter
	if jitter == 0 {
		jitter = 0.1
	}
	attempt := max(job.Attempt, 1)
	secs := math.Pow(float64(attempt), 4)
	if jitter > 0 {
		secs *= 1 + jitter*(2*rand.Float64()-1)
	}
	d := time.Duration(secs * float64(time.Second))
	if d > maxDelay || d <= 0 {
		d = maxDelay
	}
	return d
}
