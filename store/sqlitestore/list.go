package sqlitestore

import (
	"context"
	"fmt"
	"strings"

	"github.com/sortiehq/sortie/store"
)

// JobList returns up to p.Limit jobs matching the filters, ordered by ID,
// from both the pending and the finished table. p.Limit must be at least 1.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	if p.Limit < 1 {
		return nil, fmt.Errorf("sqlitestore: list jobs: JobListParams.Limit must be at least 1, got %d", p.Limit)
	}
	if p.State != "" && !p.State.Valid() {
		_, err := store.ParseJobState(string(p.State))
		return nil, fmt.Errorf("sqlitestore: list jobs: %w", err)
	}
	rows, err := s.rdb.QueryContext(ctx, listSQL(p), p.Queue, string(p.State), p.Kind, p.AfterID, p.Limit)
	if err != nil {
		return nil, s.readErr("list jobs", err)
	}
	jobs, err := scanJobs(rows, nil)
	if err != nil {
		return nil, s.readErr("list jobs", err)
	}
	return jobs, nil
}

// listSQL returns the query for the filters of p, with parameters ?1 queue,
// ?2 state, ?3 kind, ?4 cursor and ?5 limit. Listing is not on the hot path;
// the query is built per call so each filter can use the tables' indexes.
func listSQL(p *store.JobListParams) string {
	var where []string
	if p.Queue != "" {
		where = append(where, "queue = ?1")
	}
	if p.State != "" {
		where = append(where, "state = ?2")
	}
	if p.Kind != "" {
		where = append(where, "kind = ?3")
	}
	order := "id"
	if p.AfterID != 0 {
		if p.Desc {
			where = append(where, "id < ?4")
		} else {
			where = append(where, "id > ?4")
		}
	}
	if p.Desc {
		order = "id DESC"
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	var tables []string
	switch {
	case p.State == "":
		tables = []string{"jobs", "finished_jobs"}
	case p.State.Finished():
		tables = []string{"finished_jobs"}
	default:
		tables = []string{"jobs"}
	}
	var b strings.Builder
	for i, t := range tables {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("SELECT " + jobColumns + " FROM " + t + cond)
	}
	b.WriteString(" ORDER BY " + order + " LIMIT ?5")
	return b.String()
}
