package peers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/bench"
)

// Memory is peerbench's memory workload, for the Redis peers: Jobs small
// jobs are enqueued into an empty namespace (untimed in spirit: the
// enqueue rate is reported but is not the point), and the result is how
// much Redis's used_memory grew per job once it settled. The jobs never
// run; they are deleted after the reading.
const Memory bench.Workload = "memory"

// DefaultMemoryJobs is the memory workload's default number of jobs.
const DefaultMemoryJobs = 1_000_000

// MemoryOptions tune a run of the memory workload.
type MemoryOptions struct {
	// Jobs is how many jobs are enqueued. Defaults to DefaultMemoryJobs.
	Jobs int
	// PayloadBytes pads each job's args with a string of this many bytes
	// (the field "p"); 0 leaves the args as sortie bench's, {"s":seq}.
	PayloadBytes int
}

// MemoryStats is what the memory workload measured.
type MemoryStats struct {
	PayloadBytes int `json:"payload_bytes"`
	// UsedBefore and UsedAfter are INFO memory's used_memory before the
	// enqueues and after them, settled; DatasetBefore and DatasetAfter
	// its used_memory_dataset (used_memory less Redis's own overhead,
	// which counts the main dictionary's entries: a key costs more than
	// the dataset delta shows).
	UsedBefore    int64 `json:"used_memory_before"`
	UsedAfter     int64 `json:"used_memory_after"`
	DatasetBefore int64 `json:"used_memory_dataset_before"`
	DatasetAfter  int64 `json:"used_memory_dataset_after"`
	// BytesPerJob is (UsedAfter − UsedBefore) / jobs; DatasetBytesPerJob
	// the same of the dataset figures.
	BytesPerJob        float64 `json:"bytes_per_job"`
	DatasetBytesPerJob float64 `json:"dataset_bytes_per_job"`
}

// MemoryPeer is a peer that runs the memory workload.
type MemoryPeer interface {
	Peer
	// RunMemory runs the memory workload once in a new namespace, and
	// deletes its keys after.
	RunMemory(ctx context.Context, o MemoryOptions) (bench.Result, MemoryStats, error)
	// MemorySettings lists the settings of a run with o.
	MemorySettings(o MemoryOptions) string
}

func (o MemoryOptions) withDefaults() (MemoryOptions, error) {
	if o.Jobs < 0 || o.PayloadBytes < 0 {
		return o, fmt.Errorf("memory: the number of jobs and the payload size must not be negative")
	}
	if o.Jobs == 0 {
		o.Jobs = DefaultMemoryJobs
	}
	return o, nil
}

// padding returns the "p" field of the memory workload's jobs.
func padding(n int) string { return strings.Repeat("x", n) }

// measureMemory reads used_memory, settled, and calls enqueue, which must
// make o.Jobs jobs in a namespace of their own and close every connection
// it opened; then it waits for used_memory to settle again, reads it, and
// checks with pending that the peer holds o.Jobs jobs not yet run.
// Anything else writing to the server meanwhile shows in the figures: run
// it on a server of its own.
func measureMemory(ctx context.Context, rdb *redis.Client, o MemoryOptions, enqueue func(ctx context.Context) (time.Duration, error),
	pending func(ctx context.Context) (int64, error)) (res bench.Result, m MemoryStats, err error) {
	m.PayloadBytes = o.PayloadBytes
	if m.UsedBefore, m.DatasetBefore, err = settledMemory(ctx, rdb); err != nil {
		return res, m, err
	}
	took, err := enqueue(ctx)
	if err != nil {
		return res, m, err
	}
	if m.UsedAfter, m.DatasetAfter, err = settledMemory(ctx, rdb); err != nil {
		return res, m, err
	}
	n, err := pending(ctx)
	if err != nil {
		return res, m, err
	}
	if n != int64(o.Jobs) {
		return res, m, &bench.CheckError{Problems: []string{fmt.Sprintf("after enqueueing %d jobs the peer holds %d pending", o.Jobs, n)}}
	}
	m.BytesPerJob = float64(m.UsedAfter-m.UsedBefore) / float64(o.Jobs)
	m.DatasetBytesPerJob = float64(m.DatasetAfter-m.DatasetBefore) / float64(o.Jobs)
	res.SetThroughput(o.Jobs, took)
	return res, m, nil
}
