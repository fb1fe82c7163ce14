package sqlitestore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/steps"
)

// micros encodes a time as integer microseconds since the Unix epoch.
func micros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros decodes micros.
func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

// fromNullMicros decodes a time that may be NULL (the zero time).
func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// bytesArg binds bytes so they read back exactly: nil as NULL, empty as empty text
// (a zero-length blob would read back as nil).
func bytesArg(b []byte) any {
	if b == nil {
		return nil
	}
	if len(b) == 0 {
		return ""
	}
	return b
}

// nullString binds "" as NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// tagsArg encodes tags as a JSON array: nil as NULL.
func tagsArg(tags []string) (any, error) {
	if tags == nil {
		return nil, nil
	}
	b, err := json.Marshal(tags)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// errorArg encodes one attempt error as JSON text, for json_insert.
func errorArg(e *store.AttemptError) (any, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode attempt error: %w", err)
	}
	return string(b), nil
}

// appendIDs appends ids to buf as a JSON array, for json_each.
func appendIDs(buf []byte, ids []int64) []byte {
	buf = append(buf, '[')
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, id, 10)
	}
	return append(buf, ']')
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// decodeDeps decodes the depends_on column of job id (NULL: none).
func decodeDeps(id int64, v sql.NullString) ([]int64, error) {
	if !v.Valid {
		return nil, nil
	}
	var deps []int64
	if err := json.Unmarshal([]byte(v.String), &deps); err != nil {
		return nil, fmt.Errorf("job %d: decode depends_on: %w", id, err)
	}
	return deps, nil
}

// scanJob reads one row of pendingColumns or finishedColumns.
func scanJob(s scanner) (*store.JobRow, error) {
	var (
		j                                          store.JobRow
		state                                      string
		runAt, createdAt, timeout                  int64
		attemptedAt, finalizedAt, leaseUntil       sql.NullInt64
		attemptedBy, uniqueKey, errorsJSON, tagsJS sql.NullString
		partitionKey, dependsOn                    sql.NullString
		spawnStep, waitsFor                        sql.NullString
		workflowID, cancelledBy, parentID          sql.NullInt64
	)
	err := s.Scan(&j.ID, &j.Kind, &j.Queue, &j.Args, &state, &j.Priority, &j.Attempt, &j.MaxAttempts,
		&runAt, &createdAt, &attemptedAt, &attemptedBy, &finalizedAt, &leaseUntil, &j.ClaimToken,
		&uniqueKey, &errorsJSON, &tagsJS, &j.Meta, &timeout,
		&partitionKey, &j.Result, &j.Progress, &j.CancelRequested, &workflowID, &dependsOn, &j.IgnoreDepFailure,
		&parentID, &spawnStep, &j.CancelWithParent, &waitsFor, &cancelledBy)
	if err != nil {
		return nil, err
	}
	j.State = store.JobState(state)
	j.RunAt = fromMicros(runAt)
	j.CreatedAt = fromMicros(createdAt)
	j.AttemptedAt = fromNullMicros(attemptedAt)
	j.AttemptedBy = attemptedBy.String
	j.FinalizedAt = fromNullMicros(finalizedAt)
	j.LeaseUntil = fromNullMicros(leaseUntil)
	j.UniqueKey = uniqueKey.String
	j.Timeout = time.Duration(timeout)
	j.PartitionKey = partitionKey.String
	j.WorkflowID = workflowID.Int64
	j.ParentID, j.SpawnStep = parentID.Int64, spawnStep.String
	j.WaitsFor = steps.WaitsFor(j.State, waitsFor.String)
	if j.State == store.JobStateCancelled {
		j.CancelledBy = cancelledBy.Int64
	}
	if j.DependsOn, err = decodeDeps(j.ID, dependsOn); err != nil {
		return nil, err
	}
	if errorsJSON.Valid {
		if err := json.Unmarshal([]byte(errorsJSON.String), &j.Errors); err != nil {
			return nil, fmt.Errorf("job %d: decode errors: %w", j.ID, err)
		}
	}
	if tagsJS.Valid {
		if err := json.Unmarshal([]byte(tagsJS.String), &j.Tags); err != nil {
			return nil, fmt.Errorf("job %d: decode tags: %w", j.ID, err)
		}
	}
	return &j, nil
}

// scanJobs reads all rows of pendingColumns or finishedColumns and closes
// rows.
func scanJobs(rows *sql.Rows, jobs []*store.JobRow) ([]*store.JobRow, error) {
	defer rows.Close()
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return jobs, nil
}
