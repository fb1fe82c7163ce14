package sortie_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// txRaceStore is a memstore whose transactions commit at once (so
// CompleteTx finishes the job there and then), and which can hold the next
// lease extension until released.
type txRaceStore struct {
	*memstore.Store
	mu      sync.Mutex
	hold    chan struct{}
	waiting chan struct{}
}

// raceTx is a txRaceStore's transaction: its writes are the store's own.
type raceTx struct{ s *txRaceStore }

func (t raceTx) Store() store.Store { return t.s }

func (t raceTx) JobEnqueueMany(ctx context.Context, p *store.JobEnqueueManyParams) ([]store.EnqueueResult, error) {
	return t.s.JobEnqueueMany(ctx, p)
}

func (t raceTx) JobFinish(ctx context.Context, p *store.JobFinishParams) ([]store.ReportResult, error) {
	return t.s.JobFinish(ctx, p)
}

// holdNextExtension makes the next LeaseExtend wait for release, and
// returns a channel closed once it waits.
func (s *txRaceStore) holdNextExtension() (waiting <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.waiting = make(chan struct{}), make(chan struct{})
	hold := s.hold
	return s.waiting, sync.OnceFunc(func() { close(hold) })
}

func (s *txRaceStore) LeaseExtend(ctx context.Context, p *store.LeaseExtendParams) ([]store.LeaseStatus, error) {
	s.mu.Lock()
	hold, waiting := s.hold, s.waiting
	s.hold, s.waiting = nil, nil
	s.mu.Unlock()
	if hold != nil {
		close(waiting)
		<-hold
	}
	return s.Store.LeaseExtend(ctx, p)
}

// A heartbeat that was on its way when the handler's CompleteTx committed
// finds the job no longer running. That is the completion, not a lost
// lease: the handler, still finishing its own work, keeps its context, and
// nothing is logged as lost.
func TestHeartbeatRacingCompleteTx(t *testing.T) {
	t.Parallel()
	st := &txRaceStore{Store: memstore.New()}
	t.Cleanup(func() { _ = st.Close() })
	started, complete, completed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	cancelled := make(chan error, 1)
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error {
		close(started)
		<-complete
		if err := sortie.CompleteTx(ctx, raceTx{st}, job); err != nil {
			return err
		}
		close(completed)
		select {
		case <-ctx.Done():
			cancelled <- context.Cause(ctx)
		case <-time.After(300 * time.Millisecond):
			cancelled <- nil
		}
		return nil
	}), nil)
	logs := &logBuffer{}
	c := startClient(t, st, &sortie.Config{Workers: workers, Logger: logs.logger(), Lease: time.Second,
		HeartbeatInterval: 20 * time.Millisecond, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}})
	id := mustEnqueue(t, c, Msg{Text: "order"}, nil)
	<-started

	// A heartbeat takes the job, not yet completed, and waits on its way.
	waiting, release := st.holdNextExtension()
	defer release()
	select {
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat within 5s")
	}
	close(complete)
	<-completed
	release()

	if err := <-cancelled; err != nil {
		t.Errorf("the handler's context was cancelled after CompleteTx committed: %v", err)
	}
	if log := logs.String(); strings.Contains(log, "lease lost") {
		t.Errorf("log reports a lost lease for a job completed in a transaction:\n%s", log)
	}
	if row := mustGet(t, c, id); row.State != sortie.JobStateCompleted {
		t.Errorf("job is %s, want completed", row.State)
	}
}
