package sortie_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/memstore"
)

func TestNewClientRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }), &sortie.WorkerOpts{Queue: "mail"})
	tests := []struct {
		name string
		cfg  *sortie.Config
		want string
	}{
		{"zero max workers", &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"mail": {}}}, `Config.Queues["mail"].MaxWorkers must be at least 1, got 0`},
		{"bad queue name", &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"no spaces": {MaxWorkers: 1}}}, `queue name "no spaces" may only contain`},
		{"queues without workers", &sortie.Config{Queues: map[string]sortie.QueueConfig{"mail": {MaxWorkers: 1}}}, "Config.Workers must register at least one worker"},
		{"worker queue not served", &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"default": {MaxWorkers: 1}}}, `WorkerOpts.Queue of kind "msg" is "mail", which neither Config.Queues nor Config.Pools lists`},
		{"pool without queues", &sortie.Config{Workers: workers, Pools: map[string]sortie.PoolConfig{"p": {MaxWorkers: 1}}}, `Config.Pools["p"].Queues is empty`},
		{"pool weights", &sortie.Config{Workers: workers, Pools: map[string]sortie.PoolConfig{"p": {Queues: []string{"mail", "bulk"}, Order: sortie.PoolWeighted, Weights: []int{3}, MaxWorkers: 1}}}, `Config.Pools["p"].Weights has 1 weights for 2 queues`},
		{"queue in two places", &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"mail": {MaxWorkers: 1}}, Pools: map[string]sortie.PoolConfig{"p": {Queues: []string{"mail"}, MaxWorkers: 1}}}, `queue "mail" is in both Config.Queues and Config.Pools["p"]`},
		{"queue settings", &sortie.Config{Workers: workers, Queues: map[string]sortie.QueueConfig{"mail": {MaxWorkers: 1, Settings: &sortie.QueueSettings{RateLimit: 5}}}}, `Config.Queues["mail"].Settings: RateLimit is 5 but RatePeriod is not set`},
		{"negative max attempts", &sortie.Config{MaxAttempts: -1}, "Config.MaxAttempts must be between 1 and 1000000, got -1"},
		{"huge max attempts", &sortie.Config{MaxAttempts: 1 << 31}, "Config.MaxAttempts must be between 1 and 1000000, got 2147483648"},
		{"short lease", &sortie.Config{Lease: time.Millisecond}, "Config.Lease must be at least 1s, got 1ms"},
		{"heartbeat not below lease", &sortie.Config{Lease: 2 * time.Second, HeartbeatInterval: 2 * time.Second}, "Config.HeartbeatInterval must be positive and less than Lease"},
		{"negative poll", &sortie.Config{PollInterval: -time.Second}, "Config.PollInterval must not be negative"},
		{"pool max workers", &sortie.Config{Workers: workers, Pools: map[string]sortie.PoolConfig{"p": {Queues: []string{"mail"}}}}, `Config.Pools["p"].MaxWorkers must be at least 1, got 0`},
		{"pool weight below one", &sortie.Config{Workers: workers, Pools: map[string]sortie.PoolConfig{"p": {Queues: []string{"mail", "bulk"}, Order: sortie.PoolWeighted, Weights: []int{3, 0}, MaxWorkers: 1}}}, `Config.Pools["p"].Weights[1] must be at least 1, got 0`},
		{"pool order", &sortie.Config{Workers: workers, Pools: map[string]sortie.PoolConfig{"p": {Queues: []string{"mail"}, Order: 7, MaxWorkers: 1}}}, `Config.Pools["p"].Order: unknown order 7`},
		{"pool queue name", &sortie.Config{Workers: workers, Pools: map[string]sortie.PoolConfig{"p": {Queues: []string{"no spaces"}, MaxWorkers: 1}}}, `Config.Pools["p"].Queues: queue name "no spaces" may only contain`},
		{"negative job timeout", &sortie.Config{JobTimeout: -time.Second}, "Config.JobTimeout must not be negative, got -1s"},
		{"negative result size", &sortie.Config{MaxResultBytes: -1}, "Config.MaxResultBytes must not be negative, got -1"},
		{"negative rescue interval", &sortie.Config{RescueInterval: -time.Second}, "Config.RescueInterval must not be negative, got -1s"},
		{"negative fetch cooldown", &sortie.Config{FetchCooldown: -time.Second}, "Config.FetchCooldown must not be negative, got -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sortie.NewClient(memstore.New(), tt.cfg)
			if !errors.Is(err, sortie.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewClient() error = %v, want ErrInvalidArgument containing %q", err, tt.want)
			}
		})
	}
	if _, err := sortie.NewClient(nil, nil); !errors.Is(err, sortie.ErrInvalidArgument) {
		t.Fatalf("NewClient(nil store) = %v, want ErrInvalidArgument", err)
	}
}

type EmptyKind struct{}

func (EmptyKind) Kind() string { return "" }

type SpacedKind struct{}

func (SpacedKind) Kind() string { return "has space" }

type PtrKind struct{ name string }

func (p *PtrKind) Kind() string { return p.name }

type Unencodable struct {
	C chan int `json:"c"`
}

func (Unencodable) Kind() string { return "unencodable" }

func TestRegisterWorkerRejectsMistakes(t *testing.T) {
	t.Parallel()
	noop := func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }
	w := sortie.NewWorkers()
	if err := sortie.RegisterWorker(w, sortie.WorkFunc(noop), nil); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	if err := sortie.RegisterWorker(w, sortie.WorkFunc(noop), nil); err == nil || !strings.Contains(err.Error(), `kind "msg" registered twice`) {
		t.Fatalf("second registration = %v, want an error naming the kind registered twice", err)
	}
	if err := sortie.RegisterWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[EmptyKind]) error { return nil }), nil); err == nil || !strings.Contains(err.Error(), "kind is empty") {
		t.Fatalf("empty kind = %v, want an error saying the kind is empty", err)
	}
	if err := sortie.RegisterWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[SpacedKind]) error { return nil }), nil); err == nil || !strings.Contains(err.Error(), "space") {
		t.Fatalf("kind with a space = %v, want an error about the space", err)
	}
	if err := sortie.RegisterWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[*PtrKind]) error { return nil }), nil); err == nil || !strings.Contains(err.Error(), "value receiver") {
		t.Fatalf("pointer-receiver kind = %v, want an error asking for a value receiver", err)
	}
	if err := sortie.RegisterWorker(w, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Other]) error { return nil }), &sortie.WorkerOpts{MaxAttempts: -2}); err == nil || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Fatalf("negative MaxAttempts = %v, want an error naming the field", err)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("AddWorker of a duplicate kind did not panic")
		}
	}()
	sortie.AddWorker(w, sortie.WorkFunc(noop), nil)
}

func TestEnqueueRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	c := newClient(t, memstore.New(), &sortie.Config{})
	ctx := context.Background()
	tests := []struct {
		name string
		args sortie.JobArgs
		opts *sortie.EnqueueOpts
		want string
	}{
		{"nil args", nil, nil, "args are nil"},
		{"empty kind", EmptyKind{}, nil, "kind is empty"},
		{"nil pointer args", (*PtrKind)(nil), nil, "panicked"},
		{"unencodable args", Unencodable{C: make(chan int)}, nil, `encode args of kind "unencodable" to JSON`},
		{"bad queue", Msg{}, &sortie.EnqueueOpts{Queue: "a/b"}, `queue name "a/b" may only contain`},
		{"priority", Msg{}, &sortie.EnqueueOpts{Priority: 5}, "EnqueueOpts.Priority of kind \"msg\" must be between 1 and 4, got 5"},
		{"max attempts", Msg{}, &sortie.EnqueueOpts{MaxAttempts: -1}, "EnqueueOpts.MaxAttempts of kind \"msg\" must be between 1 and 1000000, got -1"},
		{"max attempts 2^31", Msg{}, &sortie.EnqueueOpts{MaxAttempts: 1 << 31}, "EnqueueOpts.MaxAttempts of kind \"msg\" must be between 1 and 1000000, got 2147483648"},
		{"max attempts 2^62", Msg{}, &sortie.EnqueueOpts{MaxAttempts: 1 << 62}, "EnqueueOpts.MaxAttempts of kind \"msg\" must be between 1 and 1000000, got 4611686018427387904"},
		{"run at too far", Msg{}, &sortie.EnqueueOpts{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "EnqueueOpts.RunAt of kind \"msg\" must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got"},
		{"timeout", Msg{}, &sortie.EnqueueOpts{Timeout: -time.Second}, "EnqueueOpts.Timeout of kind \"msg\" must be between 0 and"},
		{"dependency", Msg{}, &sortie.EnqueueOpts{DependsOn: []int64{-3}}, "EnqueueOpts.DependsOn of kind \"msg\" must hold job IDs (at least 1), got -3"},
		{"run at and in", Msg{}, &sortie.EnqueueOpts{RunAt: time.Now(), RunIn: time.Second}, "set RunAt or RunIn, not both"},
		{"long unique key", Msg{}, &sortie.EnqueueOpts{UniqueKey: strings.Repeat("k", 300)}, "UniqueKey"},
		{"empty tag", Msg{}, &sortie.EnqueueOpts{Tags: []string{""}}, "Tags"},
		{"bad meta", Msg{}, &sortie.EnqueueOpts{Meta: map[string]any{"f": func() {}}}, "encode EnqueueOpts.Meta"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := c.Enqueue(ctx, tt.args, tt.opts)
			if !errors.Is(err, sortie.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Enqueue() error = %v, want ErrInvalidArgument containing %q", err, tt.want)
			}
		})
	}
	page, err := c.JobList(ctx, nil)
	if err != nil || len(page.Jobs) != 0 {
		t.Fatalf("after rejected enqueues: %d jobs stored, %v; want none", len(page.Jobs), err)
	}
}

func TestEnqueueUsesKindDefaults(t *testing.T) {
	t.Parallel()
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Msg]) error { return nil }),
		&sortie.WorkerOpts{Queue: "mail", Priority: 1, MaxAttempts: 7})
	c := newClient(t, memstore.New(), &sortie.Config{Workers: workers})
	row := mustGet(t, c, mustEnqueue(t, c, Msg{}, nil))
	if row.Queue != "mail" || row.Priority != 1 || row.MaxAttempts != 7 {
		t.Fatalf("job got queue %q priority %d max attempts %d, want the kind's mail, 1, 7", row.Queue, row.Priority, row.MaxAttempts)
	}
	row = mustGet(t, c, mustEnqueue(t, c, Msg{}, &sortie.EnqueueOpts{Queue: "bulk", Priority: 4, MaxAttempts: 2}))
	if row.Queue != "bulk" || row.Priority != 4 || row.MaxAttempts != 2 {
		t.Fatalf("job got queue %q priority %d max attempts %d, want the options' bulk, 4, 2", row.Queue, row.Priority, row.MaxAttempts)
	}
	row = mustGet(t, c, mustEnqueue(t, c, Other{}, nil))
	if row.Queue != "default" || row.Priority != 2 || row.MaxAttempts != 25 {
		t.Fatalf("unregistered kind got queue %q priority %d max attempts %d, want default, 2, 25", row.Queue, row.Priority, row.MaxAttempts)
	}
}
