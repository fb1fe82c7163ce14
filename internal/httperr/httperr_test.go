package httperr_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/sortiehq/sortie/internal/httperr"
	"github.com/sortiehq/sortie/store"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want int
	}{
		{httperr.Errorf(http.StatusRequestEntityTooLarge, "body over %d bytes", 10), 413},
		{fmt.Errorf("enqueue: %w", store.ErrInvalidArgument), 400},
		{fmt.Errorf("get job 4: %w", store.ErrNotFound), 404},
		{fmt.Errorf("delete job 4: %w", store.ErrJobRunning), 409},
		{fmt.Errorf("retry job 4: %w", store.ErrUniqueConflict), 409},
		{fmt.Errorf("enqueue: %w", store.ErrQueueFull), 429},
		{fmt.Errorf("list: %w", store.ErrClosed), 503},
		{errors.New("dial tcp 127.0.0.1:5432: connection refused"), 503},
	} {
		if got := httperr.Status(tt.err); got != tt.want {
			t.Errorf("Status(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
	if msg := httperr.Errorf(400, "limit must be 1 to %d", 1000).Error(); msg != "limit must be 1 to 1000" {
		t.Errorf("Errorf message = %q", msg)
	}
}
