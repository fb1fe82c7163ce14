package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortiehq/sortie/internal/testkit/pgtest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/sqlitestore"
)

// lockedBuffer is a bytes.Buffer written by a running command and read by
// the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// written is closed and replaced at every write, when not nil.
	written chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written != nil {
		close(l.written)
		l.written = nil
	}
	return l.b.Write(p)
}

// next returns what was written so far and a channel closed at the next
// write.
func (l *lockedBuffer) next() (string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written == nil {
		l.written = make(chan struct{})
	}
	return l.b.String(), l.written
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// running is a sortie serve started by a test.
type running struct {
	base           string // http://127.0.0.1:PORT/api/v1
	cancel         context.CancelFunc
	done           chan int
	once           sync.Once
	code           int
	stdout, stderr *lockedBuffer
}

// stopNow stops the server as a signal would and returns how it ended.
func (r *running) stopNow() (code int, stdout, stderr string) {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.code = <-r.done:
		case <-time.After(20 * time.Second):
			r.code = -1
		}
	})
	return r.code, r.stdout.String(), r.stderr.String()
}

// startServe runs sortie serve with args on a free loopback port and waits
// until it listens.
func startServe(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan int, 1), stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	done := r.done
	go func() {
		done <- Run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), r.stdout, r.stderr)
	}()
	t.Cleanup(func() {
		if code, stdout, stderr := r.stopNow(); code != exitOK {
			t.Errorf("sortie serve %q stopped with %d: stdout %q, stderr %q", args, code, stdout, stderr)
		}
	})
	listening := regexp.MustCompile(`API on (https?://\S+/api/v1)`)
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		out, written := r.stdout.next()
		if m := listening.FindStringSubmatch(out); m != nil {
			r.base = m[1]
			return r
		}
		select {
		case <-written:
		case code := <-done:
			r.once.Do(func() { r.code = code })
			t.Fatalf("sortie serve %q exited with %d: stdout %q, stderr %q", args, code, r.stdout, r.stderr)
		case <-timeout.C:
			t.Fatalf("sortie serve %q did not listen within 20s: stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
	}
}

func post(t *testing.T, url, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return res.StatusCode, out
}

// sortie serve on a SQLite file it creates: enqueue through HTTP, stop on
// a signal (ctx), and the job is in the file.
func TestServeSQLite(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "jobs.db")
	r := startServe(t, "--store", db)
	code, out := post(t, r.base+"/jobs", `{"kind": "email.send", "args": {"to": "ada@example.com"}}`)
	if code != http.StatusCreated {
		t.Fatalf("enqueue: %d %v", code, out)
	}
	if code, stdout, stderr := r.stopNow(); code != exitOK || !strings.HasSuffix(stdout, "sortie serve: stopped\n") {
		t.Fatalf("stop: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	st, err := sqlitestore.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	row, err := st.JobGet(context.Background(), &store.JobGetParams{ID: int64(out["id"].(float64))})
	if err != nil || row.Kind != "email.send" || string(row.Args) != `{"to":"ada@example.com"}` {
		t.Errorf("job in the file after serve stopped = %+v, %v", row, err)
	}
}

// Listening beyond loopback takes a token, and then every request needs it.
func TestServeTokens(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "jobs.db")
	code, stdout, stderr := run(t, "serve", "--store", db, "--addr", "0.0.0.0:0")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "without a token would let anyone who reaches it enqueue, cancel and delete jobs") {
		t.Errorf("serve on 0.0.0.0 without a token: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	r := startServe(t, "--store", db, "--token", "t0ken, second")
	if code, out := post(t, r.base+"/jobs", `{"kind": "k"}`); code != http.StatusUnauthorized {
		t.Errorf("enqueue without the token: %d %v, want 401", code, out)
	}
	if code, out := post(t, r.base+"/jobs", `{"kind": "k"}`, "Authorization", "Bearer second"); code != http.StatusCreated {
		t.Errorf("enqueue with the token: %d %v, want 201", code, out)
	}
}

// On PostgreSQL serve needs a migrated schema, or --migrate.
func TestServePostgres(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	code, _, stderr := run(t, "serve", "--store", url, "--schema", schema, "--addr", "127.0.0.1:0")
	if code != exitError || !strings.Contains(stderr, "has no sortie tables") || !strings.Contains(stderr, "or pass --migrate") {
		t.Errorf("serve on an empty schema: exit status %d, stderr %q; want 1, naming --migrate", code, stderr)
	}
	r := startServe(t, "--store", url, "--schema", schema, "--migrate")
	if code, out := post(t, r.base+"/jobs", `{"kind": "k", "queue": "pg"}`); code != http.StatusCreated {
		t.Errorf("enqueue: %d %v", code, out)
	}
	code, out := post(t, r.base+"/fetch", `{"queue": "pg", "wait": "1s"}`)
	if jobs, _ := out["jobs"].([]any); code != http.StatusOK || len(jobs) != 1 {
		t.Errorf("fetch: %d %v, want the job", code, out)
	}
}

// serve rescues the jobs of remote workers that stopped heartbeating: once
// the lease ends the job is claimed again, as attempt 2, and the first
// worker's late report is refused.
func TestServeRescuesAbandonedClaims(t *testing.T) {
	t.Parallel()
	r := startServe(t, "--store", filepath.Join(t.TempDir(), "jobs.db"))
	if code, out := post(t, r.base+"/jobs", `{"kind": "k", "queue": "remote"}`); code != http.StatusCreated {
		t.Fatalf("enqueue: %d %v", code, out)
	}
	fetch := func(body string) map[string]any {
		t.Helper()
		code, out := post(t, r.base+"/fetch", body)
		jobs, _ := out["jobs"].([]any)
		if code != http.StatusOK || len(jobs) != 1 {
			t.Fatalf("fetch %s: %d %v, want one job", body, code, out)
		}
		return jobs[0].(map[string]any)
	}
	first := fetch(`{"queue": "remote", "worker": "gone", "lease": "1s"}`)
	// The rescue runs every 5 s; the second worker waits for it.
	second := fetch(`{"queue": "remote", "worker": "alive", "wait": "30s"}`)
	if second["id"] != first["id"] || second["attempt"] != 2.0 || second["attempted_by"] != "alive" {
		t.Errorf("claim after the rescue = %v, want job %v's attempt 2 by alive", second, first["id"])
	}
	if code, out := post(t, r.base+"/jobs/"+jsonNumber(first["id"])+"/complete", `{"claim_token": `+jsonNumber(first["claim_token"])+`}`); code != http.StatusConflict {
		t.Errorf("late report of the rescued claim: %d %v, want 409", code, out)
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// --wait-for-store keeps serve trying to reach a PostgreSQL or Redis
// server that is down (a supervisor started it during a database
// restart), logging the wait, and gives up after the time it names.
func TestServeWaitsForStore(t *testing.T) {
	t.Parallel()
	down := "postgres://postgres@127.0.0.1:1/sortie?sslmode=disable&connect_timeout=1"
	code, _, stderr := run(t, "serve", "--store", down, "--wait-for-store", "400ms", "--addr", "127.0.0.1:0")
	if code != exitError || !strings.Contains(stderr, "server unreachable, waiting for it") || !strings.Contains(stderr, "cannot reach the PostgreSQL server at 127.0.0.1:1") || !strings.Contains(stderr, "gave up waiting for it after 400ms") {
		t.Errorf("serve with the server down: exit status %d, stderr %q; want 1 after logging the wait and giving up", code, stderr)
	}
	code, _, stderr = run(t, "serve", "--store", "redis://127.0.0.1:1/0", "--wait-for-store", "400ms", "--addr", "127.0.0.1:0")
	if code != exitError || !strings.Contains(stderr, "server unreachable, waiting for it") || !strings.Contains(stderr, "cannot reach the Redis server at 127.0.0.1:1") || !strings.Contains(stderr, "gave up waiting for it after 400ms") {
		t.Errorf("serve with the Redis server down: exit status %d, stderr %q; want 1 after logging the wait and giving up", code, stderr)
	}
}

// serve's own API refuses to stop the client serving it; a stop command
// for that process sent another way (the command line) stops the whole
// server gracefully, instead of leaving it answering with no rescue.
func TestServeStopCommand(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "jobs.db")
	r := startServe(t, "--store", db)
	var id string
	waitFor(t, "serve's process in the registry", func() bool {
		res, err := http.Get(r.base + "/processes")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var out struct{ Processes []struct{ ID string } }
		if json.NewDecoder(res.Body).Decode(&out) != nil || len(out.Processes) != 1 {
			return false
		}
		id = out.Processes[0].ID
		return true
	})
	if code, out := post(t, r.base+"/processes/"+id+"/stop", ""); code != http.StatusConflict {
		t.Fatalf("stop through serve's own API: %d %v, want 409", code, out)
	}
	if code, stdout, stderr := run(t, "processes", "--store", db, "--stop", id); code != exitOK {
		t.Fatalf("sortie processes --stop %s: exit status %d, stdout %q, stderr %q", id, code, stdout, stderr)
	}
	// The server acts at its next beat, within 10 s.
	select {
	case code := <-r.done:
		r.once.Do(func() { r.code = code })
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still runs 30s after a stop command; stderr %q", r.stderr)
	}
	if r.code != exitOK || !strings.Contains(r.stderr.String(), "a stop command reached this server's client: shutting down") ||
		!strings.HasSuffix(r.stdout.String(), "sortie serve: stopped\n") {
		t.Errorf("serve after a stop command: exit status %d, stdout %q, stderr %q; want a graceful stop", r.code, r.stdout, r.stderr)
	}
}
