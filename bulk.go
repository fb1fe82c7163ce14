package sortie

import (
	"cmp"
	"context"
	"slices"
	"sync"
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

// Bulk batches: the page of IDs read at a time, and how many of them are
// acted on at once.
const (
	bulkPage        = 500
	bulkConcurrency = 16
)

// JobsBulk applies action to every job filter matches (a JobSearch: the
// indexed filters and the searched ones; its Cursor, Desc and Limit are
// ignored), newest first, in batches of 500 with 16 store calls at a time: it never holds more than a batch, and it is not
// one transaction, so a job that moved on meanwhile is acted on as it is
// then. Jobs enqueued after the call started are left alone. It returns
// what it did with the first error that stopped it (a store that is down),
// if any; the jobs changed until then stay changed.
func (c *Client) JobsBulk(ctx context.Context, action BulkAction, filter *JobSearch, opts *BulkOpts) (*BulkResult, error) {
	act, err := bulkFunc(action)
	if err != nil {
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
	res := &BulkResult{}
	seen := 0
	for {
		if o.Max > 0 {
			page.Limit = min(bulkPage, o.Max-seen)
		}
		list, err := c.JobSearch(ctx, &page)
		if err != nil {
			return res, err
		}
		c.bulkBatch(ctx, act, list.Jobs, res)
		seen += len(list.Jobs)
		if o.Progress != nil {
			o.Progress(res.Changed)
		}
		if list.NextCursor == 0 {
			res.Next = 0
			break
		}
		page.Cursor = list.NextCursor
		if o.Max > 0 && seen >= o.Max {
			res.Next = list.NextCursor
			break
		}
	}
	slices.SortFunc(res.Failed, func(a, b BulkFailure) int { return cmp.Compare(a.ID, b.ID) })
	return res, ctx.Err()
}

// bulkBatch acts on jobs, bulkConcurrency at a time, adding to res.
func (c *Client) bulkBatch(ctx context.Context, act func(*Client, context.Context, int64) (*JobRow, error), jobs []*JobRow, res *BulkResult) {
	ids := make(chan int64)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for range bulkConcurrency {
		wg.Go(func() {
			for id := range ids {
				_, err := act(c, ctx, id)
				mu.Lock()
				if err != nil {
					res.Failed = append(res.Failed, BulkFailure{ID: id, Err: err})
				} else {
					res.Changed++
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		ids <- j.ID
	}
	close(ids)
	wg.Wait()
}

// bulkFunc returns the Client method of action.
func bulkFunc(action BulkAction) (func(*Client, context.Context, int64) (*JobRow, error), error) {
	switch action {
	case BulkRetry:
		return (*Client).JobRetry, nil
	case BulkCancel:
		return (*Client).JobCancel, nil
	case BulkDelete:
		return (*Client).JobDelete, nil
	}
	return nil, invalidf("bulk action %q is not retry, cancel or delete", action)
}

// JobsBulkIDs applies action to the jobs ids, 16 store calls at a time (at
// most 1,000 IDs): what the dashboard does to the rows ticked on a page.
func (c *Client) JobsBulkIDs(ctx context.Context, action BulkAction, ids []int64) (*BulkResult, error) {
	act, err := bulkFunc(action)
	if err != nil {
		return nil, err
	}
	if len(ids) > 1000 {
		return nil, invalidf("JobsBulkIDs takes at most 1000 IDs, got %d", len(ids))
	}
	jobs := make([]*JobRow, len(ids))
	for i, id := range ids {
		jobs[i] = &JobRow{ID: id}
	}
	res := &BulkResult{}
	c.bulkBatch(ctx, act, jobs, res)
	slices.SortFunc(res.Failed, func(a, b BulkFailure) int { return cmp.Compare(a.ID, b.ID) })
	return res, ctx.Err()
}
