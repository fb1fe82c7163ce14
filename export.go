package sortie

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sortiehq/sortie/internal/buildinfo"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
)

// The export format: JSON lines, one record per line. The first line is
// the header; then the queues with settings or paused, the periodic
// schedules' last slots, every job in increasing ID order, and last an end
// line with the counts, whose absence marks a truncated stream.
//
//	{"format":"sortie-export","version":1,"exported_at":"..."}
//	{"queue":{"name":"mail","paused":true,"settings":{"max_running":5}}}
//	{"periodic":{"name":"nightly","last":"2026-11-25T03:00:00Z"}}
//	{"job":{"id":1,"kind":"email","queue":"mail","state":"completed",...,"args":{...},...}}
//	{"end":{"queues":1,"periodic":1,"jobs":1}}
//
// Version 2 adds a job's durable steps (steps), the parent and spawn step
// of a spawned job, and the step a job waits at; version 1 streams read
// as before.
const (
	exportFormat  = "sortie-export"
	exportVersion = 2
)

// exportHeader is the first line of an export.
type exportHeader struct {
	Format     string    `json:"format"`
	Version    int       `json:"version"`
	ExportedAt time.Time `json:"exported_at"`
	// Sortie is the version of the build that wrote the export.
	Sortie string `json:"sortie,omitempty"`
}

// exportLine is every line after the header: exactly one field is set.
type exportLine struct {
	Queue    *exportQueue    `json:"queue,omitempty"`
	Periodic *exportPeriodic `json:"periodic,omitempty"`
	Job      *exportJob      `json:"job,omitempty"`
	End      *exportEnd      `json:"end,omitempty"`
}

type exportQueue struct {
	Name     string         `json:"name"`
	Paused   bool           `json:"paused,omitempty"`
	Settings exportSettings `json:"settings,omitzero"`
}

// exportSettings are store.QueueSettings with durations as Go duration
// text ("1m30s") and the overflow by name.
type exportSettings struct {
	MaxRunning          int    `json:"max_running,omitempty"`
	RateLimit           int    `json:"rate_limit,omitempty"`
	RatePeriod          string `json:"rate_period,omitempty"`
	PartitionMaxRunning int    `json:"partition_max_running,omitempty"`
	PartitionRateLimit  int    `json:"partition_rate_limit,omitempty"`
	PartitionRatePeriod string `json:"partition_rate_period,omitempty"`
	MaxDepth            int    `json:"max_depth,omitempty"`
	Overflow            string `json:"overflow,omitempty"`
}

type exportPeriodic struct {
	Name string    `json:"name"`
	Last time.Time `json:"last"`
}

// exportJob is a job as the HTTP API shows it (jobjson.Job, one shape for
// export, API, dashboard and command line), with its steps whole: their
// results and their children's IDs, which an import needs. Its Steps
// stand in for the API's.
type exportJob struct {
	jobjson.Job
	Steps []exportStep `json:"steps,omitempty"`
}

// exportStep is a store.JobStep, whole, with the JSON names of the HTTP
// API.
type exportStep struct {
	Name       string          `json:"name"`
	Kind       store.StepKind  `json:"kind"`
	Attempt    int             `json:"attempt"`
	RecordedAt time.Time       `json:"recorded_at"`
	Result     json.RawMessage `json:"result,omitempty"`
	Until      time.Time       `json:"until,omitzero"`
	Children   []int64         `json:"children,omitempty"`
}

type exportEnd struct {
	Queues   int `json:"queues"`
	Periodic int `json:"periodic"`
	Jobs     int `json:"jobs"`
}

// ExportResult counts what Export wrote.
type ExportResult struct {
	Queues, Periodic, Jobs int
}

// exportPage is how many jobs Export reads at a time.
const exportPage = 1000

// Export writes every job of the store, in every state, with its attempts,
// errors, result, unique key, dependencies, workflow, the cause of its
// cancellation, its durable steps (results included) and its parent, and the queues' settings and pause state and the periodic
// schedules' last slots, to w in the export format (JSON lines; see
// Import). progress, when not nil, is called after each page of jobs with
// the jobs written so far.
//
// Jobs are read a page at a time, not in one snapshot: stop the workers
// and the enqueuers first for an exact copy. A job that moves on while the
// export runs is written as it was when its page was read.
func (c *Client) Export(ctx context.Context, w io.Writer, progress func(jobs int)) (*ExportResult, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	res := &ExportResult{}
	err := enc.Encode(exportHeader{Format: exportFormat, Version: exportVersion, ExportedAt: c.clock.Now().UTC(), Sortie: buildinfo.Version()})
	if err == nil {
		err = c.exportQueues(ctx, enc, res)
	}
	if err == nil {
		err = c.exportPeriodic(ctx, enc, res)
	}
	if err == nil {
		err = c.exportJobs(ctx, enc, res, progress)
	}
	if err == nil {
		err = enc.Encode(exportLine{End: &exportEnd{Queues: res.Queues, Periodic: res.Periodic, Jobs: res.Jobs}})
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return res, fmt.Errorf("export: %w", err)
	}
	return res, nil
}

func (c *Client) exportQueues(ctx context.Context, enc *json.Encoder, res *ExportResult) error {
	queues, err := c.store.QueueList(ctx, &store.QueueListParams{})
	if err != nil {
		return fmt.Errorf("list queues: %w", err)
	}
	for _, q := range queues {
		if !q.Paused && q.Settings == (store.QueueSettings{}) {
			continue
		}
		if err := enc.Encode(exportLine{Queue: &exportQueue{Name: q.Name, Paused: q.Paused, Settings: settingsOut(q.Settings)}}); err != nil {
			return err
		}
		res.Queues++
	}
	return nil
}

func (c *Client) exportPeriodic(ctx context.Context, enc *json.Encoder, res *ExportResult) error {
	rows, err := c.store.PeriodicList(ctx, &store.PeriodicListParams{})
	if err != nil {
		return fmt.Errorf("list periodic schedules: %w", err)
	}
	for _, p := range rows {
		if p.Last.IsZero() {
			continue
		}
		if err := enc.Encode(exportLine{Periodic: &exportPeriodic{Name: p.Name, Last: p.Last.UTC()}}); err != nil {
			return err
		}
		res.Periodic++
	}
	return nil
}

func (c *Client) exportJobs(ctx context.Context, enc *json.Encoder, res *ExportResult, progress func(int)) error {
	var after int64
	for {
		rows, err := c.store.JobList(ctx, &store.JobListParams{AfterID: after, Limit: exportPage})
		if err != nil {
			return fmt.Errorf("list jobs after %d: %w", after, err)
		}
		for _, r := range rows {
			j := jobOut(r)
			if len(r.Steps) > 0 {
				list, err := c.store.StepList(ctx, &store.StepListParams{ID: r.ID})
				if err != nil {
					return fmt.Errorf("list the steps of job %d: %w", r.ID, err)
				}
				j.Steps = stepsOut(list)
			}
			if err := enc.Encode(exportLine{Job: j}); err != nil {
				return err
			}
		}
		res.Jobs += len(rows)
		if progress != nil && len(rows) > 0 {
			progress(res.Jobs)
		}
		if len(rows) < exportPage {
			return nil
		}
		after = rows[len(rows)-1].ID
	}
}

func jobOut(r *store.JobRow) *exportJob {
	j := &exportJob{Job: jobjson.FromRow(r)}
	j.Job.Steps = nil
	return j
}

// stepsOut returns steps as an export writes them.
func stepsOut(steps []store.JobStep) []exportStep {
	out := make([]exportStep, len(steps))
	for i, s := range steps {
		out[i] = exportStep{Name: s.Name, Kind: s.Kind, Attempt: s.Attempt, RecordedAt: s.RecordedAt.UTC(),
			Result: rawJSON(s.Result), Until: utc(s.Until), Children: s.Children}
	}
	return out
}

// rawJSON is b as a raw JSON value, nil for none.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func settingsOut(s store.QueueSettings) exportSettings {
	v := exportSettings{MaxRunning: s.MaxRunning, RateLimit: s.RateLimit, PartitionMaxRunning: s.PartitionMaxRunning,
		PartitionRateLimit: s.PartitionRateLimit, MaxDepth: s.MaxDepth}
	if s.RatePeriod > 0 {
		v.RatePeriod = s.RatePeriod.String()
	}
	if s.PartitionRatePeriod > 0 {
		v.PartitionRatePeriod = s.PartitionRatePeriod.String()
	}
	if s.Overflow == store.OverflowDropOldest {
		v.Overflow = "drop-oldest"
	}
	return v
}
