// Package storefault wraps a store.Store to inject failures, so tests can
// show what the runtime does when its store is unreachable or slow.
package storefault

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sortiehq/sortie/store"
)

// ErrInjected is the error returned by a method told to fail.
var ErrInjected = errors.New("storefault: injected failure (store unreachable)")

// Store wraps a store; every method passes through unless told to fail.
type Store struct {
	inner store.Store

	mu    sync.Mutex
	fail  map[string]error // method name ("*" for all) → error to return
	calls map[string]int
	// called is closed and replaced at every call, waking WaitCalls.
	called chan struct{}
	// hang holds the methods whose calls block until Heal; healed is
	// closed by Heal to release them.
	hang   map[string]bool
	healed chan struct{}
	// delay holds how long calls of a method wait before going through.
	delay map[string]time.Duration
	// failed counts calls that returned an injected error.
	failed atomic.Int64
}

var _ store.Store = (*Store)(nil)

// New wraps inner.
func New(inner store.Store) *Store {
	return &Store{inner: inner, fail: map[string]error{}, calls: map[string]int{}, hang: map[string]bool{}, healed: make(chan struct{}), called: make(chan struct{}), delay: map[string]time.Duration{}}
}

// Fail makes method (a Store method name such as "JobFetch", or "*" for all)
// return err until Heal. A nil err means ErrInjected.
func (s *Store) Fail(method string, err error) {
	if err == nil {
		err = ErrInjected
	}
	s.mu.Lock()
	s.fail[method] = err
	s.mu.Unlock()
}

// Hang makes calls of method (or "*" for all) block until Heal, ignoring
// their context, as a store whose disk is full or whose server stopped
// answering may: the caller must not wait on them past its own deadline.
func (s *Store) Hang(method string) {
	s.mu.Lock()
	s.hang[method] = true
	s.mu.Unlock()
}

// Delay makes calls of method (or "*" for all) wait d before going through
// to the wrapped store, as a call waiting on a lock or a slow network does:
// its params (their Now) were made before the wait. Heal ends it.
func (s *Store) Delay(method string, d time.Duration) {
	s.mu.Lock()
	s.delay[method] = d
	s.mu.Unlock()
}

// Heal stops every injected failure and releases the hanging calls, which
// then go through.
func (s *Store) Heal() {
	s.mu.Lock()
	s.fail = map[string]error{}
	s.hang = map[string]bool{}
	s.delay = map[string]time.Duration{}
	close(s.healed)
	s.healed = make(chan struct{})
	s.mu.Unlock()
}

// Calls returns how many times method was called, failed or not.
func (s *Store) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// WaitCalls waits until method was called at least n times, failed or
// not (a hanging call counts once it started), and returns ctx's error if
// ctx ends first.
func (s *Store) WaitCalls(ctx context.Context, method string, n int) error {
	for {
		s.mu.Lock()
		got, called := s.calls[method], s.called
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-called:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Failed returns how many calls returned an injected error.
func (s *Store) Failed() int64 { return s.failed.Load() }

func (s *Store) check(method string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	close(s.called)
	s.called = make(chan struct{})
	for s.hang[method] || s.hang["*"] {
		healed := s.healed
		s.mu.Unlock()
		<-healed
		s.mu.Lock()
	}
	if d := max(s.delay[method], s.delay["*"]); d > 0 {
		s.mu.Unlock()
		time.Sleep(d)
		s.mu.Lock()
	}
	err := s.fail[method]
	if err == nil {
		err = s.fail["*"]
	}
	if err != nil {
		s.failed.Add(1)
	}
	return err
}

// JobActMany implements store.Store.
func (s *Store) JobActMany(ctx context.Context, p *store.JobActManyParams) ([]store.ActResult, error) {
	if err := s.check("JobActMany"); err != nil {
		return nil, err
	}
	return s.inner.JobActMany(ctx, p)
}

// JobCancel implements store.Store.
func (s *Store) JobCancel(ctx context.Context, p *store.JobCancelParams) (*store.JobRow, error) {
	if err := s.check("JobCancel"); err != nil {
		return nil, err
	}
	return s.inner.JobCancel(ctx, p)
}

// JobCounts implements store.Store.
func (s *Store) JobCounts(ctx context.Context, p *store.JobCountsParams) ([]store.QueueStateCount, error) {
	if err := s.check("JobCounts"); err != nil {
		return nil, err
	}
	return s.inner.JobCounts(ctx, p)
}

// JobDelete implements store.Store.
func (s *Store) JobDelete(ctx context.Context, p *store.JobDeleteParams) (*store.JobRow, error) {
	if err := s.check("JobDelete"); err != nil {
		return nil, err
	}
	return s.inner.JobDelete(ctx, p)
}

// JobEnqueueMany implements store.Store.
func (s *Store) JobEnqueueMany(ctx context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	if err := s.check("JobEnqueueMany"); err != nil {
		return nil, err
	}
	return s.inner.JobEnqueueMany(ctx, p)
}

// JobFetch implements store.Store.
func (s *Store) JobFetch(ctx context.Context, p *store.JobFetchParams) (*store.JobFetchResult, error) {
	if err := s.check("JobFetch"); err != nil {
		return nil, err
	}
	return s.inner.JobFetch(ctx, p)
}

// JobFinish implements store.Store.
func (s *Store) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	if err := s.check("JobFinish"); err != nil {
		return nil, err
	}
	return s.inner.JobFinish(ctx, p)
}

// JobGet implements store.Store.
func (s *Store) JobGet(ctx context.Context, p *store.JobGetParams) (*store.JobRow, error) {
	if err := s.check("JobGet"); err != nil {
		return nil, err
	}
	return s.inner.JobGet(ctx, p)
}

// JobHistory implements store.Store.
func (s *Store) JobHistory(ctx context.Context, p *store.JobHistoryParams) ([]store.HistoryRow, error) {
	if err := s.check("JobHistory"); err != nil {
		return nil, err
	}
	return s.inner.JobHistory(ctx, p)
}

// JobHistoryPrune implements store.Store.
func (s *Store) JobHistoryPrune(ctx context.Context, p *store.JobHistoryPruneParams) (int, error) {
	if err := s.check("JobHistoryPrune"); err != nil {
		return 0, err
	}
	return s.inner.JobHistoryPrune(ctx, p)
}

// JobList implements store.Store.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*store.JobRow, error) {
	if err := s.check("JobList"); err != nil {
		return nil, err
	}
	return s.inner.JobList(ctx, p)
}

// JobPrune implements store.Store.
func (s *Store) JobPrune(ctx context.Context, p *store.JobPruneParams) (int, error) {
	if err := s.check("JobPrune"); err != nil {
		return 0, err
	}
	return s.inner.JobPrune(ctx, p)
}

// JobRescue implements store.Store.
func (s *Store) JobRescue(ctx context.Context, p *store.JobRescueParams) (int, error) {
	if err := s.check("JobRescue"); err != nil {
		return 0, err
	}
	return s.inner.JobRescue(ctx, p)
}

// JobRetry implements store.Store.
func (s *Store) JobRetry(ctx context.Context, p *store.JobRetryParams) (*store.JobRow, error) {
	if err := s.check("JobRetry"); err != nil {
		return nil, err
	}
	return s.inner.JobRetry(ctx, p)
}

// JobImport implements store.Store.
func (s *Store) JobImport(ctx context.Context, p *store.JobImportParams) ([]store.ImportResult, error) {
	if err := s.check("JobImport"); err != nil {
		return nil, err
	}
	return s.inner.JobImport(ctx, p)
}

// JobWait implements store.Store.
func (s *Store) JobWait(ctx context.Context, p *store.JobWaitParams) (*store.JobRow, error) {
	if err := s.check("JobWait"); err != nil {
		return nil, err
	}
	return s.inner.JobWait(ctx, p)
}

// PeriodicAdvance implements store.Store.
func (s *Store) PeriodicAdvance(ctx context.Context, p *store.PeriodicAdvanceParams) (*store.PeriodicAdvanceResult, error) {
	if err := s.check("PeriodicAdvance"); err != nil {
		return nil, err
	}
	return s.inner.PeriodicAdvance(ctx, p)
}

// PeriodicList implements store.Store.
func (s *Store) PeriodicList(ctx context.Context, p *store.PeriodicListParams) ([]store.PeriodicRow, error) {
	if err := s.check("PeriodicList"); err != nil {
		return nil, err
	}
	return s.inner.PeriodicList(ctx, p)
}

// QueueConfigure implements store.Store.
func (s *Store) QueueConfigure(ctx context.Context, p *store.QueueConfigureParams) (*store.QueueRow, error) {
	if err := s.check("QueueConfigure"); err != nil {
		return nil, err
	}
	return s.inner.QueueConfigure(ctx, p)
}

// QueueDelete implements store.Store.
func (s *Store) QueueDelete(ctx context.Context, p *store.QueueDeleteParams) error {
	if err := s.check("QueueDelete"); err != nil {
		return err
	}
	return s.inner.QueueDelete(ctx, p)
}

// QueueGet implements store.Store.
func (s *Store) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.QueueRow, error) {
	if err := s.check("QueueGet"); err != nil {
		return nil, err
	}
	return s.inner.QueueGet(ctx, p)
}

// QueueLatency implements store.Store.
func (s *Store) QueueLatency(ctx context.Context, p *store.QueueLatencyParams) ([]store.QueueLatencyRow, error) {
	if err := s.check("QueueLatency"); err != nil {
		return nil, err
	}
	return s.inner.QueueLatency(ctx, p)
}

// QueueList implements store.Store.
func (s *Store) QueueList(ctx context.Context, p *store.QueueListParams) ([]*store.QueueRow, error) {
	if err := s.check("QueueList"); err != nil {
		return nil, err
	}
	return s.inner.QueueList(ctx, p)
}

// QueuePause implements store.Store.
func (s *Store) QueuePause(ctx context.Context, p *store.QueuePauseParams) (*store.QueueRow, error) {
	if err := s.check("QueuePause"); err != nil {
		return nil, err
	}
	return s.inner.QueuePause(ctx, p)
}

// LeaseExtend implements store.Store.
func (s *Store) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	if err := s.check("LeaseExtend"); err != nil {
		return nil, err
	}
	return s.inner.LeaseExtend(ctx, p)
}

// QueueWatch implements store.Store.
func (s *Store) QueueWatch(ctx context.Context, p *store.QueueWatchParams) (*store.Watch, error) {
	if err := s.check("QueueWatch"); err != nil {
		return nil, err
	}
	return s.inner.QueueWatch(ctx, p)
}

// ProcessBeat implements store.Store.
func (s *Store) ProcessBeat(ctx context.Context, p *store.ProcessBeatParams) (*store.ProcessRow, error) {
	if err := s.check("ProcessBeat"); err != nil {
		return nil, err
	}
	return s.inner.ProcessBeat(ctx, p)
}

// ProcessCommand implements store.Store.
func (s *Store) ProcessCommand(ctx context.Context, p *store.ProcessCommandParams) (*store.ProcessRow, error) {
	if err := s.check("ProcessCommand"); err != nil {
		return nil, err
	}
	return s.inner.ProcessCommand(ctx, p)
}

// ProcessDelete implements store.Store.
func (s *Store) ProcessDelete(ctx context.Context, p *store.ProcessDeleteParams) error {
	if err := s.check("ProcessDelete"); err != nil {
		return err
	}
	return s.inner.ProcessDelete(ctx, p)
}

// ProcessList implements store.Store.
func (s *Store) ProcessList(ctx context.Context, p *store.ProcessListParams) ([]*store.ProcessRow, error) {
	if err := s.check("ProcessList"); err != nil {
		return nil, err
	}
	return s.inner.ProcessList(ctx, p)
}

// StepAwait implements store.Store.
func (s *Store) StepAwait(ctx context.Context, p *store.StepAwaitParams) (*store.StepResult, error) {
	if err := s.check("StepAwait"); err != nil {
		return nil, err
	}
	return s.inner.StepAwait(ctx, p)
}

// StepList implements store.Store.
func (s *Store) StepList(ctx context.Context, p *store.StepListParams) ([]store.JobStep, error) {
	if err := s.check("StepList"); err != nil {
		return nil, err
	}
	return s.inner.StepList(ctx, p)
}

// StepRecord implements store.Store.
func (s *Store) StepRecord(ctx context.Context, p *store.StepRecordParams) ([]store.StepResult, error) {
	if err := s.check("StepRecord"); err != nil {
		return nil, err
	}
	return s.inner.StepRecord(ctx, p)
}

// StepSleep implements store.Store.
func (s *Store) StepSleep(ctx context.Context, p *store.StepSleepParams) (*store.StepResult, error) {
	if err := s.check("StepSleep"); err != nil {
		return nil, err
	}
	return s.inner.StepSleep(ctx, p)
}

// StepSpawn implements store.Store.
func (s *Store) StepSpawn(ctx context.Context, p *store.StepSpawnParams) (*store.StepResult, error) {
	if err := s.check("StepSpawn"); err != nil {
		return nil, err
	}
	return s.inner.StepSpawn(ctx, p)
}
