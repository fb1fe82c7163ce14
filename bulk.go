package sortie

import (
	"cmp"
	"context"
	"slices"

	"github.com/sortiehq/sortie/store"
)

// BulkAction is what JobsBulk does to each job it matches.
type BulkAction string

// The bulk actions: JobRetry, JobCancel and JobDelete on each job.
const (
	BulkRetry  BulkAction = "retry"
	BulkCancel BulkAction = "cancel"
	BulkDelete BulkAction = "delete"
)

// BulkOpts bound a JobsBulk call.
type BulkOpts struct {
	// Max is the most jobs to act on in this call; 0 means every match.
	// A call that stops at Max returns the cursor to continue from.
	Max int
	// After continues a previous call: its BulkResult.Next.
	After int64
	// Progress, when set, is called after each batch with the jobs acted
	// on so far.
	Progress func(done int)
}

// BulkResult is what JobsBulk did.
type BulkResult struct {
	// Changed counts the jobs the action applied to.
	Changed int
	// Failed are the jobs it could not act on (a running job cannot be
	// deleted; a job deleted meanwhile is not found), in ID order.
	Failed []BulkFailure
	// Next is the cursor to pass as BulkOpts.After to go on, when the call
	// stopped at BulkOpts.Max; 0 when every match was visited.
	Next int64
}

// BulkFailure is one job a bulk action could not act on.
type BulkFailure struct {
	ID  int64
	Err error
}

// bulkPage is how many jobs JobsBulk reads and acts on at a time: one
// page of the search, one store call.
const bulkPage = 500

// JobsBulk applies action to every job filter matches (a JobSearch: the
// indexed filters and the searched ones; its Cursor, Desc and Limit are
// ignored), newest first, in batches of 500: each batch is one page of the
// search and one store call (store.Store.JobActMany: one transaction on
// SQLite and PostgreSQL), which acts on every job of the batch as JobRetry,
// JobCancel or JobDelete would, while the next page is read. It never
// holds more than two pages, and it is not one transaction, so a job that
// moved on since its page was read is acted on as it is then. Jobs
// enqueued after the call started are left alone. It returns what it did
// with the first error that stopped it (a store that is down), if any; the
// batches done until then stay done.
func (c *Client) JobsBulk(ctx context.Context, action BulkAction, filter *JobSearch, opts *BulkOpts) (*BulkResult, error) {
	if err := action.check(); err != nil {
		return nil, err
	}
	var o BulkOpts
	if opts != nil {
		o = *opts
	}
	if o.Max < 0 {
		return nil, invalidf("BulkOpts.Max must not be negative, got %d", o.Max)
	}
	var page JobSearch
	if filter != nil {
		page = *filter
	}
	page.Desc, page.Limit, page.Cursor = true, bulkPage, o.After
	if o.Max > 0 {
		page.Limit = min(bulkPage, o.Max)
	}
	res := &BulkResult{}
	defer res.sortFailed()
	seen := 0
	next := c.searchAsync(ctx, page)
	for {
		list, err := next.wait()
		if err != nil {
			return res, err
		}
		seen += len(list.Jobs)
		more := list.NextCursor != 0 && (o.Max == 0 || seen < o.Max)
		if more {
			// A batch changes its own jobs and, through dependencies, jobs
			// enqueued after them, whose higher IDs were passed already: the
			// next page lists the same jobs while the batch runs as after.
			page.Cursor = list.NextCursor
			if o.Max > 0 {
				page.Limit = min(bulkPage, o.Max-seen)
			}
			next = c.searchAsync(ctx, page)
		}
		ids := make([]int64, len(list.Jobs))
		for i, j := range list.Jobs {
			ids[i] = j.ID
		}
		if err := c.bulkBatch(ctx, action, ids, res); err != nil {
			if more {
				_, _ = next.wait()
			}
			return res, err
		}
		if o.Progress != nil {
			o.Progress(res.Changed)
		}
		if !more {
			res.Next = list.NextCursor // not 0 only when stopped at Max
			return res, ctx.Err()
		}
	}
}

// asyncSearch is a JobSearch running in a goroutine of its own.
type asyncSearch struct {
	done chan struct{}
	list *JobSearchResult
	err  error
}

// searchAsync starts JobSearch(ctx, &s); the caller must wait for it.
func (c *Client) searchAsync(ctx context.Context, s JobSearch) *asyncSearch {
	a := &asyncSearch{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.list, a.err = c.JobSearch(ctx, &s)
	}()
	return a
}

// wait returns the search's result once it has one.
func (a *asyncSearch) wait() (*JobSearchResult, error) {
	<-a.done
	return a.list, a.err
}

// bulkBatch applies action to the jobs ids in one store call, adding to
// res: each job acted on counts in Changed, each refused one goes to
// Failed with the error the single call would have returned, in ID order.
func (c *Client) bulkBatch(ctx context.Context, action BulkAction, ids []int64, res *BulkResult) error {
	if len(ids) == 0 {
		return nil
	}
	results, err := c.store.JobActMany(ctx, &store.JobActManyParams{Action: store.JobAction(action), IDs: ids, Now: c.clock.Now()})
	if err != nil {
		return err
	}
	for i, r := range results {
		if r.Err != nil {
			res.Failed = append(res.Failed, BulkFailure{ID: ids[i], Err: jobError(string(action), ids[i], r.Err)})
		} else {
			res.Changed++
		}
	}
	return nil
}

// sortFailed puts r.Failed in ID order.
func (r *BulkResult) sortFailed() {
	slices.SortFunc(r.Failed, func(a, b BulkFailure) int { return cmp.Compare(a.ID, b.ID) })
}

// check returns an error unless a is one of the bulk actions.
func (a BulkAction) check() error {
	switch a {
	case BulkRetry, BulkCancel, BulkDelete:
		return nil
	}
	return invalidf("bulk action %q is not retry, cancel or delete", a)
}

// JobsBulkIDs applies action to the jobs ids (at most 1,000) in one store
// call, as JobsBulk does to a batch: what the dashboard does to the rows
// ticked on a page.
func (c *Client) JobsBulkIDs(ctx context.Context, action BulkAction, ids []int64) (*BulkResult, error) {
	if err := action.check(); err != nil {
		return nil, err
	}
	if len(ids) > store.MaxActMany {
		return nil, invalidf("JobsBulkIDs takes at most %d IDs, got %d", store.MaxActMany, len(ids))
	}
	res := &BulkResult{}
	err := c.bulkBatch(ctx, action, ids, res)
	res.sortFailed()
	return res, err
}
