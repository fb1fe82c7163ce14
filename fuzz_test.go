package sortie_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// Order is a typed args struct for FuzzArgsDecode.
type Order struct {
	ID    int64             `json:"id"`
	Items []string          `json:"items"`
	Total float64           `json:"total"`
	When  time.Time         `json:"when"`
	Extra map[string]string `json:"extra"`
}

func (Order) Kind() string { return "order" }

// FuzzArgsDecode runs a typed worker on arbitrary stored args, as a
// payload enqueued by another program or an older version may be: the
// worker never panics, and the attempt either runs the handler or fails
// with an error naming the args it could not decode, retried like any
// failure.
func FuzzArgsDecode(f *testing.F) {
	for _, seed := range []string{`{"id": 7, "items": ["a"], "total": 9.5, "when": "2026-01-02T15:04:05Z"}`,
		`{}`, `null`, `[]`, `"x"`, `{"id": "seven"}`, `{"id": 1e400}`, `{"when": "yesterday"}`, `{"extra": {"a": 1}}`, ``, `{`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		ctx := context.Background()
		st := memstore.New()
		defer st.Close()
		ran := false
		workers := sortie.NewWorkers()
		sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Order]) error {
			ran = true
			return nil
		}), nil)
		c, err := sortie.NewClient(st, &sortie.Config{Workers: workers, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		res, err := st.JobEnqueueMany(ctx, &store.JobEnqueueManyParams{Now: time.Now(),
			Jobs: []*store.NewJob{{Kind: "order", Queue: sortie.QueueDefault, Args: args, MaxAttempts: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Drain(ctx); err != nil {
			t.Fatalf("Drain() = %v", err)
		}
		row, err := c.JobGet(ctx, res[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ran && row.State == sortie.JobStateCompleted:
		case !ran && row.State == sortie.JobStateRetrying && len(row.Errors) == 1 &&
			strings.HasPrefix(row.Errors[0].Message, `sortie: decode args of kind "order": `):
		default:
			t.Fatalf("args %q: handler ran %v, state %s, errors %+v; want completed, or retrying with a decode error", args, ran, row.State, row.Errors)
		}
	})
}
