package sortie_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/memstore"
)

// A result whose JSON is not valid UTF-8 (raw JSON, which encoding/json
// does not check) is refused, and the previous result is kept.
func TestSetResultRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	errs := make(chan error, 1)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		if err := sortie.SetResult(ctx, json.RawMessage(`{"ok": true}`)); err != nil {
			return err
		}
		errs <- sortie.SetResult(ctx, json.RawMessage("{\"ok\": \"\xff\"}"))
		return nil
	}), nil)
	c := startClient(t, memstore.New(), &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	id := mustEnqueue(t, c, Msg{}, nil)
	if err := <-errs; !errors.Is(err, sortie.ErrInvalidArgument) {
		t.Errorf("SetResult of invalid UTF-8 = %v, want ErrInvalidArgument", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	row, err := c.Wait(ctx, id)
	if err != nil || string(row.Result) != `{"ok":true}` {
		t.Fatalf("job = %+v, %v; want completed with the first result", row, err)
	}
}
