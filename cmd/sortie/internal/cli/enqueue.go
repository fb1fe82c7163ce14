package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/internal/strictjson"
)

const enqueueDescription = `
Enqueue adds one job of the given kind, with --args as its JSON payload, and
prints its ID. The job gets the same checks and defaults as one enqueued by
the Go API (queue default, priority 2, 25 attempts). A job whose --unique-key
another pending job holds is not added: it prints the holder's ID instead.`

// tagList is a repeatable --tag flag.
type tagList []string

func (t *tagList) String() string     { return strings.Join(*t, ",") }
func (t *tagList) Set(s string) error { *t = append(*t, s); return nil }

func runEnqueue(ctx context.Context, e *env, args []string) int {
	var (
		a                          adminFlags
		kind, payload, meta, runAt string
		opts                       sortie.EnqueueOpts
		tags                       tagList
	)
	fs := flagSet("enqueue", adminSynopsis+" --kind KIND [--args JSON] [--queue Q] [--priority N] [--run-in D | --run-at T] ...", enqueueDescription)
	a.register(fs)
	fs.StringVar(&kind, "kind", "", "the job's `kind`, which names its worker (required)")
	fs.StringVar(&payload, "args", "{}", "the job's args, as `JSON`")
	fs.StringVar(&opts.Queue, "queue", "", "the `queue` (default: default)")
	fs.IntVar(&opts.Priority, "priority", 0, "priority 1 (highest) to 4 (default 2)")
	fs.DurationVar(&opts.RunIn, "run-in", 0, "run after this long (e.g. 90s, 2h)")
	fs.StringVar(&runAt, "run-at", "", "run at this `time`, RFC 3339 (2026-01-02T15:04:05Z)")
	fs.IntVar(&opts.MaxAttempts, "max-attempts", 0, "attempts before the job is dead (default 25)")
	fs.StringVar(&opts.UniqueKey, "unique-key", "", "keep the job out while another pending job holds this `key`")
	fs.Var(&tags, "tag", "a `tag` for search and display; repeat for more")
	fs.StringVar(&meta, "meta", "", "a JSON `object` for the application's own bookkeeping")
	fs.DurationVar(&opts.Timeout, "timeout", 0, "cancel the handler's context after this long")
	fs.StringVar(&opts.PartitionKey, "partition", "", "the partition `key` for the queue's partition limits")
	pos, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return usageError(e, fs, "unexpected arguments %q (the payload goes in --args)", pos)
	}
	if kind == "" {
		return usageError(e, fs, "--kind is required")
	}
	if bad := invalidUTF8(kind, &opts, tags, runAt); bad != "" {
		return usageError(e, fs, "%s is not valid UTF-8", bad)
	}
	if !json.Valid([]byte(payload)) {
		return usageError(e, fs, "--args is not valid JSON: %s", jsonProblem(payload))
	}
	if err := strictjson.Check([]byte(payload)); err != nil {
		return usageError(e, fs, "--args: %s", strictProblem(err))
	}
	// As the HTTP API takes them: null is no args, and a worker decodes
	// only an object or an array.
	switch v := strings.TrimSpace(payload); {
	case v == "null":
		payload = "{}"
	case v[0] != '{' && v[0] != '[':
		return usageError(e, fs, "--args must be a JSON object or array, got %s", jsonKind(v))
	}
	if opts.RunIn < 0 {
		return usageError(e, fs, "--run-in must not be negative, got %s", opts.RunIn)
	}
	if runAt != "" {
		if opts.RunIn != 0 {
			return usageError(e, fs, "--run-in and --run-at together: give one of them")
		}
		t, err := time.Parse(time.RFC3339Nano, runAt)
		if err != nil {
			return usageError(e, fs, "--run-at %q is not an RFC 3339 time like 2026-01-02T15:04:05Z", runAt)
		}
		opts.RunAt = t
	}
	if meta != "" {
		if !json.Valid([]byte(meta)) {
			return usageError(e, fs, "--meta is not valid JSON: %s", jsonProblem(meta))
		}
		if v := strings.TrimSpace(meta); v[0] != '{' && v != "null" {
			return usageError(e, fs, "--meta must be a JSON object, got %s", jsonKind(v))
		}
		if err := json.Unmarshal([]byte(meta), &opts.Meta); err != nil {
			return usageError(e, fs, "--meta: %s", jsonProblem(meta))
		}
		if err := strictjson.Check([]byte(meta)); err != nil {
			return usageError(e, fs, "--meta: %s", strictProblem(err))
		}
	}
	opts.Tags = tags
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	res, err := c.Enqueue(ctx, jobjson.RawArgs{JobKind: kind, JSON: json.RawMessage(payload)}, &opts)
	if err != nil {
		return adminFail(e, fs, flagError(err, opts.RunIn > 0))
	}
	var warnings []string
	if !res.Duplicate {
		warnings = unworkedQueue(ctx, c, opts.Queue)
	}
	if a.json {
		out := struct {
			ID        int64    `json:"id"`
			Duplicate bool     `json:"duplicate"`
			Warnings  []string `json:"warnings,omitempty"`
		}{res.ID, res.Duplicate, warnings}
		if err := writeJSON(e.stdout, out); err != nil {
			return adminFail(e, fs, err)
		}
		return exitOK
	}
	if res.Duplicate {
		fmt.Fprintf(e.stdout, "not enqueued: job %d holds unique key %q\n", res.ID, opts.UniqueKey)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "enqueued job %d\n", res.ID)
	for _, w := range warnings {
		fmt.Fprintf(e.stderr, "enqueue: warning: %s\n", w)
	}
	return exitOK
}

// unworkedQueue returns a warning when registered processes exist and no
// live one works queue (empty: the default queue), as the HTTP API's
// enqueue does; nothing when the registry cannot say.
func unworkedQueue(ctx context.Context, c *sortie.Client, queue string) []string {
	if queue == "" {
		queue = sortie.QueueDefault
	}
	queues, processes, err := c.QueuesWorked(ctx)
	if err != nil || processes == 0 || queues[queue] > 0 {
		return nil
	}
	return []string{fmt.Sprintf("no registered worker process works queue %q: the job waits until one does (is the queue's name right? remote workers of the HTTP API are not registered)", queue)}
}

// enqueueFlags names the flag for each of sortie.FieldError's fields.
var enqueueFlags = map[string]string{
	"kind": "kind", "queue": "queue", "priority": "priority", "max_attempts": "max-attempts", "run_at": "run-at",
	"timeout": "timeout", "unique_key": "unique-key", "partition_key": "partition", "tags": "tag", "meta": "meta",
}

// flagError restates a job field's range error in terms of its flag: a
// usage error, since the command line was wrong.
func flagError(err error, runIn bool) error {
	var fe *sortie.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	flag, ok := enqueueFlags[fe.Field]
	if !ok {
		return err
	}
	if flag == "run-at" && runIn {
		flag = "run-in"
	}
	return usageErr{fmt.Errorf("--%s %s", flag, fe.Problem)}
}

// jsonKind names the kind of valid JSON value v for a message: "an
// array", "the number 5", "the string \"x\"".
func jsonKind(v string) string {
	switch {
	case v[0] == '[':
		return "an array"
	case v[0] == '{':
		return "an object"
	case v[0] == '"':
		return "the string " + shortText(v)
	case v == "null", v == "true", v == "false":
		return v
	default:
		return "the number " + shortText(v)
	}
}

// shortText is s, cut to 40 bytes with "..." when longer.
func shortText(s string) string {
	const most = 40
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// invalidUTF8 returns the first flag whose value is not valid UTF-8, or "".
func invalidUTF8(kind string, opts *sortie.EnqueueOpts, tags []string, runAt string) string {
	for _, f := range []struct{ flag, value string }{{"--kind", kind}, {"--queue", opts.Queue},
		{"--unique-key", opts.UniqueKey}, {"--partition", opts.PartitionKey}, {"--run-at", runAt}} {
		if !utf8.ValidString(f.value) {
			return f.flag
		}
	}
	for _, t := range tags {
		if !utf8.ValidString(t) {
			return fmt.Sprintf("--tag %q", t)
		}
	}
	return ""
}

// strictProblem says what strictjson found wrong with a flag's JSON.
func strictProblem(err error) string {
	var se *strictjson.Error
	if errors.As(err, &se) {
		return se.Describe("the JSON")
	}
	return err.Error()
}

// jsonProblem says what is wrong with s as JSON.
func jsonProblem(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s is a %T", s, v)
}
