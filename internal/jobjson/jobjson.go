// Package jobjson holds the JSON shapes of jobs and queues that sortie's
// command line prints and its HTTP API speaks, so both say the same thing
// in the same words: snake_case names, RFC 3339 times in UTC, args, meta
// and results as the JSON they are.
package jobjson

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/sortiehq/sortie/store"
)

// Job is a job as JSON.
type Job struct {
	ID               int64                `json:"id"`
	Kind             string               `json:"kind"`
	Queue            string               `json:"queue"`
	State            string               `json:"state"`
	Priority         int                  `json:"priority"`
	Attempt          int                  `json:"attempt"`
	MaxAttempts      int                  `json:"max_attempts"`
	Args             json.RawMessage      `json:"args"`
	RunAt            time.Time            `json:"run_at"`
	CreatedAt        time.Time            `json:"created_at"`
	AttemptedAt      *time.Time           `json:"attempted_at,omitempty"`
	AttemptedBy      string               `json:"attempted_by,omitempty"`
	FinalizedAt      *time.Time           `json:"finalized_at,omitempty"`
	LeaseUntil       *time.Time           `json:"lease_until,omitempty"`
	ClaimToken       int64                `json:"claim_token,omitempty"`
	UniqueKey        string               `json:"unique_key,omitempty"`
	Tags             []string             `json:"tags,omitempty"`
	Meta             json.RawMessage      `json:"meta,omitempty"`
	Timeout          string               `json:"timeout,omitempty"`
	PartitionKey     string               `json:"partition_key,omitempty"`
	Result           json.RawMessage      `json:"result,omitempty"`
	Progress         float64              `json:"progress,omitempty"`
	CancelRequested  bool                 `json:"cancel_requested,omitempty"`
	WorkflowID       int64                `json:"workflow_id,omitempty"`
	DependsOn        []int64              `json:"depends_on,omitempty"`
	IgnoreDepFailure bool                 `json:"ignore_dep_failure,omitempty"`
	CancelledBy      int64                `json:"cancelled_by,omitempty"`
	ParentID         int64                `json:"parent_id,omitempty"`
	SpawnStep        string               `json:"spawn_step,omitempty"`
	CancelWithParent bool                 `json:"cancel_with_parent,omitempty"`
	WaitsFor         string               `json:"waits_for,omitempty"`
	Errors           []store.AttemptError `json:"errors,omitempty"`
	Steps            []Step               `json:"steps,omitempty"`
}

// Step is one of a job's durable steps as JSON, without its result.
type Step struct {
	Name       string    `json:"name"`
	Kind       string    `json:"kind"`
	Attempt    int       `json:"attempt"`
	RecordedAt time.Time `json:"recorded_at"`
	// Size is a step's result size in bytes.
	Size int `json:"size,omitempty"`
	// Until is a sleep's wake time.
	Until *time.Time `json:"until,omitempty"`
	// Children and Pending count a spawn's children, and those of them
	// not finished yet.
	Children int  `json:"children,omitempty"`
	Pending  *int `json:"pending,omitempty"`
}

// StepOf returns the JSON shape of s.
func StepOf(s store.JobStep) Step {
	v := Step{Name: s.Name, Kind: string(s.Kind), Attempt: s.Attempt, RecordedAt: s.RecordedAt.UTC(), Size: s.Size,
		Until: optTime(s.Until)}
	if s.Kind == store.StepSpawn {
		pending := s.Pending
		v.Children, v.Pending = s.ChildCount, &pending
	}
	return v
}

// Page is one page of a job listing: NextAfter is the cursor of the
// next page, absent on the last.
type Page struct {
	Jobs      []Job `json:"jobs"`
	NextAfter int64 `json:"next_after,omitempty"`
}

// FromRow returns the JSON shape of r.
func FromRow(r *store.JobRow) Job {
	v := Job{
		ID: r.ID, Kind: r.Kind, Queue: r.Queue, State: string(r.State), Priority: r.Priority,
		Attempt: r.Attempt, MaxAttempts: r.MaxAttempts, Args: rawJSON(r.Args), RunAt: r.RunAt.UTC(), CreatedAt: r.CreatedAt.UTC(),
		AttemptedAt: optTime(r.AttemptedAt), AttemptedBy: r.AttemptedBy, FinalizedAt: optTime(r.FinalizedAt),
		LeaseUntil: optTime(r.LeaseUntil), ClaimToken: r.ClaimToken, UniqueKey: r.UniqueKey, Tags: r.Tags, Meta: rawJSON(r.Meta),
		PartitionKey: r.PartitionKey, Result: rawJSON(r.Result), Progress: r.Progress, CancelRequested: r.CancelRequested,
		WorkflowID: r.WorkflowID, DependsOn: r.DependsOn, IgnoreDepFailure: r.IgnoreDepFailure, CancelledBy: r.CancelledBy,
		ParentID: r.ParentID, SpawnStep: r.SpawnStep, CancelWithParent: r.CancelWithParent, WaitsFor: r.WaitsFor,
	}
	for _, s := range r.Steps {
		v.Steps = append(v.Steps, StepOf(s))
	}
	if v.Args == nil {
		v.Args = json.RawMessage("null")
	}
	if r.Timeout > 0 {
		v.Timeout = r.Timeout.String()
	}
	for _, e := range r.Errors {
		e.At = e.At.UTC()
		v.Errors = append(v.Errors, e)
	}
	return v
}

// rawJSON returns b as a JSON value, or nil (left out) when empty.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// Queue is a queue as JSON, with its jobs per state.
type Queue struct {
	Name     string           `json:"name"`
	Paused   bool             `json:"paused"`
	Counts   map[string]int64 `json:"counts,omitempty"`
	Settings *Settings        `json:"settings,omitempty"`
	// Dropped counts jobs dropped by the drop-oldest overflow policy.
	Dropped int64 `json:"dropped,omitempty"`
	// Latency is how long the queue's oldest due job has waited, in
	// seconds (Client.QueueLatency); 0 when no job is due.
	Latency float64 `json:"latency"`
}

// Settings are a queue's limits; zero ones are left out.
type Settings struct {
	MaxRunning          int    `json:"max_running,omitempty"`
	RateLimit           int    `json:"rate_limit,omitempty"`
	RatePeriod          string `json:"rate_period,omitempty"`
	PartitionMaxRunning int    `json:"partition_max_running,omitempty"`
	PartitionRateLimit  int    `json:"partition_rate_limit,omitempty"`
	PartitionRatePeriod string `json:"partition_rate_period,omitempty"`
	MaxDepth            int    `json:"max_depth,omitempty"`
	Overflow            string `json:"overflow,omitempty"`
}

// FromQueue returns the JSON shape of row, with its jobs per state.
func FromQueue(row *store.QueueRow, counts map[string]int64) Queue {
	v := Queue{Name: row.Name, Paused: row.Paused, Counts: counts, Dropped: row.Dropped}
	s := row.Settings
	if s != (store.QueueSettings{}) {
		v.Settings = &Settings{MaxRunning: s.MaxRunning, RateLimit: s.RateLimit, RatePeriod: period(s.RatePeriod),
			PartitionMaxRunning: s.PartitionMaxRunning, PartitionRateLimit: s.PartitionRateLimit,
			PartitionRatePeriod: period(s.PartitionRatePeriod), MaxDepth: s.MaxDepth}
		if s.MaxDepth > 0 {
			v.Settings.Overflow = "reject"
			if s.Overflow == store.OverflowDropOldest {
				v.Settings.Overflow = "drop-oldest"
			}
		}
	}
	return v
}

// period formats a zero duration as nothing.
func period(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// RawArgs are a job's args given as JSON by a program that has no Go type
// for them (the command line, a client of the HTTP API). They enqueue
// through sortie.Client like any other args.
type RawArgs struct {
	JobKind string
	JSON    json.RawMessage
}

// Kind implements sortie.JobArgs.
func (r RawArgs) Kind() string { return r.JobKind }

// MarshalJSON returns the args as given.
func (r RawArgs) MarshalJSON() ([]byte, error) { return r.JSON, nil }

// States are the job states, in the order of a job's life.
var States = []store.JobState{store.JobStateWaiting, store.JobStateScheduled, store.JobStateAvailable, store.JobStateRunning,
	store.JobStateRetrying, store.JobStateCompleted, store.JobStateCancelled, store.JobStateDead}

// ValidState reports whether s is a job state.
func ValidState(s store.JobState) bool { return slices.Contains(States, s) }

// StateNames lists the states for a message: "waiting, scheduled, ...".
func StateNames() string {
	names := make([]string, len(States))
	for i, s := range States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Queues merges the configured queues (rows) with the job counts and the
// latencies (how long each queue's oldest due job has waited) into one
// entry per queue that has any, by name.
func Queues(rows []*store.QueueRow, counts []store.QueueStateCount, latency map[string]time.Duration) []Queue {
	byQueue := map[string]map[string]int64{}
	for _, n := range counts {
		if byQueue[n.Queue] == nil {
			byQueue[n.Queue] = map[string]int64{}
		}
		byQueue[n.Queue][string(n.State)] = n.Count
	}
	known := map[string]*store.QueueRow{}
	for _, r := range rows {
		known[r.Name] = r
	}
	for q := range byQueue {
		if known[q] == nil {
			known[q] = &store.QueueRow{Name: q}
		}
	}
	waited := map[string]float64{}
	for q, l := range latency {
		waited[q] = l.Seconds()
		if known[q] == nil {
			known[q] = &store.QueueRow{Name: q}
		}
	}
	names := make([]string, 0, len(known))
	for q := range known {
		names = append(names, q)
	}
	slices.Sort(names)
	out := make([]Queue, len(names))
	for i, q := range names {
		out[i] = FromQueue(known[q], byQueue[q])
		out[i].Latency = waited[q]
	}
	return out
}

// StepDetail is one of a job's durable steps as JSON with its result and,
// for a spawn, its children's IDs (GET /api/v1/jobs/{id}/steps).
type StepDetail struct {
	Step
	// Result is a step's recorded JSON result.
	Result json.RawMessage `json:"result,omitempty"`
	// ChildIDs are the IDs of the jobs a spawn enqueued, in order.
	ChildIDs []int64 `json:"child_ids,omitempty"`
}

// StepDetailOf returns the JSON shape of s with its result and children.
func StepDetailOf(s store.JobStep) StepDetail {
	return StepDetail{Step: StepOf(s), Result: rawJSON(s.Result), ChildIDs: s.Children}
}
