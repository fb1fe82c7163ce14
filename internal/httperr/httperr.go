// Package httperr carries an HTTP status with an error through the handlers
// of the API and the dashboard, and maps the store's errors to the
// statuses both answer with.
package httperr

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sortiehq/sortie/store"
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

// Own reports whether err carries its own status (an Errorf error): the
// surface's own answer, not a store's failure.
func Own(err error) bool {
	var se *statusError
	return errors.As(err, &se)
}

// Status returns the HTTP status err is answered with: its own, for an
// Errorf error; 400 for invalid input, 404 for a missing job, 409 for a
// running job, a held unique key or a queue that is not empty, 429 for a
// full queue, 500 for a store whose data is damaged; otherwise 503, since
// the store failed (unreachable, timed out, closed, or full: retrying
// later may succeed once room is made). It knows the store's
// errors; the client's own error types are the surfaces' to map first.
func Status(err error) int {
	var se *statusError
	switch {
	case errors.As(err, &se):
		return se.status
	case errors.Is(err, store.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrJobRunning), errors.Is(err, store.ErrUniqueConflict), errors.Is(err, store.ErrQueueNotEmpty):
		return http.StatusConflict
	case errors.Is(err, store.ErrQueueFull):
		return http.StatusTooManyRequests
	case errors.Is(err, store.ErrCorrupt):
		return http.StatusInternalServerError // not a passing outage
	}
	return http.StatusServiceUnavailable
}
