// Package httperr carries an HTTP status with an error through the handlers
// of the API and the dashboard, and maps the library's errors to the
// statuses both answer with.
package httperr

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sortiehq/sortie"
)

// statusError is an error answered with its own status.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// Errorf returns an error, formatted as fmt.Sprintf does, answered with
// status.
func Errorf(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

// Message returns the text to answer err with: a job field's range error
// names the field as the request spells it (max_attempts must be between 1
// and 1000000, got 2147483648), not as the Go API does; other invalid
// arguments and a full queue lose the library's "sortie: " prefix; other
// errors say what they say.
// A job of a batch is named by its place in the request's jobs array.
func Message(err error) string {
	var fe *sortie.FieldError
	if !errors.As(err, &fe) {
		if errors.Is(err, sortie.ErrInvalidArgument) || errors.Is(err, sortie.ErrQueueFull) || errors.Is(err, sortie.ErrQueueNotEmpty) {
			// The request's own words, without the library's prefix.
			return strings.TrimPrefix(err.Error(), "sortie: ")
		}
		return err.Error()
	}
	var be *sortie.BatchJobError
	if errors.As(err, &be) {
		return fmt.Sprintf("jobs[%d].%s", be.Index, fe.Error())
	}
	return fe.Error()
}

// Status returns the HTTP status err is answered with: its own, for an
// Errorf error; 400 for invalid input, 404 for a missing job, 409 for a
// running job, a held unique key or a queue that is not empty, 429 for a full queue, 500 for a store
// whose data is damaged; otherwise 503, since the store failed
// (unreachable, timed out, closed).
func Status(err error) int {
	var se *statusError
	var ue *sortie.UnknownKindError
	switch {
	case errors.As(err, &se):
		return se.status
	case errors.Is(err, sortie.ErrInvalidArgument), errors.As(err, &ue):
		return http.StatusBadRequest
	case errors.Is(err, sortie.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sortie.ErrJobRunning), errors.Is(err, sortie.ErrUniqueConflict), errors.Is(err, sortie.ErrQueueNotEmpty):
		return http.StatusConflict
	case errors.Is(err, sortie.ErrQueueFull):
		return http.StatusTooManyRequests
	case errors.Is(err, sortie.ErrCorrupt):
		return http.StatusInternalServerError // not a passing outage
	}
	return http.StatusServiceUnavailable
}
