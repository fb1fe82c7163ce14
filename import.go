package sortie

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/sortiehq/sortie/store"
)

// ImportOpts steer Import.
type ImportOpts struct {
	// IDOffset is added to every job's ID and to the IDs a job names
	// (depends_on, workflow_id, cancelled_by), so that the jobs of another
	// store fit next to jobs whose IDs they would take. An import run
	// again must use the same offset.
	IDOffset int64
	// Skip leaves out the jobs that conflict with the store (their ID
	// holds a different job, or another pending job holds their unique
	// key), and the jobs that depend on one left out, and imports the
	// rest. Without it, a conflict stops the import before anything is
	// written.
	Skip bool
	// DryRun reads and checks the whole stream and the store and writes
	// nothing.
	DryRun bool
	// Batch is how many jobs one store call writes, each batch in one
	// step; 0 means 2,000.
	Batch int
	// TempDir is where a stream that cannot be read twice (not a file) is
	// copied first; "" means the system's temporary directory.
	TempDir string
	// Progress, when set, is called after each batch with the phase
	// ("check" while the stream is read and checked, "write" while jobs
	// are written) and the jobs done in that phase.
	Progress func(phase string, jobs int)
}

// ImportReport says what Import found and did.
type ImportReport struct {
	// Jobs counts the jobs of the stream; Added those written, Present
	// those the store already held from an earlier import (left as they
	// are), Skipped those left out for a conflict (ImportOpts.Skip).
	Jobs, Added, Present int
	Skipped              []ImportConflict
	// Queues and Periodic count the queue settings and periodic slots of
	// the stream, written unless DryRun.
	Queues, Periodic int
}

// ImportConflict is a job of the stream that conflicts with the store.
type ImportConflict struct {
	// Line is the job's line in the stream, ID its ID in the store (with
	// ImportOpts.IDOffset added).
	Line int
	ID   int64
	// Reason says what is in the way.
	Reason string
}

func (c ImportConflict) String() string {
	return fmt.Sprintf("line %d: job %d: %s", c.Line, c.ID, c.Reason)
}

// ImportConflictError is the error of an import stopped by conflicts
// before it wrote anything. Conflicts holds the first 100.
type ImportConflictError struct {
	Count     int
	Conflicts []ImportConflict
}

func (e *ImportConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "import: %d jobs conflict with the store, nothing was imported (skip them, or import with an ID offset):", e.Count)
	for i, c := range e.Conflicts {
		if i == 5 {
			fmt.Fprintf(&b, "\n  ... %d more", e.Count-i)
			break
		}
		b.WriteString("\n  " + c.String())
	}
	return b.String()
}

// maxConflicts is how many conflicts a report or error lists.
const maxConflicts = 100

// Import reads a stream Export wrote and puts its jobs, queue settings,
// pause states and periodic slots into the client's store, IDs kept (or
// moved by ImportOpts.IDOffset), each job in the state it had, with its
// attempts, errors, result, unique key, dependencies, workflow and the
// cause of its cancellation.
//
// It reads the whole stream before it writes anything: a line that is not
// valid, a job a store could not hold, or a stream that ends before its
// end line is refused with the line number, and so is a conflict with the
// store (unless ImportOpts.Skip), and then nothing is imported. Jobs are
// then written in batches, each in one step. Running an import again, with
// the same offset, adds nothing: jobs already imported are found and left
// as they are, whatever happened to them since, so an import cut short
// resumes where it stopped when run again. Queue settings and pause states
// are set as exported; a periodic slot moves forward only.
func (c *Client) Import(ctx context.Context, r io.Reader, opts *ImportOpts) (*ImportReport, error) {
	var o ImportOpts
	if opts != nil {
		o = *opts
	}
	if o.Batch == 0 {
		o.Batch = 2000
	}
	if o.Batch < 1 || o.Batch > 50000 {
		return nil, invalidf("ImportOpts.Batch must be 1 to 50000, got %d", o.Batch)
	}
	if o.IDOffset < 0 {
		return nil, invalidf("ImportOpts.IDOffset must not be negative, got %d", o.IDOffset)
	}
	src, done, err := rereadable(r, o.TempDir)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer done()
	im := &importer{c: c, o: &o, rep: &ImportReport{}}
	if err := im.check(ctx, src); err != nil {
		return im.rep, err
	}
	if o.DryRun {
		return im.rep, nil
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return im.rep, fmt.Errorf("import: rewind the stream: %w", err)
	}
	if err := im.write(ctx, src); err != nil {
		return im.rep, err
	}
	return im.rep, nil
}

// rereadable returns r as a stream that can be read twice: r itself when
// it is a regular file, else a temporary copy, removed by done.
func rereadable(r io.Reader, dir string) (_ io.ReadSeeker, done func(), _ error) {
	if f, ok := r.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			return f, func() {}, nil
		}
	}
	tmp, err := os.CreateTemp(dir, "sortie-import-*.jsonl")
	if err != nil {
		return nil, nil, fmt.Errorf("copy the stream to a temporary file: %w", err)
	}
	done = func() { tmp.Close(); os.Remove(tmp.Name()) }
	if _, err := io.Copy(tmp, r); err != nil {
		done()
		return nil, nil, fmt.Errorf("copy the stream to %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		done()
		return nil, nil, err
	}
	return tmp, done, nil
}

// importer is one Import.
type importer struct {
	c   *Client
	o   *ImportOpts
	rep *ImportReport
	// skip holds the IDs (offset applied) of the conflicting jobs, under
	// ImportOpts.Skip.
	skip map[int64]bool
	// children maps the jobs that spawn steps of the stream name (offset
	// applied) to whether the stream holds them: a child deleted before
	// the export is left out of its step, so its parent does not wait for
	// it.
	children map[int64]bool
}

// streamError is a problem with line n of the stream.
func streamError(n int, format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf("sortie: import: line %d: ", n) + fmt.Sprintf(format, args...)}
}

// lineReader reads the stream's lines, numbering them from 1.
type lineReader struct {
	r *bufio.Reader
	n int
}

// next returns the next line without its end, io.EOF after the last.
func (l *lineReader) next() ([]byte, error) {
	line, err := l.r.ReadBytes('\n')
	if err == io.EOF && len(line) == 0 {
		return nil, io.EOF
	}
	if err != nil && err != io.EOF {
		return nil, err
	}
	l.n++
	return bytes.TrimRight(line, "\r\n"), nil
}

// batch is the jobs of one store call and their lines.
type batch struct {
	jobs  []*store.JobRow
	lines []int
}

// read reads the stream, strictly (check) or not (write, the stream was
// checked), calling the functions for its records; jobs come in batches
// of ImportOpts.Batch. It checks the header, the order of IDs and the end
// line.
func (im *importer) read(src io.Reader, strict bool, onQueue func(*exportQueue) error, onPeriodic func(*exportPeriodic) error, onJobs func(*batch) error) error {
	lr := &lineReader{r: bufio.NewReaderSize(src, 1<<16)}
	if err := im.readHeader(lr); err != nil {
		return err
	}
	var (
		b      batch
		prevID int64
		seen   exportEnd
	)
	flush := func() error {
		if len(b.jobs) == 0 {
			return nil
		}
		err := onJobs(&b)
		b = batch{}
		return err
	}
	for {
		line, err := lr.next()
		if err == io.EOF {
			return streamError(lr.n, "the stream ends without its end line: it was cut short")
		}
		if err != nil {
			return fmt.Errorf("import: read line %d: %w", lr.n+1, err)
		}
		var rec exportLine
		if strict {
			err = decodeStrict(line, &rec)
		} else {
			err = json.Unmarshal(line, &rec)
		}
		if err != nil {
			return streamError(lr.n, "%v", err)
		}
		switch {
		case rec.Queue != nil && rec.Periodic == nil && rec.Job == nil && rec.End == nil:
			if err := onQueue(rec.Queue); err != nil {
				return streamError(lr.n, "%v", err)
			}
			seen.Queues++
		case rec.Periodic != nil && rec.Queue == nil && rec.Job == nil && rec.End == nil:
			if err := onPeriodic(rec.Periodic); err != nil {
				return streamError(lr.n, "%v", err)
			}
			seen.Periodic++
		case rec.Job != nil && rec.Queue == nil && rec.Periodic == nil && rec.End == nil:
			j, err := im.jobIn(rec.Job, prevID)
			if err != nil {
				return streamError(lr.n, "%v", err)
			}
			prevID = j.ID
			b.jobs, b.lines = append(b.jobs, j), append(b.lines, lr.n)
			seen.Jobs++
			if len(b.jobs) == im.o.Batch {
				if err := flush(); err != nil {
					return err
				}
			}
		case rec.End != nil && rec.Queue == nil && rec.Periodic == nil && rec.Job == nil:
			if *rec.End != seen {
				return streamError(lr.n, "the end line counts %d queues, %d periodic slots and %d jobs, the stream holds %d, %d and %d",
					rec.End.Queues, rec.End.Periodic, rec.End.Jobs, seen.Queues, seen.Periodic, seen.Jobs)
			}
			if err := flush(); err != nil {
				return err
			}
			if _, err := lr.next(); err != io.EOF {
				return streamError(lr.n, "a line follows the end line")
			}
			return nil
		default:
			return streamError(lr.n, "a line holds exactly one of queue, periodic, job or end")
		}
	}
}

// decodeStrict decodes one line, refusing unknown fields and naming a
// value of the wrong type by its path in the line ("job.priority").
func decodeStrict(line []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	err := d.Decode(v)
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("%s must be %s, got %s", te.Field, jsonKind(te.Type.Kind()), te.Value)
	case err != nil:
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	case d.More():
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// jsonKind names a Go kind as the JSON value it decodes from.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	}
	return "a number"
}

func (im *importer) readHeader(lr *lineReader) error {
	line, err := lr.next()
	if err == io.EOF {
		return streamError(1, "the stream is empty")
	}
	if err != nil {
		return fmt.Errorf("import: read line 1: %w", err)
	}
	var h exportHeader
	if err := json.Unmarshal(line, &h); err != nil || h.Format != exportFormat {
		return streamError(1, `not a sortie export: the first line must be {"format":"sortie-export",...}`)
	}
	if h.Version < 1 || h.Version > exportVersion {
		return streamError(1, "export version %d; this sortie reads version %d", h.Version, exportVersion)
	}
	return nil
}

// jobIn turns a job line into a row, IDs moved by the offset, and checks
// it as the stores will.
func (im *importer) jobIn(j *exportJob, prevID int64) (*store.JobRow, error) {
	off := im.o.IDOffset
	r := &store.JobRow{
		ID: j.ID + off, Kind: j.Kind, Queue: j.Queue, Args: j.Args, State: store.JobState(j.State), Priority: j.Priority,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, RunAt: j.RunAt, CreatedAt: j.CreatedAt,
		AttemptedAt: timeOf(j.AttemptedAt), AttemptedBy: j.AttemptedBy, FinalizedAt: timeOf(j.FinalizedAt),
		LeaseUntil: timeOf(j.LeaseUntil),
		ClaimToken: j.ClaimToken, UniqueKey: j.UniqueKey, Errors: j.Errors, Tags: j.Tags, Meta: j.Meta,
		PartitionKey: j.PartitionKey, Result: j.Result, Progress: j.Progress, CancelRequested: j.CancelRequested,
		IgnoreDepFailure: j.IgnoreDepFailure, SpawnStep: j.SpawnStep, CancelWithParent: j.CancelWithParent,
		WaitsFor: j.WaitsFor,
	}
	if j.ParentID != 0 {
		r.ParentID = j.ParentID + off
	}
	r.Steps = stepsIn(j.Steps, off)
	if j.Timeout != "" {
		d, err := time.ParseDuration(j.Timeout)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("job %d: timeout must be a duration like 30s, got %q", j.ID, j.Timeout)
		}
		r.Timeout = d
	}
	if j.WorkflowID != 0 {
		r.WorkflowID = j.WorkflowID + off
	}
	if j.CancelledBy != 0 {
		r.CancelledBy = j.CancelledBy + off
	}
	if len(j.DependsOn) > 0 {
		r.DependsOn = make([]int64, len(j.DependsOn))
		for i, d := range j.DependsOn {
			r.DependsOn[i] = d + off
		}
	}
	if r.ID <= prevID {
		return nil, fmt.Errorf("job %d: ids must increase, it comes after job %d", j.ID, prevID-off)
	}
	if err := store.ImportValidate([]*store.JobRow{r}); err != nil {
		return nil, err
	}
	return r, nil
}

// check reads the whole stream strictly and asks the store what it would
// do with each batch (a dry run), filling in the report.
func (im *importer) check(ctx context.Context, src io.Reader) error {
	var conflicts []ImportConflict
	count := 0
	err := im.read(src, true,
		func(q *exportQueue) error {
			im.rep.Queues++
			_, err := settingsIn(q.Settings)
			return err
		},
		func(*exportPeriodic) error { im.rep.Periodic++; return nil },
		func(b *batch) error {
			res, err := im.c.store.JobImport(ctx, &store.JobImportParams{Jobs: b.jobs, DryRun: true, Now: im.c.clock.Now()})
			if err != nil {
				return fmt.Errorf("import: check the jobs of lines %d to %d: %w", b.lines[0], b.lines[len(b.lines)-1], err)
			}
			for i, x := range res {
				reason := ""
				switch {
				case x.Status == store.ImportPresent:
					im.rep.Present++
				case x.Status.Conflict():
					reason = conflictReason(x)
				default:
					if d := im.skippedDep(b.jobs[i]); d != 0 {
						reason = fmt.Sprintf("it depends on job %d, which is skipped", d)
					}
				}
				if reason == "" {
					continue
				}
				count++
				if len(conflicts) < maxConflicts {
					conflicts = append(conflicts, ImportConflict{Line: b.lines[i], ID: b.jobs[i].ID, Reason: reason})
				}
				if im.o.Skip {
					if im.skip == nil {
						im.skip = make(map[int64]bool)
					}
					im.skip[b.jobs[i].ID] = true
				}
			}
			im.noteChildren(b.jobs)
			im.rep.Jobs += len(b.jobs)
			if im.o.Progress != nil {
				im.o.Progress("check", im.rep.Jobs)
			}
			return nil
		})
	if err != nil {
		return err
	}
	im.rep.Added = im.rep.Jobs - im.rep.Present - count
	if count > 0 {
		if !im.o.Skip {
			im.rep.Added = 0
			return &ImportConflictError{Count: count, Conflicts: conflicts}
		}
		im.rep.Skipped = conflicts
	}
	return nil
}

// timeOf is *t, or the zero time for none.
func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// stepsIn reads the steps of a job line, IDs moved by off.
func stepsIn(steps []exportStep, off int64) []store.JobStep {
	if len(steps) == 0 {
		return nil
	}
	out := make([]store.JobStep, len(steps))
	for i, s := range steps {
		out[i] = store.JobStep{Name: s.Name, Kind: s.Kind, Attempt: s.Attempt, RecordedAt: s.RecordedAt, Result: s.Result,
			Size: len(s.Result), Until: s.Until, ChildCount: len(s.Children)}
		for _, c := range s.Children {
			out[i].Children = append(out[i].Children, c+off)
		}
	}
	return out
}

// noteChildren records, while the stream is checked, the children that
// jobs' spawn steps name and which of jobs are such children.
func (im *importer) noteChildren(jobs []*store.JobRow) {
	for _, j := range jobs {
		if _, ok := im.children[j.ID]; ok {
			im.children[j.ID] = true
		}
		for _, s := range j.Steps {
			for _, c := range s.Children {
				if im.children == nil {
					im.children = make(map[int64]bool)
				}
				im.children[c] = false
			}
		}
	}
}

// linkChildren makes j's links to its parent and children what this
// store will hold: a spawn step keeps the children the stream holds and
// the import does not skip, and a child of a skipped parent is imported
// as a job of its own.
func (im *importer) linkChildren(j *store.JobRow) {
	if j.ParentID != 0 && im.skip[j.ParentID] {
		j.ParentID, j.SpawnStep, j.CancelWithParent = 0, "", false
	}
	for i := range j.Steps {
		s := &j.Steps[i]
		if s.Kind != store.StepSpawn {
			continue
		}
		kept := s.Children[:0:0]
		for _, c := range s.Children {
			if im.children[c] && !im.skip[c] {
				kept = append(kept, c)
			}
		}
		s.Children, s.ChildCount = kept, len(kept)
	}
}

// skippedDep returns a dependency of j that is skipped, or 0.
func (im *importer) skippedDep(j *store.JobRow) int64 {
	for _, d := range j.DependsOn {
		if im.skip[d] {
			return d
		}
	}
	return 0
}

func conflictReason(x store.ImportResult) string {
	if x.Status == store.ImportUniqueTaken {
		return fmt.Sprintf("its unique key is held by pending job %d", x.Other)
	}
	return "a different job has this ID"
}

// write reads the checked stream again and writes it.
func (im *importer) write(ctx context.Context, src io.Reader) error {
	now := im.c.clock.Now()
	written := 0
	added, present := 0, 0
	err := im.read(src, false,
		func(q *exportQueue) error { return im.writeQueue(ctx, q, now) },
		func(p *exportPeriodic) error { return im.writePeriodic(ctx, p, now) },
		func(b *batch) error {
			jobs, lines := b.jobs, b.lines
			if len(im.skip) > 0 {
				jobs, lines = nil, nil
				for i, j := range b.jobs {
					if im.skip[j.ID] {
						continue
					}
					if im.skip[j.CancelledBy] {
						j.CancelledBy = 0 // it cannot be retried here to revive j
					}
					jobs, lines = append(jobs, j), append(lines, b.lines[i])
				}
			}
			for _, j := range jobs {
				im.linkChildren(j)
			}
			if len(jobs) > 0 {
				res, err := im.c.store.JobImport(ctx, &store.JobImportParams{Jobs: jobs, Now: now})
				if err != nil {
					return fmt.Errorf("import: write the jobs of lines %d to %d (%d jobs written before): %w", lines[0], lines[len(lines)-1], written, err)
				}
				for i, x := range res {
					switch {
					case x.Status == store.ImportAdded:
						added++
					case x.Status == store.ImportPresent:
						present++
					default:
						// The store changed since the check.
						return fmt.Errorf("import: line %d: job %d: %s (it appeared after the check; %d jobs written before, run the import again)",
							lines[i], jobs[i].ID, conflictReason(x), written)
					}
				}
				written += len(jobs)
			}
			if im.o.Progress != nil {
				im.o.Progress("write", written)
			}
			return nil
		})
	im.rep.Added, im.rep.Present = added, present
	return err
}

func (im *importer) writeQueue(ctx context.Context, q *exportQueue, now time.Time) error {
	s, err := settingsIn(q.Settings)
	if err != nil {
		return err
	}
	if _, err := im.c.store.QueueConfigure(ctx, &store.QueueConfigureParams{Queue: q.Name, Settings: s, Now: now}); err != nil {
		return fmt.Errorf("configure queue %q: %w", q.Name, err)
	}
	if _, err := im.c.store.QueuePause(ctx, &store.QueuePauseParams{Queue: q.Name, Paused: q.Paused, Now: now}); err != nil {
		return fmt.Errorf("pause queue %q: %w", q.Name, err)
	}
	return nil
}

// writePeriodic moves the schedule's last slot forward to p.Last.
func (im *importer) writePeriodic(ctx context.Context, p *exportPeriodic, now time.Time) error {
	rows, err := im.c.store.PeriodicList(ctx, &store.PeriodicListParams{})
	if err != nil {
		return fmt.Errorf("read periodic schedule %q: %w", p.Name, err)
	}
	var from time.Time
	for _, r := range rows {
		if r.Name == p.Name {
			from = r.Last
		}
	}
	if !p.Last.After(from) {
		return nil
	}
	if _, err := im.c.store.PeriodicAdvance(ctx, &store.PeriodicAdvanceParams{Name: p.Name, From: from, To: p.Last, Now: now}); err != nil {
		return fmt.Errorf("set periodic schedule %q: %w", p.Name, err)
	}
	return nil
}

// settingsIn reads exported queue settings.
func settingsIn(v exportSettings) (store.QueueSettings, error) {
	s := store.QueueSettings{MaxRunning: v.MaxRunning, RateLimit: v.RateLimit, PartitionMaxRunning: v.PartitionMaxRunning,
		PartitionRateLimit: v.PartitionRateLimit, MaxDepth: v.MaxDepth}
	for _, f := range []struct {
		name string
		v    string
		to   *time.Duration
	}{{"rate_period", v.RatePeriod, &s.RatePeriod}, {"partition_rate_period", v.PartitionRatePeriod, &s.PartitionRatePeriod}} {
		if f.v == "" {
			continue
		}
		d, err := time.ParseDuration(f.v)
		if err != nil || d <= 0 {
			return s, fmt.Errorf("queue settings: %s must be a positive duration like 1m, got %q", f.name, f.v)
		}
		*f.to = d
	}
	switch v.Overflow {
	case "", "reject":
	case "drop-oldest":
		s.Overflow = store.OverflowDropOldest
	default:
		return s, fmt.Errorf("queue settings: overflow must be reject or drop-oldest, got %q", v.Overflow)
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("queue settings: %w", err)
	}
	return s, nil
}
