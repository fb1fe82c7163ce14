package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/redisstore"
)

// startRedisServer starts a Redis server of t's own
// (redistest.StartServer), sets config on it (parameter and value pairs, as
// CONFIG SET takes them), and returns its address; the server is stopped
// when t ends. It skips t where the other Redis tests skip.
func startRedisServer(t *testing.T, config ...any) string {
	t.Helper()
	srv := redistest.StartServer(t, nil)
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(config) > 0 {
		c := redis.NewClient(opts)
		defer c.Close()
		if err := c.Do(t.Context(), append([]any{"CONFIG", "SET"}, config...)...).Err(); err != nil {
			t.Fatalf("CONFIG SET %v on redis-server %s: %v", config, opts.Addr, err)
		}
	}
	return opts.Addr
}

// freeAddr returns a loopback address where nothing listens (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// redisAdminStore is a key prefix of its own on the test server.
func redisAdminStore(t *testing.T) adminStore {
	t.Helper()
	u := redistest.StoreURL(t)
	st, err := redisstore.Open(context.Background(), u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return adminStore{flags: []string{"--store", u}, st: st}
}

// sortie serve on Redis: a job enqueued, fetched and completed through the
// HTTP API, and the dashboard answering; the job is completed in the store
// after serve stopped.
func TestServeRedis(t *testing.T) {
	t.Parallel()
	u := redistest.StoreURL(t)
	_, prefix, err := redisstore.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	r := startServe(t, "--store", u)
	if out := r.stdout.String(); !strings.Contains(out, ", key prefix "+prefix+"\n") {
		t.Errorf("serve printed %q, want it to name the key prefix", out)
	}
	code, out := post(t, r.base+"/jobs", `{"kind": "k", "queue": "rq", "args": {"n": 1}}`)
	if code != http.StatusCreated {
		t.Fatalf("enqueue: %d %v", code, out)
	}
	code, out = post(t, r.base+"/fetch", `{"queue": "rq", "wait": "5s", "worker": "remote"}`)
	jobs, _ := out["jobs"].([]any)
	if code != http.StatusOK || len(jobs) != 1 {
		t.Fatalf("fetch: %d %v, want the job", code, out)
	}
	job := jobs[0].(map[string]any)
	if code, out := post(t, r.base+"/jobs/"+jsonNumber(job["id"])+"/complete", `{"claim_token": `+jsonNumber(job["claim_token"])+`, "result": {"ok": true}}`); code != http.StatusOK {
		t.Fatalf("complete: %d %v", code, out)
	}
	res, err := http.Get(strings.TrimSuffix(r.base, "/api/v1") + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("GET / = %d, want the dashboard", res.StatusCode)
	}
	if code, stdout, stderr := r.stopNow(); code != exitOK || !strings.HasSuffix(stdout, "sortie serve: stopped\n") {
		t.Fatalf("stop: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	st, err := redisstore.Open(context.Background(), u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	row, err := st.JobGet(context.Background(), &store.JobGetParams{ID: int64(job["id"].(float64))})
	if err != nil || row.State != store.JobStateCompleted || !jsonEqual(row.Result, `{"ok": true}`) || row.AttemptedBy != "remote" {
		t.Errorf("job after serve stopped = %+v, %v; want completed by remote with its result", row, err)
	}
}

// bench runs every workload on Redis, on a key prefix of its own whose
// keys it deletes, and on the prefix of the URL, which it keeps.
func TestBenchRedis(t *testing.T) {
	t.Parallel()
	u := redistest.URL(t)
	code, stdout, stderr := run(t, "bench", "--store", u, "--workload", "all", "--jobs", "500",
		"--workers", "10", "--rate", "200", "--duration", "250ms")
	if code != exitOK {
		t.Fatalf("bench: exit status %d, stderr:\n%s", code, stderr)
	}
	for _, w := range []string{"enqueue-single", "enqueue-batch", "drain", "latency"} {
		if !regexp.MustCompile(`(?m)^redis +` + w + ` `).MatchString(stdout) {
			t.Errorf("bench printed:\n%s\nwant a row for redis %s", stdout, w)
		}
	}
	kept := redistest.StoreURL(t)
	if code, _, stderr := run(t, "bench", "--store", kept, "--workload", "enqueue-batch", "--jobs", "100"); code != exitOK {
		t.Fatalf("bench on a named prefix: exit status %d, stderr:\n%s", code, stderr)
	}
	st, err := redisstore.Open(context.Background(), kept, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	counts, err := st.JobCounts(context.Background(), &store.JobCountsParams{})
	if err != nil || len(counts) != 1 || counts[0].State != store.JobStateCompleted || counts[0].Count != 100 {
		t.Errorf("counts on the named prefix after bench = %+v, %v; want its 100 completed jobs kept", counts, err)
	}
}

// A Redis server that cannot be reached, refuses the credentials or may
// evict keys is one clear line at start, for serve and the other commands
// alike, naming the server and never the password.
func TestRedisStartErrors(t *testing.T) {
	t.Parallel()
	addr := startRedisServer(t, "requirepass", "s3cret", "maxmemory-policy", "allkeys-lru")
	down := freeAddr(t)
	for _, tt := range []struct {
		name, url, line string
	}{
		{"refused", "redis://" + down + "/0",
			"cannot reach the Redis server at " + down + ": dial tcp " + down + ": connect: connection refused"},
		{"no password", "redis://" + addr + "/0",
			"the Redis server at " + addr + " requires a password: give it in --store, redis://:PASSWORD@HOST:PORT (or redis://USER:PASSWORD@...)"},
		{"wrong password", "redis://:not-the-password@" + addr + "/0",
			`authentication failed: the Redis server at ` + addr + ` refused user "default" (check the user and password in --store): WRONGPASS invalid username-password pair or user is disabled.`},
		{"wrong user", "redis://ops:not-the-password@" + addr + "/0",
			`authentication failed: the Redis server at ` + addr + ` refused user "ops" (check the user and password in --store): WRONGPASS invalid username-password pair or user is disabled.`},
		{"eviction", "redis://:s3cret@" + addr + "/0",
			"redisstore: the server's maxmemory-policy is allkeys-lru; sortie needs noeviction, because any other policy lets Redis delete keys " +
				"when memory runs short, and a deleted key is a lost job (set maxmemory-policy noeviction: a full server then refuses enqueues instead)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, cmd := range [][]string{{"serve", "--addr", "127.0.0.1:0"}, {"queues"}, {"migrate", "--check"}, {"bench", "--workload", "drain"}} {
				code, stdout, stderr := run(t, append(cmd, "--store", tt.url)...)
				want := "sortie " + cmd[0] + ": " + tt.line + "\n"
				if cmd[0] == "bench" {
					want = "sortie bench: drain on redis: bench: open redis store: " + tt.line + "\n"
				}
				if code != exitError || stdout != "" || stderr != want {
					t.Errorf("sortie %q: exit status %d, stdout %q, stderr %q; want 1, nothing, and %q", cmd, code, stdout, stderr, want)
				}
				if strings.Contains(stderr, "not-the-password") || strings.Contains(stderr, "s3cret") {
					t.Errorf("sortie %q printed the password: %q", cmd, stderr)
				}
			}
		})
	}
}

// migrate on Redis loads the Functions library; --check says whether the
// server holds this sortie's, and changes nothing.
func TestMigrateRedis(t *testing.T) {
	t.Parallel()
	addr := startRedisServer(t)
	u := "redis://" + addr + "/0"
	what := "sortie's Functions library on the Redis server at " + addr
	v := strconv.Itoa(redisstore.LibraryVersion)
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"--check"}, exitError, "", "sortie migrate: " + what + " is not loaded yet, this sortie needs version " + v + ": run sortie migrate without --check\n"},
		{nil, exitOK, what + ": migrated from version 0 to " + v + "\n", ""},
		{nil, exitOK, what + ": already at version " + v + "\n", ""},
		{[]string{"--check"}, exitOK, what + ": up to date at version " + v + "\n", ""},
	} {
		code, stdout, stderr := run(t, append([]string{"migrate", "--store", u}, tt.args...)...)
		if code != tt.code || stdout != tt.stdout || stderr != tt.stderr {
			t.Errorf("migrate %q: exit status %d, stdout %q, stderr %q; want %d, %q, %q", tt.args, code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
		}
	}
}

// The commands for operators do not load sortie's library on a Redis
// server that holds none or an older one (once it is loaded, processes of
// older builds cannot start): they say to run migrate, and leave the
// server as it was; after migrate they work.
func TestRedisCommandsNeedMigrate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := startRedisServer(t)
	u := "redis://" + addr + "/0"
	v := redisstore.LibraryVersion
	refused := func(holds string, want int) {
		t.Helper()
		code, stdout, stderr := run(t, "queues", "--store", u)
		line := "sortie queues: the Redis server at " + addr + " does not hold this sortie's Functions library (" +
			holds + ", this build needs version " + strconv.Itoa(v) + "): run sortie migrate (processes of older sortie builds cannot start once it is loaded)\n"
		if code != exitError || stdout != "" || stderr != line {
			t.Errorf("queues: exit status %d, stdout %q, stderr %q; want 1, nothing, %q", code, stdout, stderr, line)
		}
		if got, err := redisstore.Version(ctx, u); err != nil || got != want {
			t.Errorf("library version after queues = %d, %v; want %d, unchanged", got, err, want)
		}
	}
	refused("it holds none", 0)
	if code, _, stderr := run(t, "migrate", "--store", u); code != exitOK {
		t.Fatalf("migrate: exit status %d, %s", code, stderr)
	}
	// The library of the build before this one, as an older process that
	// started after a restart would load it.
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "sortie", WithCode: true}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("FUNCTION LIST: %v, %v", libs, err)
	}
	this := fmt.Sprintf("local LIB_VERSION = %d\n", v)
	if !strings.Contains(libs[0].Code, this) {
		t.Fatalf("the library's code has no line %q", this)
	}
	older := strings.Replace(libs[0].Code, this, fmt.Sprintf("local LIB_VERSION = %d\n", v-1), 1)
	if err := c.FunctionLoadReplace(ctx, older).Err(); err != nil {
		t.Fatal(err)
	}
	refused("it holds version "+strconv.Itoa(v-1), v-1)
	if code, _, stderr := run(t, "migrate", "--store", u); code != exitOK {
		t.Fatalf("migrate: exit status %d, %s", code, stderr)
	}
	if code, _, stderr := run(t, "queues", "--store", u); code != exitOK {
		t.Errorf("queues after migrate: exit status %d, %s", code, stderr)
	}
}

// redisReply is an error reply of a Redis server.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// A server still loading its data is named, and serve's flag that waits
// for it is pointed out.
func TestExplainRedisLoading(t *testing.T) {
	err := fmt.Errorf("redisstore: check the sortie library: %w", redisReply("LOADING Redis is loading the dataset in memory"))
	got := explainRedisErr(err, "redis://127.0.0.1:6390/0").Error()
	want := "the Redis server at 127.0.0.1:6390 is still loading its data after a restart (LOADING): try again once it has " +
		"(sortie serve waits for it with --wait-for-store)"
	if got != want {
		t.Errorf("explainRedisErr(LOADING) = %q, want %q", got, want)
	}
}

// The flags that name PostgreSQL things are usage errors on Redis that say
// what to do instead.
func TestRedisFlagRules(t *testing.T) {
	t.Parallel()
	const u = "redis://127.0.0.1:1/0"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--store", u, "--schema", "s"}, "sortie serve: --schema applies to postgres stores only: a Redis store's key prefix goes in the URL, redis://HOST:PORT/DB?prefix=NAME"},
		{[]string{"jobs", "--store", u, "--schema", "s"}, "sortie jobs: --schema applies to postgres stores only: a Redis store's key prefix goes in the URL, redis://HOST:PORT/DB?prefix=NAME"},
		{[]string{"serve", "--store", u, "--migrate"}, "sortie serve: --migrate applies to postgres stores only: Redis has no schema, and serve loads sortie's Functions library as it starts"},
		{[]string{"queues", "--store", "redis://h:6379/x"}, `sortie queues: --store: redisstore: parse URL: redis: invalid database number: "x"`},
		{[]string{"queues", "--store", "redis://h?prefix=a{b}"}, `sortie queues: --store: redisstore: prefix "a{b}" may not contain '{' or '}'`},
	} {
		code, stdout, stderr := run(t, tt.args...)
		if first, _, _ := strings.Cut(stderr, "\n"); code != exitUsage || stdout != "" || first != tt.want {
			t.Errorf("sortie %q: exit status %d, stdout %q, stderr %q; want 2 and first line %q", tt.args, code, stdout, stderr, tt.want)
		}
	}
}

// While --wait-for-store waits for a Redis server that is down, serve
// answers on its address at once: the health check 503, saying what it
// waits for, rather than a connection that hangs until the wait ends (a
// supervisor's probe would time out). Once the server is up, the same
// address serves the API.
func TestServeAnswersWhileWaitingForStore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, nil)
	srv.Down(t, redistest.Term)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--store", srv.URL, "--wait-for-store", "2m", "--addr", addr}, stdout, stderr)
	}()
	var code int
	ended := false
	stop := func() int {
		if !ended {
			cancel()
			code, ended = <-done, true
		}
		return code
	}
	t.Cleanup(func() { stop() }) // serve never outlives the test
	// A probe gives up after a few seconds, as a supervisor's does.
	probe := &http.Client{Timeout: 3 * time.Second}
	health := func() (int, string) {
		res, err := probe.Get("http://" + addr + "/api/v1/health")
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, fmt.Sprint(out)
	}
	waitFor(t, "serve to answer while it waits for Redis", func() bool {
		code, body := health()
		if strings.Contains(body, "Client.Timeout") {
			t.Fatalf("health while serve waits: no answer within %v (%s); want 503 at once", probe.Timeout, body)
		}
		if code != 0 && (code != http.StatusServiceUnavailable || !strings.Contains(body, "sortie serve is starting") || !strings.Contains(body, "--wait-for-store")) {
			t.Fatalf("health while serve waits: %d %s; want 503 saying it waits for its store", code, body)
		}
		return code != 0
	})
	srv.Up(t)
	waitFor(t, "the API once Redis is up", func() bool {
		code, _ := health()
		return code == http.StatusOK
	})
	if code := stop(); code != exitOK || !strings.Contains(stdout.String(), "API on http://"+addr+"/api/v1") {
		t.Errorf("serve: exit %d, stdout %q, stderr %q; want 0 after serving the API on %s", code, stdout, stderr, addr)
	}
}
