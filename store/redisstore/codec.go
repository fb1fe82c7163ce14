package redisstore

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/steps"
)

// Times travel as 18 digits of microseconds since the Unix epoch,
// zero-padded so that string order is time order; the zero time as "0".
func micros(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return fmt.Sprintf("%018d", t.UnixMicro())
}

func durMicros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

// idString is a job ID as the library keeps it: 16 digits, zero-padded,
// so that string order is ID order.
func idString(id int64) string { return fmt.Sprintf("%016d", id) }

// parseStored parses a time field of a job hash: a field is present only
// when set, so "0" is the Unix epoch.
func parseStored(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

// parseMicros parses a time argument or reply, where 0 means none.
func parseMicros(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

// extra is what a job hash keeps in its field x: the fields the Lua
// library never reads.
type extra struct {
	Tags    []string        `json:"t,omitempty"`
	Meta    json.RawMessage `json:"m,omitempty"`
	Timeout time.Duration   `json:"o,omitempty"`
}

func encodeExtra(j *store.NewJob) (string, error) {
	return encodeExtraOf(j.Tags, j.Meta, j.Timeout)
}

func encodeExtraOf(tags []string, meta []byte, timeout time.Duration) (string, error) {
	if len(tags) == 0 && len(meta) == 0 && timeout == 0 {
		return "", nil
	}
	e := extra{Tags: tags, Timeout: timeout}
	if len(meta) > 0 {
		if !json.Valid(meta) {
			return "", fmt.Errorf("meta is not valid JSON: %w", store.ErrInvalidArgument)
		}
		e.Meta = meta
	}
	b, err := json.Marshal(e)
	return string(b), err
}

// errorLine is one attempt error as the library stores it (one JSON line).
type errorLine struct {
	Attempt int    `json:"a"`
	At      string `json:"t"`
	Message string `json:"m"`
	Stack   string `json:"s,omitempty"`
}

func decodeErrors(s string) ([]store.AttemptError, error) {
	if s == "" {
		return nil, nil
	}
	var out []store.AttemptError
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 4096), len(s)+1)
	for sc.Scan() {
		var l errorLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("decode error history: %w", err)
		}
		out = append(out, store.AttemptError{Attempt: l.Attempt, At: parseStored(l.At), Message: l.Message, Stack: l.Stack})
	}
	return out, sc.Err()
}

// encodeErrors is decodeErrors' inverse: the error history as the
// library keeps it, one JSON line per error.
func encodeErrors(errs []store.AttemptError) (string, error) {
	var b strings.Builder
	for i, e := range errs {
		at := ""
		if !e.At.IsZero() {
			at = micros(e.At)
		}
		line, err := json.Marshal(errorLine{Attempt: e.Attempt, At: at, Message: e.Message, Stack: e.Stack})
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.Write(line)
	}
	return b.String(), nil
}

// encodeRow is decodeRow's inverse: the field, value pairs of the hash
// that keeps r in r.State, as the library's own transitions leave it
// (see sortie.lua's load_job). Fields at their usual value or empty are
// left out, and a running job's attempt is stored as the attempts before
// its current one.
func encodeRow(r *store.JobRow) ([]any, error) {
	f := make([]any, 0, 40)
	add := func(field, v string) { f = append(f, field, v) }
	addTime := func(field string, t time.Time) {
		if !t.IsZero() {
			add(field, micros(t))
		}
	}
	add("q", r.Queue)
	add("k", r.Kind)
	add("st", string(r.State))
	add("ra", micros(r.RunAt))
	add("args", string(r.Args))
	if r.Priority != store.PriorityDefault {
		add("p", strconv.Itoa(r.Priority))
	}
	a := r.Attempt
	if r.State == store.JobStateRunning {
		a--
	}
	if a != 0 {
		add("a", strconv.Itoa(a))
	}
	if r.MaxAttempts != store.MaxAttemptsDefault {
		add("ma", strconv.Itoa(r.MaxAttempts))
	}
	if r.CreatedAt.UnixMicro() != r.RunAt.UnixMicro() {
		add("ca", micros(r.CreatedAt))
	}
	x, err := encodeExtraOf(r.Tags, r.Meta, r.Timeout)
	if err != nil {
		return nil, err
	}
	for _, kv := range [][2]string{{"x", x}, {"u", r.UniqueKey}, {"pk", r.PartitionKey}, {"atb", r.AttemptedBy}} {
		if kv[1] != "" {
			add(kv[0], kv[1])
		}
	}
	if r.IgnoreDepFailure {
		add("idf", "1")
	}
	if r.WorkflowID != 0 {
		add("wf", idString(r.WorkflowID))
	}
	if len(r.DependsOn) > 0 {
		ds := make([]string, len(r.DependsOn))
		for i, d := range r.DependsOn {
			ds[i] = idString(d)
		}
		add("d", strings.Join(ds, ","))
	}
	if r.CancelledBy != 0 {
		add("cby", idString(r.CancelledBy))
	}
	if r.ParentID != 0 {
		add("par", idString(r.ParentID))
		add("ss", r.SpawnStep)
	}
	if r.CancelWithParent {
		add("cwp", "1")
	}
	if w := steps.WaitsFor(r.State, r.WaitsFor); w != "" {
		add("wt", w)
	}
	if len(r.Errors) > 0 {
		e, err := encodeErrors(r.Errors)
		if err != nil {
			return nil, err
		}
		add("e", e)
	}
	if r.Result != nil {
		add("res", string(r.Result))
		add("hr", "1")
	}
	if r.Progress != 0 {
		add("pr", strconv.FormatFloat(r.Progress, 'g', -1, 64))
	}
	if r.CancelRequested {
		add("cr", "1")
	}
	if r.ClaimToken != 0 {
		add("tok", strconv.FormatInt(r.ClaimToken, 10))
	}
	addTime("ata", r.AttemptedAt)
	addTime("fa", r.FinalizedAt)
	addTime("lu", r.LeaseUntil)
	return f, nil
}

// decodeRow makes a JobRow of a job hash (HGETALL's field, value pairs).
func decodeRow(id int64, kv []string) (*store.JobRow, error) {
	// A hash leaves out fields at their usual value (see sortie.lua's
	// load_job): priority 2, 25 attempts, created at RunAt.
	r := &store.JobRow{ID: id, Priority: store.PriorityDefault, MaxAttempts: store.MaxAttemptsDefault}
	var x, errs string
	hasCreated := false
	hasResult := false
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1]
		switch kv[i] {
		case "q":
			r.Queue = v
		case "k":
			r.Kind = v
		case "st":
			r.State = store.JobState(v)
		case "p":
			r.Priority, _ = strconv.Atoi(v)
		case "a":
			r.Attempt, _ = strconv.Atoi(v)
		case "ma":
			r.MaxAttempts, _ = strconv.Atoi(v)
		case "ra":
			r.RunAt = parseStored(v)
		case "ca":
			r.CreatedAt, hasCreated = parseStored(v), true
		case "ata":
			r.AttemptedAt = parseStored(v)
		case "atb":
			r.AttemptedBy = v
		case "fa":
			r.FinalizedAt = parseStored(v)
		case "lu":
			r.LeaseUntil = parseStored(v)
		case "tok":
			r.ClaimToken, _ = strconv.ParseInt(v, 10, 64)
		case "u":
			r.UniqueKey = v
		case "pk":
			r.PartitionKey = v
		case "e":
			errs = v
		case "args":
			r.Args = []byte(v)
		case "x":
			x = v
		case "res":
			r.Result = []byte(v)
		case "hr":
			hasResult = v == "1"
		case "pr":
			r.Progress, _ = strconv.ParseFloat(v, 64)
		case "cr":
			r.CancelRequested = v == "1"
		case "wf":
			r.WorkflowID, _ = strconv.ParseInt(v, 10, 64)
		case "d":
			for _, s := range strings.Split(v, ",") {
				d, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("job %d: bad dependency list %q", id, v)
				}
				r.DependsOn = append(r.DependsOn, d)
			}
		case "idf":
			r.IgnoreDepFailure = v == "1"
		case "cby":
			r.CancelledBy, _ = strconv.ParseInt(v, 10, 64)
		case "par":
			r.ParentID, _ = strconv.ParseInt(v, 10, 64)
		case "ss":
			r.SpawnStep = v
		case "cwp":
			r.CancelWithParent = v == "1"
		case "wt":
			r.WaitsFor = v
		}
	}
	r.WaitsFor = steps.WaitsFor(r.State, r.WaitsFor)
	if r.State == "" {
		return nil, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	}
	if r.State == store.JobStateRunning {
		// The claim does not write the attempt; see sortie.lua's load_job.
		r.Attempt++
	}
	if !hasCreated {
		r.CreatedAt = r.RunAt
	}
	if !hasResult {
		r.Result = nil
	} else if r.Result == nil {
		r.Result = []byte{}
	}
	if x != "" {
		var e extra
		if err := json.Unmarshal([]byte(x), &e); err != nil {
			return nil, fmt.Errorf("job %d: decode tags and meta: %w", id, err)
		}
		r.Tags, r.Timeout = e.Tags, e.Timeout
		if len(e.Meta) > 0 {
			r.Meta = []byte(e.Meta)
		}
	}
	var err error
	if r.Errors, err = decodeErrors(errs); err != nil {
		return nil, fmt.Errorf("job %d: %w", id, err)
	}
	return r, nil
}

// rowFromReply decodes a job hash as a Lua function returns it (a list of
// field, value strings); the ID is in the hash's key, so it is passed.
func rowFromReply(id int64, v any) (*store.JobRow, error) {
	kv, err := stringList(v)
	if err != nil {
		return nil, err
	}
	return decodeRow(id, kv)
}

// stringList converts a script's array reply of strings.
func stringList(v any) ([]string, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T from the sortie library", v)
	}
	out := make([]string, len(arr))
	for i, e := range arr {
		switch e := e.(type) {
		case string:
			out[i] = e
		case int64:
			out[i] = strconv.FormatInt(e, 10)
		default:
			return nil, fmt.Errorf("unexpected element %T in a reply of the sortie library", e)
		}
	}
	return out, nil
}
