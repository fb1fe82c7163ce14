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
