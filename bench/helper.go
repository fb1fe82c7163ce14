package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// HelperArgs tell a helper process of interval what to work.
type HelperArgs struct {
	// Queue is the run's queue.
	Queue string
	// Workers is the size of the helper's worker pool.
	Workers int
	// Duration is how long the helper works the queue once started; 0
	// means until its context ends (a stop signal), which is then a
	// normal end (the helpers of interval and DrainProcesses).
	Duration time.Duration
	// Period is the queue's rate period, which sets how long each job
	// takes (see holdJob); 0 makes the jobs no-ops.
	Period time.Duration
	// ID is the helper client's ID, recorded as AttemptedBy.
	ID string
}

// Flags returns a as command-line flags: --queue, --workers, --duration,
// --period and --id. SetFlags defines the same flags on a FlagSet.
func (a HelperArgs) Flags() []string {
	return []string{
		"--queue", a.Queue, "--workers", strconv.Itoa(a.Workers),
		"--duration", a.Duration.String(), "--period", a.Period.String(), "--id", a.ID,
	}
}

// SetFlags defines on fs the flags Flags returns, parsed into a.
func (a *HelperArgs) SetFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.Queue, "queue", "", "the `queue` to work")
	fs.IntVar(&a.Workers, "workers", 0, "`C` worker goroutines")
	fs.DurationVar(&a.Duration, "duration", 0, "how long to work the queue, a `duration`")
	fs.DurationVar(&a.Period, "period", 0, "the queue's rate period, a `duration`")
	fs.StringVar(&a.ID, "id", "", "the client's `ID`, recorded as AttemptedBy")
}

// The helper's protocol on its stdout: helperReady once its client has
// started, then at the end one line of JSON, a helperReport.
const helperReady = "sortie-bench-helper ready"

// WriteHelperReady writes the helper protocol's line that says the
// helper's client has started (a peer's helper, for RunHelpers).
func WriteHelperReady(w io.Writer) error {
	_, err := fmt.Fprintln(w, helperReady)
	return err
}

// WriteHelperReport writes the helper protocol's last line: the helper's
// ID and the sequence numbers of the jobs its handler ran, once per call.
func WriteHelperReport(w io.Writer, id string, ran []int64) error {
	b, err := json.Marshal(helperReport{ID: id, Ran: ran})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// helperReport is what a helper process reports when it stops: the
// sequence numbers of the jobs its handler ran, once per call.
type helperReport struct {
	ID    string  `json:"id"`
	Ran   []int64 `json:"ran"`
	Stray int64   `json:"stray,omitempty"`
}

// RunHelper is the helper process of interval and of DrainProcesses: it
// works a.Queue on st with a.Workers workers for a.Duration (or until ctx
// ends, when a.Duration is 0), writing the helper protocol to stdout (a
// line once its client started, a report of the jobs it ran once it
// stopped). The queue's settings come from the store. With a.Duration
// set, it returns ctx's error if ctx ends first; the report is written
// either way.
func RunHelper(ctx context.Context, st store.Store, a HelperArgs, stdout io.Writer, logger *slog.Logger) error {
	if a.Queue == "" || a.Workers < 1 || a.Duration < 0 || a.Period < 0 || a.ID == "" {
		return fmt.Errorf("bench: helper needs a queue, at least 1 worker, a duration and period not negative, and an ID, got %+v", a)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rep := helperReport{ID: a.ID}
	var mu sync.Mutex // guards rep
	workers := sortie.NewWorkers()
	handle := func(_ context.Context, job *sortie.Job[jobArgs]) error {
		mu.Lock()
		if job.Args.Seq < 0 {
			rep.Stray++
		} else {
			rep.Ran = append(rep.Ran, job.Args.Seq)
		}
		mu.Unlock()
		if a.Period > 0 {
			holdJob(a.Period)
		}
		return nil
	}
	if err := sortie.RegisterWorker(workers, sortie.WorkFunc(handle), &sortie.WorkerOpts{Queue: a.Queue}); err != nil {
		return err
	}
	c, err := sortie.NewClient(st, &sortie.Config{
		Queues:  map[string]sortie.QueueConfig{a.Queue: {MaxWorkers: a.Workers}},
		Workers: workers,
		Logger:  logger,
		ID:      a.ID,
	})
	if err != nil {
		return err
	}
	stop := func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			return fmt.Errorf("bench: helper: stop client: %w", err)
		}
		return nil
	}
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("bench: helper: start client: %w", err)
	}
	if _, err := fmt.Fprintln(stdout, helperReady); err != nil {
		return errors.Join(fmt.Errorf("bench: helper: %w", err), stop())
	}
	var until <-chan time.Time
	if a.Duration > 0 {
		timer := time.NewTimer(a.Duration)
		defer timer.Stop()
		until = timer.C
	}
	select {
	case <-ctx.Done():
	case <-until:
	}
	if err := stop(); err != nil {
		return err
	}
	mu.Lock()
	b, err := json.Marshal(rep)
	mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
		return fmt.Errorf("bench: helper: %w", err)
	}
	if a.Duration == 0 {
		return nil
	}
	return ctx.Err()
}

// helperWaitDelay bounds how long Wait waits for a killed helper's output.
const helperWaitDelay = 5 * time.Second

// helperProcess is a running helper: its command, what it wrote, and its
// end. Whoever starts one must call wait, on every path.
type helperProcess struct {
	id     string
	cmd    *exec.Cmd
	stdout *helperOutput
	stderr *tailBuffer
	// done closes when the process has exited and its output is read;
	// then err is Wait's error.
	done chan struct{}
	err  error
}

// startHelper starts the command line args with the helper flags of a
// appended. ctx kills the process when it ends.
func startHelper(ctx context.Context, args []string, a HelperArgs) (*helperProcess, error) {
	if len(args) == 0 {
		return nil, errors.New("bench: HelperCommand returned an empty command line")
	}
	args = append(args[:len(args):len(args)], a.Flags()...)
	p := &helperProcess{
		id:     a.ID,
		cmd:    exec.CommandContext(ctx, args[0], args[1:]...),
		stdout: &helperOutput{ready: make(chan struct{})},
		stderr: &tailBuffer{max: 4 << 10},
		done:   make(chan struct{}),
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.WaitDelay = helperWaitDelay
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start client process %s: %w", a.ID, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady waits until the helper is about to start its client, for at
// most timeout.
func (p *helperProcess) waitReady(ctx context.Context, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.stdout.ready:
		return nil
	case <-p.done:
		return p.failure("exited before it was ready")
	case <-timer.C:
		return p.failure(fmt.Sprintf("not ready after %s", timeout))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait waits for the helper to exit and returns its report.
func (p *helperProcess) wait() (helperReport, error) {
	<-p.done
	if p.err != nil {
		return helperReport{}, p.failure(p.err.Error())
	}
	var rep helperReport
	line := p.stdout.lastLine()
	if err := json.Unmarshal(line, &rep); err != nil {
		return helperReport{}, p.failure(fmt.Sprintf("wrote no report (last line %q)", line))
	}
	return rep, nil
}

// failure returns an error saying what went wrong with the helper, with
// the end of what it wrote on stderr.
func (p *helperProcess) failure(what string) error {
	msg := fmt.Sprintf("bench: client process %s: %s", p.id, what)
	if tail := bytes.TrimSpace(p.stderr.bytes()); len(tail) > 0 {
		msg += "; its stderr ends:\n" + string(tail)
	}
	return errors.New(msg)
}

// helperOutput is a helper's stdout: it closes ready at the protocol's
// ready line and keeps everything for the report.
type helperOutput struct {
	mu    sync.Mutex // guards buf and sawReady
	buf   []byte
	ready chan struct{}
	// sawReady is whether ready is closed.
	sawReady bool
}

func (o *helperOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, b...)
	if !o.sawReady && bytes.Contains(o.buf, []byte(helperReady+"\n")) {
		o.sawReady = true
		close(o.ready)
	}
	return len(b), nil
}

// lastLine returns the last non-empty line written.
func (o *helperOutput) lastLine() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := bytes.TrimRight(o.buf, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return bytes.Clone(b)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	mu  sync.Mutex // guards buf
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}
