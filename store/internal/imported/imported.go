// Package imported holds the rules of JobImport that do not depend on how
// a store keeps its rows: what the call does with each job (added, already
// present, its ID or unique key taken) and the state an imported waiting
// job is stored in. Every Go backend calls them (the Redis store's scripts
// keep their own copy of the per-job rules); only the backends import this
// package.
package imported

import (
	"encoding/json"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Statuses says what JobImport does with each of jobs, in order
// (see Store.JobImport), and whether any of them conflicts: stored returns
// the job the store holds under an ID (nil for none), and holder the
// pending job holding a unique key (false for none). A pending job's key
// is taken by the holder in the store, else by an earlier added job of
// the same call.
func Statuses(jobs []*store.JobRow, stored func(id int64) *store.JobRow, holder func(key string) (int64, bool)) (_ []store.ImportResult, conflict bool) {
	res := make([]store.ImportResult, len(jobs))
	keys := make(map[string]int64) // held by pending jobs of this call
	for i, r := range jobs {
		if j := stored(r.ID); j != nil {
			res[i].Status = store.ImportPresent
			if !Same(j, r) {
				res[i].Status, conflict = store.ImportIDTaken, true
			}
			continue
		}
		if k := r.UniqueKey; k != "" && r.State.Pending() {
			if id, ok := holder(k); ok {
				res[i], conflict = store.ImportResult{Status: store.ImportUniqueTaken, Other: id}, true
				continue
			}
			if id, ok := keys[k]; ok {
				res[i], conflict = store.ImportResult{Status: store.ImportUniqueTaken, Other: id}, true
				continue
			}
			keys[k] = r.ID
		}
		res[i].Status = store.ImportAdded
	}
	return res, conflict
}

// Same reports whether stored, the job a store holds under an
// imported job's ID, is that job: same kind, queue, creation time and
// args. Its state and everything else may have changed since it was
// imported.
func Same(stored, imported *store.JobRow) bool {
	return stored.Kind == imported.Kind && stored.Queue == imported.Queue &&
		stored.CreatedAt.Truncate(time.Microsecond).Equal(imported.CreatedAt.Truncate(time.Microsecond)) &&
		jsonEqual(stored.Args, imported.Args)
}

// jsonEqual compares two JSON texts as the stores keep them: PostgreSQL's
// jsonb rewrites spacing and key order, the others keep the bytes.
func jsonEqual(a, b []byte) bool {
	if string(a) == string(b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// State returns the state an imported pending job is stored in. A
// waiting job whose dependencies (holds: whether each holds it back, in the
// store after the jobs before it were imported) no longer hold it back is
// ready: available, or scheduled when its RunAt is after now. Any other
// job keeps its state, and so does a job waiting at an Await (WaitsFor),
// which JobImport releases once its children allow it.
func State(j *store.JobRow, holds []bool, now time.Time) store.JobState {
	if j.State != store.JobStateWaiting || j.WaitsFor != "" {
		return j.State
	}
	for _, h := range holds {
		if h {
			return store.JobStateWaiting
		}
	}
	if j.RunAt.After(now) {
		return store.JobStateScheduled
	}
	return store.JobStateAvailable
}
