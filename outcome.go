package sortie

import (
	"errors"
	"fmt"
	"time"
)

// Cancel returns an error that, returned from a handler, ends the job as
// cancelled: it is not retried, and err (which may be nil) is recorded.
func Cancel(err error) error {
	return &cancelError{err: err}
}

// Snooze returns an error that, returned from a handler, puts the job back to
// run again after d without counting the attempt. A negative d counts as 0.
func Snooze(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &snoozeError{d: d}
}

type cancelError struct{ err error }

func (e *cancelError) Error() string {
	if e.err == nil {
		return "job cancelled"
	}
	return "job cancelled: " + e.err.Error()
}

func (e *cancelError) Unwrap() error { return e.err }

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("job snoozed for %s", e.d) }

// IsCancel reports whether err asks for the job to be cancelled.
func IsCancel(err error) bool {
	var ce *cancelError
	return errors.As(err, &ce)
}

// SnoozeDuration returns the snooze asked for by err, if it is one.
func SnoozeDuration(err error) (time.Duration, bool) {
	var se *snoozeError
	if errors.As(err, &se) {
		return se.d, true
	}
	return 0, false
}
