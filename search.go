package sortie

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// JobSearch finds jobs by what the store indexes (queue, state, kind,
// workflow: JobListParams) and by what it does not, each checked on the
// jobs the indexed part lists: a tag, a unique key, a text in the last
// error, values inside the args, a creation time range. The unindexed part
// is a scan, capped at ScanMax jobs a call: a search that reaches the cap
// says so (Capped) and returns the cursor to go on from.
type JobSearch struct {
	JobListParams
	// Tag must be one of the job's tags.
	Tag string
	// UniqueKey must be the job's unique key.
	UniqueKey string
	// ErrorContains must occur in the message of the job's last error,
	// ignoring case.
	ErrorContains string
	// Args must all hold: the value at a path of the job's args.
	Args []ArgsMatch
	// CreatedAfter and CreatedBefore bound CreatedAt (inclusive, exclusive);
	// zero leaves that side open.
	CreatedAfter, CreatedBefore time.Time
	// ScanMax caps the jobs looked at in one call. Defaults to 10,000; at
	// most 100,000.
	ScanMax int
}

// ArgsMatch says that the value at Path in a job's args equals Value.
type ArgsMatch struct {
	// Path is a dot-separated path of object keys and array indexes:
	// "user.id", "items.0.sku".
	Path string
	// Value is JSON ("42", "true", "\"x\"", "null", an object) or, when it
	// is not valid JSON, a string ("ada@example.com").
	Value string
}

// ParseArgsMatch reads "PATH=VALUE".
func ParseArgsMatch(s string) (ArgsMatch, error) {
	path, value, ok := strings.Cut(s, "=")
	if !ok || path == "" {
		return ArgsMatch{}, fmt.Errorf("%q is not PATH=VALUE (user.id=42)", s)
	}
	for part := range strings.SplitSeq(path, ".") {
		if part == "" {
			return ArgsMatch{}, fmt.Errorf("path %q has an empty part", path)
		}
	}
	return ArgsMatch{Path: path, Value: value}, nil
}

// JobSearchResult is one call's matches.
type JobSearchResult struct {
	// Jobs are the matches, in the listing's order.
	Jobs []*JobRow
	// NextCursor continues the search (JobSearch.Cursor); 0 when every
	// job was looked at.
	NextCursor int64
	// Scanned counts the jobs looked at; Capped says the call stopped at
	// ScanMax before finding Limit matches.
	Scanned int
	Capped  bool
}

// Search defaults and bounds.
const (
	defaultScanMax = 10_000
	maxScanMax     = 100_000
	searchPage     = 500
)

// JobSearch returns up to s.Limit jobs matching s (see JobSearch), looking
// at most at s.ScanMax jobs.
func (c *Client) JobSearch(ctx context.Context, s *JobSearch) (*JobSearchResult, error) {
	q, m, err := s.compile()
	if err != nil {
		return nil, err
	}
	res := &JobSearchResult{}
	page := q.JobListParams
	if m.everything() {
		// Only indexed filters: one page, as JobList.
		page.Limit = q.Limit
		list, err := c.JobList(ctx, &page)
		if err != nil {
			return nil, err
		}
		return &JobSearchResult{Jobs: list.Jobs, NextCursor: list.NextCursor, Scanned: len(list.Jobs)}, nil
	}
	for {
		page.Limit = min(searchPage, q.ScanMax-res.Scanned)
		list, err := c.JobList(ctx, &page)
		if err != nil {
			return nil, err
		}
		for i, j := range list.Jobs {
			res.Scanned++
			if m.matches(j) {
				res.Jobs = append(res.Jobs, j)
				if len(res.Jobs) == q.Limit {
					if i < len(list.Jobs)-1 || list.NextCursor != 0 {
						res.NextCursor = j.ID
					}
					return res, nil
				}
			}
		}
		if list.NextCursor == 0 {
			return res, nil
		}
		page.Cursor = list.NextCursor
		if res.Scanned >= q.ScanMax {
			res.NextCursor, res.Capped = list.NextCursor, true
			return res, nil
		}
	}
}

// matcher checks the unindexed part of a search.
type matcher struct {
	tag, unique, errText string
	args                 []argsWant
	after, before        time.Time
}

type argsWant struct {
	path []string
	want any // decoded, numbers as json.Number
}

// compile checks s, fills in its defaults and returns its matcher.
func (s *JobSearch) compile() (*JobSearch, *matcher, error) {
	if s == nil {
		s = &JobSearch{}
	}
	q := *s
	if q.Limit == 0 {
		q.Limit = 100
	}
	if q.Limit < 0 || q.Limit > 1000 {
		return nil, nil, invalidf("JobSearch.Limit must be 1 to 1000, got %d", q.Limit)
	}
	if q.ScanMax == 0 {
		q.ScanMax = defaultScanMax
	}
	if q.ScanMax < 1 || q.ScanMax > maxScanMax {
		return nil, nil, invalidf("JobSearch.ScanMax must be 1 to %d, got %d", maxScanMax, q.ScanMax)
	}
	if !q.CreatedAfter.IsZero() && !q.CreatedBefore.IsZero() && !q.CreatedBefore.After(q.CreatedAfter) {
		return nil, nil, invalidf("JobSearch.CreatedBefore (%s) must be after CreatedAfter (%s)", q.CreatedBefore, q.CreatedAfter)
	}
	m := &matcher{tag: q.Tag, unique: q.UniqueKey, errText: strings.ToLower(q.ErrorContains), after: q.CreatedAfter, before: q.CreatedBefore}
	for _, a := range q.Args {
		want, err := canonicalValue(a.Value)
		if err != nil {
			return nil, nil, invalidf("JobSearch.Args %s: %v", a.Path, err)
		}
		m.args = append(m.args, argsWant{path: strings.Split(a.Path, "."), want: want})
	}
	return &q, m, nil
}

// canonicalValue is v decoded: v as JSON when it is JSON, else v as a
// string.
func canonicalValue(v string) (any, error) {
	if !json.Valid([]byte(v)) {
		return v, nil
	}
	var x any
	d := json.NewDecoder(strings.NewReader(v))
	d.UseNumber()
	if err := d.Decode(&x); err != nil {
		return nil, err
	}
	return x, nil
}

// everything reports whether m matches every job.
func (m *matcher) everything() bool {
	return m.tag == "" && m.unique == "" && m.errText == "" && len(m.args) == 0 && m.after.IsZero() && m.before.IsZero()
}

func (m *matcher) matches(j *JobRow) bool {
	switch {
	case m.tag != "" && !slices.Contains(j.Tags, m.tag),
		m.unique != "" && j.UniqueKey != m.unique,
		!m.after.IsZero() && j.CreatedAt.Before(m.after),
		!m.before.IsZero() && !j.CreatedAt.Before(m.before):
		return false
	}
	if m.errText != "" {
		if len(j.Errors) == 0 || !strings.Contains(strings.ToLower(j.Errors[len(j.Errors)-1].Message), m.errText) {
			return false
		}
	}
	for _, a := range m.args {
		raw, ok := rawLookup(j.Args, a.path)
		if !ok || !matchRaw(raw, a.want) {
			return false
		}
	}
	return true
}
