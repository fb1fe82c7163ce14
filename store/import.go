package store

import (
	"encoding/json"
	"fmt"
	"time"
)

// JobImportParams are the jobs one JobImport call writes.
type JobImportParams struct {
	// Jobs are rows as another store's JobList returned them, IDs and
	// CancelledBy included, in increasing ID order (ImportValidate).
	Jobs []*JobRow
	// DryRun checks every job against the store and writes nothing.
	DryRun bool
	// Now is the time of the import: a waiting job that nothing holds back
	// any more is made available, or scheduled when its RunAt is after Now.
	Now time.Time
}

// ImportStatus says what JobImport did, or would do, with one job.
type ImportStatus uint8

// The statuses of an imported job.
const (
	// ImportAdded: the job was written (under DryRun: would be).
	ImportAdded ImportStatus = iota + 1
	// ImportPresent: the store holds a job with this ID that is the same
	// job (same kind, queue, CreatedAt and Args): an earlier import wrote it. It is left as it
	// is, whatever happened to it since, so an import can run again.
	ImportPresent
	// ImportIDTaken: the store holds a different job with this ID.
	ImportIDTaken
	// ImportUniqueTaken: the job is pending and another pending job holds
	// its UniqueKey (ImportResult.Other).
	ImportUniqueTaken
)

// String returns the status as the import report names it.
func (s ImportStatus) String() string {
	switch s {
	case ImportAdded:
		return "added"
	case ImportPresent:
		return "present"
	case ImportIDTaken:
		return "id-taken"
	case ImportUniqueTaken:
		return "unique-taken"
	}
	return fmt.Sprintf("ImportStatus(%d)", s)
}

// Conflict reports whether s stops an import: ImportIDTaken or
// ImportUniqueTaken.
func (s ImportStatus) Conflict() bool { return s == ImportIDTaken || s == ImportUniqueTaken }

// ImportResult is what JobImport did with one job.
type ImportResult struct {
	Status ImportStatus
	// Other is the job holding the unique key, for ImportUniqueTaken.
	Other int64
}

// ImportValidate checks the rows of an import before any is written: IDs
// positive and increasing, every field within what a store could hold,
// the fields each state needs (a running job's lease and claim token, a
// finished job's FinalizedAt), and links to earlier jobs only (DependsOn,
// WorkflowID, CancelledBy). It names the job and the field at fault.
func ImportValidate(jobs []*JobRow) error {
	var prev int64
	for _, j := range jobs {
		if err := importCheck(j, prev); err != nil {
			return fmt.Errorf("job %d: %w", j.ID, err)
		}
		prev = j.ID
	}
	return nil
}

func importCheck(j *JobRow, prev int64) error {
	switch {
	case j.ID <= 0:
		return fmt.Errorf("id must be positive")
	case j.ID <= prev:
		return fmt.Errorf("ids must increase: it comes after job %d", prev)
	case j.Kind == "":
		return fmt.Errorf("kind is empty")
	case j.Queue == "":
		return fmt.Errorf("queue is empty")
	case !j.State.Valid():
		return fmt.Errorf("state %q is not a job state", j.State)
	case j.Priority < PriorityHighest || j.Priority > PriorityLowest:
		return fmt.Errorf("priority must be %d to %d, got %d", PriorityHighest, PriorityLowest, j.Priority)
	case j.MaxAttempts < 1:
		return fmt.Errorf("max_attempts must be at least 1, got %d", j.MaxAttempts)
	case j.Attempt < 0:
		return fmt.Errorf("attempt must not be negative, got %d", j.Attempt)
	case !json.Valid(j.Args):
		return fmt.Errorf("args are not valid JSON")
	case len(j.Meta) > 0 && !json.Valid(j.Meta):
		return fmt.Errorf("meta is not valid JSON")
	case len(j.Result) > 0 && !json.Valid(j.Result):
		return fmt.Errorf("result is not valid JSON")
	case j.CreatedAt.IsZero() || j.RunAt.IsZero():
		return fmt.Errorf("created_at and run_at must be set")
	case j.Timeout < 0:
		return fmt.Errorf("timeout must not be negative")
	case j.Progress < 0 || j.Progress > 100:
		return fmt.Errorf("progress must be 0 to 100, got %g", j.Progress)
	case j.WorkflowID < 0 || j.WorkflowID > j.ID:
		return fmt.Errorf("workflow_id %d is not this job or an earlier one", j.WorkflowID)
	}
	for _, d := range j.DependsOn {
		if d <= 0 || d >= j.ID {
			return fmt.Errorf("depends_on %d is not an earlier job", d)
		}
	}
	if j.CancelledBy != 0 && (j.State != JobStateCancelled || j.CancelledBy >= j.ID || j.CancelledBy <= 0) {
		return fmt.Errorf("cancelled_by %d: only a cancelled job names the earlier dependency that cancelled it", j.CancelledBy)
	}
	if j.State == JobStateRunning && (j.LeaseUntil.IsZero() || j.ClaimToken <= 0) {
		return fmt.Errorf("a running job needs lease_until and claim_token")
	}
	if j.State != JobStateRunning && !j.LeaseUntil.IsZero() {
		return fmt.Errorf("lease_until is set but the job is %s, not running", j.State)
	}
	if j.State.Finished() != !j.FinalizedAt.IsZero() {
		return fmt.Errorf("finalized_at must be set exactly when the job is finished (it is %s)", j.State)
	}
	if j.State == JobStateWaiting && len(j.DependsOn) == 0 && j.WaitsFor == "" {
		return fmt.Errorf("a waiting job needs depends_on or waits_for")
	}
	if j.ParentID < 0 || j.ParentID >= j.ID || (j.ParentID == 0) != (j.SpawnStep == "") {
		return fmt.Errorf("parent_id %d and spawn_step %q: a spawned job names an earlier job and its step", j.ParentID, j.SpawnStep)
	}
	return importSteps(j)
}
