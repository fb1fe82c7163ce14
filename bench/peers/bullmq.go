package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/bench"
	"github.com/sortiehq/sortie/store"
)

// BullMQ runs the workloads on BullMQ, a Node.js queue: each run is one
// `node peerbench.js` process (the script in the bullmq directory beside
// this file), which runs the workload with BullMQ's Queue and Worker and
// prints what it observed as one JSON object; the check and the figures are
// made here, from it, as for the Go peers. BullMQ and ioredis are installed
// into that directory's node_modules by its install.sh, at the versions its
// package-lock.json pins.
type BullMQ struct {
	dir    string
	url    string
	rdb    *redis.Client
	logger *slog.Logger
	// Versions: node's, the installed packages', the server's.
	node, bullmq, ioredis, server string
}

var _ MemoryPeer = (*BullMQ)(nil)

// bullmqWorkerSettings are the Worker's settings other than concurrency:
// BullMQ's defaults, listed in Settings.
const bullmqWorkerSettings = "drainDelay=5s lockDuration=30s stalledInterval=30s attempts=1"

// DefaultBullMQDir returns the bullmq directory of this module's source
// tree, where this file was compiled from, or "bullmq" (relative to the
// working directory) when the binary does not know it.
func DefaultBullMQDir() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "bullmq")
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
	}
	return "bullmq"
}

// BullMQNotInstalledError reports a bullmq directory whose node_modules
// does not hold the BullMQ its package.json pins.
type BullMQNotInstalledError struct {
	Dir    string
	Reason string
}

func (e *BullMQNotInstalledError) Error() string {
	return fmt.Sprintf("bullmq: %s; run %s", e.Reason, filepath.Join(e.Dir, "install.sh"))
}

// OpenBullMQ checks that node runs and that dir (see DefaultBullMQDir)
// holds peerbench.js and the pinned BullMQ in node_modules, and connects to
// the Redis server at url. Each run uses a queue of its own,
// peerbench_<random>, and deletes its keys (bull:<queue>:...) after.
// logger receives what node writes on stderr.
func OpenBullMQ(ctx context.Context, url, dir string, logger *slog.Logger) (*BullMQ, error) {
	p := &BullMQ{dir: dir, url: url, logger: logger}
	out, err := exec.CommandContext(ctx, "node", "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("bullmq: node: %w", err)
	}
	p.node = strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(dir, "peerbench.js")); err != nil {
		return nil, fmt.Errorf("bullmq: %w", err)
	}
	var pinned struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := readJSON(filepath.Join(dir, "package.json"), &pinned); err != nil {
		return nil, fmt.Errorf("bullmq: %w", err)
	}
	for _, pkg := range []struct {
		name    string
		version *string
	}{{"bullmq", &p.bullmq}, {"ioredis", &p.ioredis}} {
		var installed struct {
			Version string `json:"version"`
		}
		if err := readJSON(filepath.Join(dir, "node_modules", pkg.name, "package.json"), &installed); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, &BullMQNotInstalledError{Dir: dir, Reason: pkg.name + " is not installed"}
			}
			return nil, fmt.Errorf("bullmq: %w", err)
		}
		if want := pinned.Dependencies[pkg.name]; installed.Version != want {
			return nil, &BullMQNotInstalledError{Dir: dir, Reason: fmt.Sprintf("%s %s is installed, package.json pins %s", pkg.name, installed.Version, want)}
		}
		*pkg.version = installed.Version
	}
	p.rdb, p.server, err = openRedis(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("bullmq: connect: %w", err)
	}
	return p, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Name returns "bullmq".
func (p *BullMQ) Name() string { return "bullmq" }

// Config returns "": BullMQ runs with one configuration.
func (p *BullMQ) Config() string { return "" }

// Version returns BullMQ's, ioredis's, node's and the server's versions.
func (p *BullMQ) Version() string {
	return fmt.Sprintf("bullmq %s, ioredis %s, node %s, Redis %s", p.bullmq, p.ioredis, p.node, p.server)
}

// Settings lists the Queue's and the Worker's settings for a run with o.
func (p *BullMQ) Settings(w bench.Workload, o Options) string {
	o, _ = withDefaults(o, w)
	s := fmt.Sprintf("Worker concurrency=%d maxRetriesPerRequest=null %s; Queue enableOfflineQueue=false removeOnComplete=true; both in one node process",
		o.Workers, bullmqWorkerSettings)
	switch w {
	case bench.EnqueueBatch:
		s += fmt.Sprintf("; addBulk×%d (one pipeline, not atomic) producers=%d", o.BatchSize, o.Producers)
	case bench.EnqueueSingle:
		s += fmt.Sprintf("; add producers=%d on one Queue", o.Producers)
	}
	return s
}

// MemorySettings describes the memory workload's enqueues.
func (p *BullMQ) MemorySettings(o MemoryOptions) string {
	o, _ = o.withDefaults()
	return fmt.Sprintf("addBulk×%d, removeOnComplete=true, args {\"s\":seq} + %d bytes of padding", bench.DefaultBatchSize, o.PayloadBytes)
}

// Close closes the harness's connection.
func (p *BullMQ) Close() error { return p.rdb.Close() }

// bullmqSpec is what peerbench.js runs: its one argument, as JSON.
type bullmqSpec struct {
	Redis     string  `json:"redis"`
	Queue     string  `json:"queue"`
	Workload  string  `json:"workload"`
	Jobs      int     `json:"jobs"`
	Workers   int     `json:"workers"`
	Producers int     `json:"producers"`
	Batch     int     `json:"batch"`
	Rate      float64 `json:"rate"`
	Payload   int     `json:"payload"`
	StallMs   int64   `json:"stall_ms"`
}

// bullmqResult is what peerbench.js prints.
type bullmqResult struct {
	// Seconds is the timed phase's length.
	Seconds float64 `json:"seconds"`
	// CallNs[i] is enqueue call i's length (enqueue workloads); StartNs[seq]
	// job seq's enqueue → processor start (latency).
	CallNs  []int64 `json:"call_ns"`
	StartNs []int64 `json:"start_ns"`
	// Runs[seq] counts the processor's calls of job seq; Stray its calls
	// of a job of no seq of the run.
	Runs  []int32 `json:"runs"`
	Stray int64   `json:"stray"`
	// Completed and Failed count the Worker's completed and failed events:
	// a completed event follows BullMQ's move of the job to completed
	// (here, with removeOnComplete, its deletion).
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	// Counts is Queue.getJobCounts() after the run.
	Counts map[string]int64 `json:"counts"`
	// Problems found on the way: jobs not all waiting after the enqueues,
	// enqueues that returned no ID or a repeated one, a stall.
	Problems []string `json:"problems"`
}

// drop deletes the keys of queue.
func (p *BullMQ) drop(ctx context.Context, queue string) error {
	_, err := deleteKeys(ctx, p.rdb, "bull:"+globEscape(queue)+":*")
	return err
}

// node runs peerbench.js with spec and returns its result. What node
// writes on stderr goes to the logger, or into the error when it fails.
func (p *BullMQ) runNode(ctx context.Context, spec bullmqSpec) (*bullmqResult, error) {
	arg, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "node", "peerbench.js", string(arg))
	cmd.Dir = p.dir
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if runErr != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 4000 {
			msg = "..." + msg[len(msg)-4000:]
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("bullmq: node peerbench.js: %w\n%s", runErr, msg)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(stderr.String()), "\n") {
		if line != "" {
			p.logger.Warn(line, "peer", "bullmq")
		}
	}
	var res bullmqResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("bullmq: read peerbench.js's result: %w", err)
	}
	return &res, nil
}

// Run runs w once on a queue of its own.
func (p *BullMQ) Run(ctx context.Context, w bench.Workload, opts Options) (res bench.Result, err error) {
	o, err := withDefaults(opts, w)
	if err != nil {
		return res, err
	}
	switch w {
	case bench.EnqueueSingle, bench.EnqueueBatch, bench.Drain, bench.Latency:
	default:
		return res, fmt.Errorf("bullmq: workload %s is not supported", w)
	}
	queue := randomName("peerbench_")
	defer func() {
		if derr := p.drop(ctx, queue); derr != nil && err == nil {
			err = fmt.Errorf("bullmq: delete the run's keys: %w", derr)
		}
	}()
	out, err := p.runNode(ctx, bullmqSpec{
		Redis: p.url, Queue: queue, Workload: string(w), Jobs: o.Jobs, Workers: o.Workers,
		Producers: o.Producers, Batch: o.BatchSize, Rate: o.Rate, StallMs: o.StallTimeout.Milliseconds(),
	})
	if err != nil {
		return res, err
	}
	if len(out.Runs) != o.Jobs {
		return res, fmt.Errorf("bullmq: peerbench.js reported %d jobs, want %d", len(out.Runs), o.Jobs)
	}
	res.SetThroughput(o.Jobs, time.Duration(out.Seconds*float64(time.Second)))
	switch w {
	case bench.EnqueueSingle, bench.EnqueueBatch:
		res.SetPercentiles(nanos(out.CallNs), bench.LatencyEnqueueCall)
		res.Producers = o.Producers
		if w == bench.EnqueueBatch {
			res.BatchSize = o.BatchSize
		}
	case bench.Drain:
		res.Workers = o.Workers
	case bench.Latency:
		res.SetPercentiles(nanos(out.StartNs), bench.LatencyEnqueueStart)
		res.Workers, res.Rate = o.Workers, o.Rate
	}
	return res, bench.Check(bench.Tally{Runs: out.Runs, Stray: out.Stray, Counts: out.counts(queue), Problems: out.Problems})
}

func nanos(ns []int64) []time.Duration {
	ds := make([]time.Duration, len(ns))
	for i, n := range ns {
		ds[i] = time.Duration(n)
	}
	return ds
}

// counts names BullMQ's states as sortie's: waiting, prioritized and
// paused are available, delayed scheduled, active running,
// waiting-children waiting, failed dead; completed is the Worker's
// completed events, the completed jobs themselves being deleted. A
// completed job BullMQ kept nonetheless counts as "completed (kept)", a
// state the check reports.
func (r *bullmqResult) counts(queue string) []store.QueueStateCount {
	states := map[string]store.JobState{
		"waiting": store.JobStateAvailable, "prioritized": store.JobStateAvailable, "paused": store.JobStateAvailable,
		"delayed": store.JobStateScheduled, "active": store.JobStateRunning, "waiting-children": store.JobStateWaiting,
		"failed": store.JobStateDead, "completed": "completed (kept)",
	}
	counts := []store.QueueStateCount{{Queue: queue, State: store.JobStateCompleted, Count: r.Completed}}
	for name, n := range r.Counts {
		state, ok := states[name]
		if !ok {
			state = store.JobState(name)
		}
		counts = append(counts, store.QueueStateCount{Queue: queue, State: state, Count: n})
	}
	return counts
}

// RunMemory enqueues o.Jobs jobs into a queue of its own with addBulk and
// measures Redis's used_memory per job.
func (p *BullMQ) RunMemory(ctx context.Context, opts MemoryOptions) (res bench.Result, m MemoryStats, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return res, m, err
	}
	queue := randomName("peerbench_")
	defer func() {
		if derr := p.drop(ctx, queue); derr != nil && err == nil {
			err = fmt.Errorf("bullmq: delete the run's keys: %w", derr)
		}
	}()
	var out *bullmqResult
	enqueue := func(ctx context.Context) (time.Duration, error) {
		// The node process, and with it its connections, has ended when
		// this returns.
		var err error
		out, err = p.runNode(ctx, bullmqSpec{Redis: p.url, Queue: queue, Workload: string(Memory), Jobs: o.Jobs,
			Batch: bench.DefaultBatchSize, Payload: o.PayloadBytes})
		if err != nil {
			return 0, err
		}
		return time.Duration(out.Seconds * float64(time.Second)), nil
	}
	pending := func(context.Context) (int64, error) {
		return out.Counts["waiting"], nil
	}
	res, m, err = measureMemory(ctx, p.rdb, o, enqueue, pending)
	if err != nil {
		return res, m, fmt.Errorf("bullmq: %w", err)
	}
	return res, m, nil
}
