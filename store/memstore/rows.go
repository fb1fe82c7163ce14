package memstore

import (
	"bytes"
	"slices"

	"github.com/sortiehq/sortie/store"
)

// The byte and slice fields of a stored row (Args, Meta, Tags, Errors,
// Result, DependsOn) are
// never written after the store made them: a new error replaces Errors with
// a longer copy. So a shallow copy of a row taken under the lock can be made
// deep after the lock is released, and callers never share memory with the
// store in either direction.

// cloneIn copies the caller's slices of a new job into r.
func cloneIn(r *store.JobRow, nj *store.NewJob) {
	r.Args = bytes.Clone(nj.Args)
	r.Meta = bytes.Clone(nj.Meta)
	r.Tags = slices.Clone(nj.Tags)
}

// deepen gives each row in rows its own copies of its slices, made from a
// few shared allocations (capped, so appending to one never reaches
// another), and returns pointers to the rows.
func deepen(rows []store.JobRow) []*store.JobRow {
	var nb, nt, ne, nd int
	for i := range rows {
		r := &rows[i]
		nb += len(r.Args) + len(r.Meta) + len(r.Result)
		nt += len(r.Tags)
		ne += len(r.Errors)
		nd += len(r.DependsOn)
	}
	var (
		buf  []byte
		tags []string
		errs []store.AttemptError
		deps []int64
	)
	if nb > 0 {
		buf = make([]byte, 0, nb)
	}
	if nt > 0 {
		tags = make([]string, 0, nt)
	}
	if ne > 0 {
		errs = make([]store.AttemptError, 0, ne)
	}
	if nd > 0 {
		deps = make([]int64, 0, nd)
	}
	out := make([]*store.JobRow, len(rows))
	for i := range rows {
		r := &rows[i]
		r.Args, buf = carve(buf, r.Args)
		r.Meta, buf = carve(buf, r.Meta)
		r.Tags, tags = carve(tags, r.Tags)
		r.Errors, errs = carve(errs, r.Errors)
		r.Result, buf = carve(buf, r.Result)
		r.DependsOn, deps = carve(deps, r.DependsOn)
		out[i] = r
	}
	return out
}

// carve appends src to buf and returns the appended part, capped, and buf.
// A nil src stays nil and an empty one stays empty but not nil.
func carve[T any](buf, src []T) ([]T, []T) {
	if src == nil {
		return nil, buf
	}
	if len(src) == 0 {
		return []T{}, buf
	}
	n := len(buf)
	buf = append(buf, src...)
	return buf[n:len(buf):len(buf)], buf
}

// deepenOne returns a deep copy of r.
func deepenOne(r store.JobRow) *store.JobRow {
	r.Args = bytes.Clone(r.Args)
	r.Meta = bytes.Clone(r.Meta)
	r.Tags = slices.Clone(r.Tags)
	r.Errors = slices.Clone(r.Errors)
	r.Result = bytes.Clone(r.Result)
	r.DependsOn = slices.Clone(r.DependsOn)
	return &r
}
