package sortie_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

func TestClientInspectAndAdmin(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		c := newClient(t, st, &sortie.Config{})
		var ids []int64
		for i := 0; i < 25; i++ {
			ids = append(ids, mustEnqueue(t, c, Msg{}, nil))
		}
		mustEnqueue(t, c, Other{}, &sortie.EnqueueOpts{Queue: "q2"})

		seen := 0
		p := &sortie.JobListParams{Kind: "msg", Limit: 10}
		for pages := 0; ; pages++ {
			page, err := c.JobList(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page.Jobs {
				if j.ID != ids[seen] {
					t.Fatalf("listing item %d is job %d, want %d", seen, j.ID, ids[seen])
				}
				seen++
			}
			if page.NextCursor == 0 {
				if pages != 2 {
					t.Fatalf("listed in %d pages, want 3", pages+1)
				}
				break
			}
			p.Cursor = page.NextCursor
		}
		if seen != 25 {
			t.Fatalf("paged through %d msg jobs, want 25", seen)
		}
		if _, err := c.JobList(ctx, &sortie.JobListParams{State: "bogus"}); !errors.Is(err, sortie.ErrInvalidArgument) {
			t.Fatalf("JobList with an unknown state = %v, want ErrInvalidArgument", err)
		}

		if _, err := c.JobCancel(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.JobDelete(ctx, ids[1]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.JobGet(ctx, ids[1]); !errors.Is(err, sortie.ErrNotFound) {
			t.Fatalf("JobGet of a deleted job = %v, want ErrNotFound", err)
		}
		row, err := c.JobRetry(ctx, ids[0])
		if err != nil || row.State != sortie.JobStateAvailable {
			t.Fatalf("JobRetry of a cancelled job = %v, %v; want available", row, err)
		}
		counts, err := c.JobCounts(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, qc := range counts {
			got[qc.Queue+"/"+string(qc.State)] = qc.Count
		}
		if got["default/available"] != 24 || got["q2/available"] != 1 || len(got) != 2 {
			t.Fatalf("counts = %v, want default/available 24 and q2/available 1", got)
		}
	})
}
