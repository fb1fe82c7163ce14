package pgstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/steps"
)

// jobCols are the columns of a job, in the order scanJob reads them.
const jobCols = `id, kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
	attempted_at, attempted_by, finalized_at, lease_until, claim_token, unique_key, errors, tags, meta, timeout,
	partition_key, result, progress, cancel_requested, workflow_id, depends_on, ignore_dep_failure, cancelled_by,
	parent_id, spawn_step, cancel_with_parent, waits_for`

// scanJob reads one row of jobCols.
func scanJob(row pgx.Row) (*store.JobRow, error) {
	var (
		j                                    store.JobRow
		state                                string
		priority                             int16
		attempt, maxAttempts                 int32
		attemptedAt, finalizedAt, leaseUntil *time.Time
		attemptedBy, uniqueKey, partitionKey *string
		errs, tags, dependsOn                []byte
		timeout                              int64
		workflowID, cancelledBy, parentID    *int64
		spawnStep, waitsFor                  *string
	)
	err := row.Scan(&j.ID, &j.Kind, &j.Queue, &j.Args, &state, &priority, &attempt, &maxAttempts, &j.RunAt, &j.CreatedAt,
		&attemptedAt, &attemptedBy, &finalizedAt, &leaseUntil, &j.ClaimToken, &uniqueKey, &errs, &tags, &j.Meta, &timeout,
		&partitionKey, &j.Result, &j.Progress, &j.CancelRequested, &workflowID, &dependsOn, &j.IgnoreDepFailure, &cancelledBy,
		&parentID, &spawnStep, &j.CancelWithParent, &waitsFor)
	if err != nil {
		return nil, err
	}
	j.State = store.JobState(state)
	j.Priority, j.Attempt, j.MaxAttempts = int(priority), int(attempt), int(maxAttempts)
	j.RunAt, j.CreatedAt = j.RunAt.UTC(), j.CreatedAt.UTC()
	j.AttemptedAt, j.FinalizedAt, j.LeaseUntil = utc(attemptedAt), utc(finalizedAt), utc(leaseUntil)
	j.AttemptedBy, j.UniqueKey, j.PartitionKey = str(attemptedBy), str(uniqueKey), str(partitionKey)
	j.Timeout = time.Duration(timeout)
	if workflowID != nil {
		j.WorkflowID = *workflowID
	}
	if cancelledBy != nil {
		j.CancelledBy = *cancelledBy
	}
	if parentID != nil {
		j.ParentID = *parentID
	}
	j.SpawnStep, j.WaitsFor = str(spawnStep), steps.WaitsFor(j.State, str(waitsFor))
	if errs != nil {
		if err := json.Unmarshal(errs, &j.Errors); err != nil {
			return nil, fmt.Errorf("decode errors of job %d: %w", j.ID, err)
		}
		for i := range j.Errors {
			j.Errors[i].At = j.Errors[i].At.UTC()
		}
	}
	if tags != nil {
		if err := json.Unmarshal(tags, &j.Tags); err != nil {
			return nil, fmt.Errorf("decode tags of job %d: %w", j.ID, err)
		}
	}
	if dependsOn != nil {
		if err := json.Unmarshal(dependsOn, &j.DependsOn); err != nil {
			return nil, fmt.Errorf("decode dependencies of job %d: %w", j.ID, err)
		}
	}
	return &j, nil
}

// collectJobs reads every row of rows with scanJob.
func collectJobs(rows pgx.Rows, err error) ([]*store.JobRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []*store.JobRow
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nullStr binds "" as NULL.
func nullStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// nullTime binds the zero time as NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// jsonArg encodes v as JSON text for a jsonb parameter; nil slices as NULL.
func jsonArg[T any](v []T) (*string, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

// errorJSON encodes one attempt error.
func errorJSON(e *store.AttemptError) (*string, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode attempt error: %w", err)
	}
	s := string(b)
	return &s, nil
}

// collectJobsWithSteps reads every row of rows: jobCols and stepsCol.
func collectJobsWithSteps(rows pgx.Rows, err error) ([]*store.JobRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []*store.JobRow
	for rows.Next() {
		var stepsJSON []byte
		j, err := scanJob(scanPlus{rows, &stepsJSON})
		if err != nil {
			return nil, err
		}
		if err := decodeSteps(j, stepsJSON); err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}
