package web

import (
	"context"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// stepChildrenShown bounds the children of a spawn a job's page links.
const stepChildrenShown = 20

// stepEntry is one step of a job's timeline (template job-steps).
type stepEntry struct {
	sortie.JobStep
	// After is the time from the step before (or from the job's creation,
	// for the first) to this one's record, in words.
	After string
	// Preview is the start of a step's JSON result.
	Preview string
	// Children are the first stepChildrenShown of a spawn's children;
	// More how many others there are.
	Children []int64
	More     int
	// Waiting says the job waits at this step now: sleeping until its
	// wake time, or awaiting its pending children.
	Waiting bool
}

// stepTimeline returns job row's steps as its page shows them, in the
// order recorded, or nil for a job without steps.
func (d *Dashboard) stepTimeline(ctx context.Context, row *sortie.JobRow) ([]stepEntry, error) {
	if len(row.Steps) == 0 {
		return nil, nil
	}
	list, err := d.c.JobSteps(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	out := make([]stepEntry, len(list))
	prev := row.CreatedAt
	for i, st := range list {
		e := stepEntry{JobStep: st, Waiting: row.WaitsFor == st.Name}
		if st.RecordedAt.After(prev) {
			e.After = jobjson.Duration(st.RecordedAt.Sub(prev))
		}
		prev = st.RecordedAt
		switch st.Kind {
		case store.StepRun:
			e.Preview = argsPreview(st.Result)
		case store.StepSpawn:
			e.Children = st.Children[:min(len(st.Children), stepChildrenShown)]
			e.More = len(st.Children) - len(e.Children)
		}
		out[i] = e
	}
	return out, nil
}
