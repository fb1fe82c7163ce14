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
	if err := store.ValidateLimit("JobListParams", p.Limit); err != nil {
		return nil, err
	}
	if p.State != "" && !p.State.Valid() {
		_, err := store.ParseJobState(string(p.State))
		return nil, fmt.Errorf("sqlitestore: list jobs: %w", err)
	}
	rows, err := s.rdb.QueryContext(ctx, listSQL(p), p.Queue, string(p.State), p.Kind, p.AfterID, p.Limit, p.WorkflowID, p.ParentID)
	if err != nil {
		return nil, s.readErr("list jobs", err)
	}
	jobs, err := scanJobs(rows, nil)
	if err != nil {
		return nil, s.readErr("list jobs", err)
	}
	if err := withSteps(ctx, s.rdb, jobs); err != nil {
		return nil, s.readErr("list jobs", err)
	}
	return jobs, nil
}

// listSQL returns the query for the filters of p, with parameters ?1 queue,
// ?2 state, ?3 kind, ?4 cursor, ?5 limit, ?6 workflow and ?7 parent. Listing is not on the hot path;
// the query is built per call from the filters present.
//
// Pages are read in ID order. The filters are written "+column" so SQLite
// walks the rows in ID order and stops at the limit, instead of sorting every
// match found through an index (left to itself it picks jobs_fetch for a
// queue and state, and sorts half a million rows). The one exception is the
// state of finished jobs, which finished_jobs_list serves in ID order, so
// that a rare state (dead) is found without reading every completed job.
// A rare state among pending jobs is found by reading the pending table,
// which holds only the backlog.
func listSQL(p *store.JobListParams) string {
	var b strings.Builder
	table := func(name string, stateIndexed bool) {
		cols := pendingColumns
		if name == "finished_jobs" {
			cols = finishedColumns
		}
		b.WriteString("SELECT " + cols + " FROM " + name)
		sep := " WHERE "
		cond := func(c string) {
			b.WriteString(sep + c)
			sep = " AND "
		}
		if p.State != "" {
			if stateIndexed && p.WorkflowID == 0 && p.ParentID == 0 {
				cond("state = ?2")
			} else {
				cond("+state = ?2")
			}
		}
		if p.WorkflowID != 0 {
			// The workflow indexes hold a workflow's jobs in ID order.
			cond("workflow_id = ?6")
		}
		if p.ParentID != 0 {
			// So do the parent indexes a job's children.
			cond("parent_id = ?7")
		}
		if p.Queue != "" {
			cond("+queue = ?1")
		}
		if p.Kind != "" {
			cond("+kind = ?3")
		}
		if p.AfterID != 0 {
			if p.Desc {
				cond("id < ?4")
			} else {
				cond("id > ?4")
			}
		}
	}
	switch {
	case p.State == "":
		table("jobs", false)
		b.WriteString(" UNION ALL ")
		table("finished_jobs", false)
	case p.State.Finished():
		table("finished_jobs", true)
	default:
		table("jobs", false)
	}
	if p.Desc {
		b.WriteString(" ORDER BY id DESC LIMIT ?5")
	} else {
		b.WriteString(" ORDER BY id LIMIT ?5")
	}
	return b.String()
}
