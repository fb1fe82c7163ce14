package store

import "fmt"

// HasDeps reports whether j depends on other jobs.
func (j *NewJob) HasDeps() bool {
	return len(j.DependsOn) > 0 || len(j.DependsOnIndex) > 0
}

// DependencyEndedMessage is the error recorded on a job cancelled because
// its dependency dep ended in state st (dead or cancelled). Stores find the
// dependency again in this text when they upgrade old data, so it must not
// change.
func DependencyEndedMessage(dep int64, st JobState) string {
	return fmt.Sprintf("dependency job %d ended %s", dep, st)
}

// DependencyDeletedMessage is the error recorded on a waiting job
// cancelled because its dependency dep was deleted or pruned.
func DependencyDeletedMessage(dep int64) string {
	return fmt.Sprintf("dependency job %d was deleted", dep)
}

// UnknownDependencyError is the error of a batch whose job i (kind kind) of
// n depends on job dep, which does not exist.
func UnknownDependencyError(i, n int, kind string, dep int64) error {
	return fmt.Errorf("job %d of %d (kind %q) depends on job %d: %w", i+1, n, kind, dep, ErrNotFound)
}
