package sortie_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store/memstore"
)

// JobSearch finds jobs by tag, unique key, last error text, args values and
// creation time, on top of the indexed filters.
func TestJobSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, memstore.New(), &sortie.Config{})
	enq := func(args string, opts *sortie.EnqueueOpts) int64 {
		t.Helper()
		res, err := c.Enqueue(ctx, jobjson.RawArgs{JobKind: "mail", JSON: []byte(args)}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	ada := enq(`{"user": {"id": 42, "email": "ada@example.com"}, "items": [{"sku": "A-1"}]}`, &sortie.EnqueueOpts{Tags: []string{"vip"}, UniqueKey: "welcome:42"})
	bob := enq(`{"user": {"id": 7, "email": "bob@example.com"}, "items": []}`, &sortie.EnqueueOpts{Queue: "other", Tags: []string{"trial"}})
	taken, err := c.Take(ctx, sortie.QueueDefault, 1, &sortie.TakeOpts{Remote: true, Wait: -1})
	if err != nil || len(taken) != 1 {
		t.Fatalf("Take = %v, %v", taken, err)
	}
	if err := taken[0].Fail(ctx, errors.New("SMTP 550: Mailbox unavailable")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		s    sortie.JobSearch
		want []int64
	}{
		{"tag", sortie.JobSearch{Tag: "vip"}, []int64{ada}},
		{"unique key", sortie.JobSearch{UniqueKey: "welcome:42"}, []int64{ada}},
		{"error text, any case", sortie.JobSearch{ErrorContains: "mailbox UNAVAILABLE"}, []int64{ada}},
		{"args number", sortie.JobSearch{Args: []sortie.ArgsMatch{{Path: "user.id", Value: "7"}}}, []int64{bob}},
		{"args number written otherwise", sortie.JobSearch{Args: []sortie.ArgsMatch{{Path: "user.id", Value: "42.0"}}}, []int64{ada}},
		{"args plain string", sortie.JobSearch{Args: []sortie.ArgsMatch{{Path: "user.email", Value: "bob@example.com"}}}, []int64{bob}},
		{"args array index", sortie.JobSearch{Args: []sortie.ArgsMatch{{Path: "items.0.sku", Value: `"A-1"`}}}, []int64{ada}},
		{"args missing path", sortie.JobSearch{Args: []sortie.ArgsMatch{{Path: "items.3.sku", Value: "A-1"}}}, nil},
		{"indexed and not", sortie.JobSearch{JobListParams: sortie.JobListParams{Queue: "other"}, Tag: "vip"}, nil},
		{"created range", sortie.JobSearch{CreatedAfter: time.Now().Add(-time.Hour), CreatedBefore: time.Now().Add(time.Hour)}, []int64{ada, bob}},
		{"created before", sortie.JobSearch{CreatedBefore: time.Now().Add(-time.Hour)}, nil},
	} {
		res, err := c.JobSearch(ctx, &tt.s)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got []int64
		for _, j := range res.Jobs {
			got = append(got, j.ID)
		}
		if len(got) != len(tt.want) || (len(got) > 0 && got[0] != tt.want[0]) {
			t.Errorf("%s: found %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := c.JobSearch(ctx, &sortie.JobSearch{ScanMax: -1}); !errors.Is(err, sortie.ErrInvalidArgument) {
		t.Errorf("ScanMax -1: %v, want ErrInvalidArgument", err)
	}
}

// A search stops after ScanMax jobs, says so, and goes on from its cursor.
func TestJobSearchCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, memstore.New(), &sortie.Config{})
	var needle int64
	for i := range 30 {
		opts := &sortie.EnqueueOpts{}
		if i == 25 {
			opts.Tags = []string{"needle"}
		}
		res, err := c.Enqueue(ctx, jobjson.RawArgs{JobKind: "k", JSON: []byte(`{}`)}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if i == 25 {
			needle = res.ID
		}
	}
	s := &sortie.JobSearch{Tag: "needle", ScanMax: 10}
	var found []int64
	calls := 0
	for {
		res, err := c.JobSearch(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		if res.Scanned > 10 {
			t.Errorf("call %d scanned %d jobs, over ScanMax 10", calls, res.Scanned)
		}
		for _, j := range res.Jobs {
			found = append(found, j.ID)
		}
		if res.NextCursor == 0 {
			break
		}
		if !res.Capped && len(res.Jobs) == 0 {
			t.Fatalf("a call that found nothing and was not capped returned a cursor")
		}
		s.Cursor = res.NextCursor
	}
	if len(found) != 1 || found[0] != needle || calls != 3 {
		t.Errorf("found %v in %d calls, want [%d] in 3 capped calls", found, calls, needle)
	}
}
