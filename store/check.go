package store

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// The ranges of a job's fields, the same on every store and every surface.
// ValidateJobs checks them in every store's JobEnqueueMany, so a value is
// stored exactly as given or refused with a *FieldError, never wrapped or
// truncated by a column type.
const (
	// MaxAttemptsDefault is a job's MaxAttempts when none is given.
	MaxAttemptsDefault = 25
	// MaxAttemptsLimit is the largest MaxAttempts a job may have: with the
	// default backoff, retries over decades.
	MaxAttemptsLimit = 1_000_000
	// MaxTimeout is the longest per-job Timeout.
	MaxTimeout = 366 * 24 * time.Hour
	// MaxUniqueKeyLen is the longest UniqueKey, in bytes.
	MaxUniqueKeyLen = 255
	// MaxPartitionKeyLen is the longest PartitionKey, in bytes.
	MaxPartitionKeyLen = 255
	// MaxTags is the most Tags a job may have.
	MaxTags = 16
	// MaxTagLen is the longest tag, in bytes.
	MaxTagLen = 64
	// MaxMetaBytes is the largest encoded Meta.
	MaxMetaBytes = 64 << 10
)

// The range of a job's RunAt (and of the due times outcomes set): wide
// enough for any schedule, narrow enough for every store's time type and for
// RFC 3339 text.
var (
	EarliestRunAt = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	LatestRunAt   = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// FieldError reports a job field that is out of its range. Field is the
// field's name as the HTTP API and the export format spell it
// (max_attempts, run_at); surfaces may name it in their own terms. It
// wraps ErrInvalidArgument.
type FieldError struct {
	// Field is the field's wire name.
	Field string
	// Problem says what is wrong, including the value given:
	// "must be between 1 and 4, got 9".
	Problem string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

// Unwrap returns ErrInvalidArgument.
func (e *FieldError) Unwrap() error { return ErrInvalidArgument }

func fieldErrorf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// ValidateJobs checks a batch for JobEnqueueMany and fills in the defaults
// of its zero fields (Priority 2, MaxAttempts 25), in place. Every store
// calls it before anything else. The error names the job (its index from 1,
// and its kind) and wraps a *FieldError or ErrInvalidArgument.
func ValidateJobs(jobs []*NewJob) error {
	for i, j := range jobs {
		if j == nil {
			return fmt.Errorf("job %d of %d is nil: %w", i+1, len(jobs), ErrInvalidArgument)
		}
		if err := j.validate(i); err != nil {
			if len(jobs) == 1 {
				return err
			}
			return fmt.Errorf("job %d of %d (kind %q): %w", i+1, len(jobs), j.Kind, err)
		}
	}
	return nil
}

// validate checks j, the job at index i of its batch, and fills in its
// defaults.
func (j *NewJob) validate(i int) error {
	if j.Priority == 0 {
		j.Priority = PriorityDefault
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = MaxAttemptsDefault
	}
	if err := ValidateKind(j.Kind); err != nil {
		return err
	}
	if err := ValidateQueueName(j.Queue); err != nil {
		return err
	}
	switch {
	case j.Priority < PriorityHighest || j.Priority > PriorityLowest:
		return fieldErrorf("priority", "must be between %d and %d, got %d", PriorityHighest, PriorityLowest, j.Priority)
	case j.MaxAttempts < 1 || j.MaxAttempts > MaxAttemptsLimit:
		return fieldErrorf("max_attempts", "must be between 1 and %d, got %d", MaxAttemptsLimit, j.MaxAttempts)
	case !j.RunAt.IsZero() && (j.RunAt.Before(EarliestRunAt) || j.RunAt.After(LatestRunAt)):
		return fieldErrorf("run_at", "must be between %s and %s, got %s", EarliestRunAt.Format(time.RFC3339), LatestRunAt.Format(time.RFC3339), j.RunAt.UTC().Format(time.RFC3339))
	case j.Timeout < 0 || j.Timeout > MaxTimeout:
		return fieldErrorf("timeout", "must be between 0 and %s, got %s", MaxTimeout, j.Timeout)
	}
	return j.validateLabels(i)
}

// validateLabels checks j's keys, tags, meta and dependencies.
func (j *NewJob) validateLabels(i int) error {
	switch {
	case len(j.UniqueKey) > MaxUniqueKeyLen:
		return fieldErrorf("unique_key", "must be at most %d bytes, got %d", MaxUniqueKeyLen, len(j.UniqueKey))
	case !utf8.ValidString(j.UniqueKey):
		return fieldErrorf("unique_key", "is not valid UTF-8")
	case len(j.PartitionKey) > MaxPartitionKeyLen:
		return fieldErrorf("partition_key", "must be at most %d bytes, got %d", MaxPartitionKeyLen, len(j.PartitionKey))
	case !utf8.ValidString(j.PartitionKey):
		return fieldErrorf("partition_key", "is not valid UTF-8")
	case len(j.Tags) > MaxTags:
		return fieldErrorf("tags", "must have at most %d tags, got %d", MaxTags, len(j.Tags))
	case len(j.Meta) > MaxMetaBytes:
		return fieldErrorf("meta", "must be at most %d bytes encoded, got %d", MaxMetaBytes, len(j.Meta))
	}
	for _, t := range j.Tags {
		if !utf8.ValidString(t) {
			return fieldErrorf("tags", "tag %q is not valid UTF-8", t)
		}
		if t == "" || len(t) > MaxTagLen {
			return fieldErrorf("tags", "must each be 1 to %d bytes of UTF-8, got %q", MaxTagLen, t)
		}
	}
	for _, id := range j.DependsOn {
		if id <= 0 {
			return fieldErrorf("depends_on", "must hold job IDs (at least 1), got %d", id)
		}
	}
	for _, x := range j.DependsOnIndex {
		if x < 0 || x >= i {
			return fieldErrorf("depends_on_index", "must name an earlier job of the batch (0 to %d), got %d", i-1, x)
		}
	}
	return nil
}

// ValidateLimit checks the Limit of a call's params, named by params (as
// "JobFetchParams"): it must be at least 1. Every store checks it first,
// so a call with no room does nothing the same way on each.
func ValidateLimit(params string, limit int) error {
	if limit < 1 {
		return fieldErrorf(params+".Limit", "must be at least 1, got %d", limit)
	}
	return nil
}

// MaxNameLen is the longest kind or queue name, in bytes.
const MaxNameLen = 128

// ValidateKind checks a kind name: 1 to MaxNameLen bytes of printable
// UTF-8, no spaces. The error is a *FieldError of field "kind".
func ValidateKind(kind string) error {
	switch {
	case kind == "":
		return fieldErrorf("kind", "is empty")
	case len(kind) > MaxNameLen:
		return fieldErrorf("kind", "%q is longer than %d bytes", kind[:32]+"...", MaxNameLen)
	case !utf8.ValidString(kind):
		return fieldErrorf("kind", "%q is not valid UTF-8", kind)
	}
	for _, r := range kind {
		if r <= ' ' || r == 0x7f {
			return fieldErrorf("kind", "%q contains a space or control character", kind)
		}
	}
	return nil
}

// ValidateQueueName checks a queue name: 1 to MaxNameLen of a-z A-Z 0-9
// _ - . : (names that are safe in keys, URLs and metric labels). The
// error is a *FieldError of field "queue" whose text starts "queue name".
func ValidateQueueName(q string) error {
	switch {
	case q == "":
		return fieldErrorf("queue", "name is empty")
	case len(q) > MaxNameLen:
		return fieldErrorf("queue", "name is longer than %d bytes", MaxNameLen)
	}
	for _, r := range q {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.', r == ':':
		default:
			return fieldErrorf("queue", "name %q may only contain letters, digits, '_', '-', '.' and ':'", q)
		}
	}
	return nil
}
