package depgraph

import "github.com/sortiehq/sortie/store"

// The two walks down the dependency graph that every Go backend makes: the
// cascade when jobs end (release or cancel their waiting dependents, and
// so on down), and the revive when a job an ending cancelled is retried.
// A store brings its reads and writes, inside the transaction of the call,
// as a Cascader or a Reviver; the walk and the rules are here once.

// Fate is what becomes of a waiting job when a dependency ends.
type Fate struct {
	// Release: the job is released (available, or scheduled when its RunAt
	// is later) once no other dependency holds it back.
	Release bool
	// Message is the error recorded on the job when it is cancelled.
	Message string
	// By is recorded as the cancelled job's CancelledBy, so that a retry
	// of that dependency revives it; 0 for a deleted dependency.
	By int64
}

// Settle returns the fate of a waiting job whose dependency dep ended in
// state (completed, cancelled or dead), or was deleted: released when dep
// completed or the job ignores failures (ignore), cancelled otherwise with
// an error naming dep.
func Settle(dep int64, state store.JobState, deleted, ignore bool) Fate {
	switch {
	case state == store.JobStateCompleted || ignore:
		return Fate{Release: true}
	case deleted:
		return Fate{Message: DeletedMessage(dep)}
	}
	return Fate{Message: store.DependencyEndedMessage(dep, state), By: dep}
}

// Dependent is a waiting job one of whose dependencies ended, as a
// Cascader reads it: D is the store's own record of it.
type Dependent[D any] struct {
	// Dep is the dependency that ended (the first one read, when several
	// of the job's dependencies ended at once).
	Dep int64
	// Ignore is the job's IgnoreDepFailure.
	Ignore bool
	// Row is the store's record of the job.
	Row D
	// Fate is what Cascade decided for the job.
	Fate Fate
}

// Cascader is a store's part of Cascade, inside one transaction.
type Cascader[D any] interface {
	// Dependents deletes the dependency links from the jobs ids, which
	// ended, and returns their dependents that still wait: each once, or,
	// for a store that counts the links a job waits on, once per link
	// (its Apply then skips a job an earlier link of the level cancelled).
	Dependents(ids []int64) ([]Dependent[D], error)
	// Apply releases or cancels each dependent as its Fate says, and
	// returns the IDs of the cancelled ones whose own dependents must be
	// settled in turn (it may leave out those it knows have none).
	Apply(ds []Dependent[D]) (cancelled []int64, err error)
}

// Cascade settles the waiting dependents of ids, which ended in state
// (completed, cancelled or dead) or were deleted: a dependent whose
// dependencies have now all finished becomes available (scheduled if its
// RunAt is later); when the jobs ended dead or cancelled, a dependent
// without IgnoreDepFailure is cancelled with an error naming the
// dependency (recorded as its CancelledBy, unless it was deleted), and so
// on down the graph, one level of dependents at a time.
func Cascade[D any](c Cascader[D], ids []int64, state store.JobState, deleted bool) error {
	for len(ids) > 0 {
		ds, err := c.Dependents(ids)
		if err != nil || len(ds) == 0 {
			return err
		}
		for i := range ds {
			ds[i].Fate = Settle(ds[i].Dep, state, deleted, ds[i].Ignore)
		}
		if ids, err = c.Apply(ds); err != nil {
			return err
		}
		state, deleted = store.JobStateCancelled, false
	}
	return nil
}

// Reviver is a store's part of Revive, inside one transaction: J is its
// record of a cancelled job.
type Reviver[J any] interface {
	// CancelledBy returns the cancelled jobs whose CancelledBy is id, in
	// ID order.
	CancelledBy(id int64) ([]J, error)
	// Revive makes cancelled job y wait again for the dependencies that
	// hold it back, unless its unique key is held, one of its dependencies
	// no longer exists or none holds it back. It returns y's ID when it
	// did and the jobs y's ending cancelled must be revived in turn, 0
	// otherwise.
	Revive(y J) (next int64, err error)
}

// Revive makes the jobs cancelled because of job id, just retried, wait
// again, and theirs in turn, one level at a time (see
// store.Store.JobRetry). A job that cannot wait again stays cancelled and
// keeps its CancelledBy, for the next retry of id.
func Revive[J any](r Reviver[J], id int64) error {
	for ids := []int64{id}; len(ids) > 0; {
		var next []int64
		for _, x := range ids {
			ys, err := r.CancelledBy(x)
			if err != nil {
				return err
			}
			for _, y := range ys {
				n, err := r.Revive(y)
				if err != nil {
					return err
				}
				if n != 0 {
					next = append(next, n)
				}
			}
		}
		ids = next
	}
	return nil
}
