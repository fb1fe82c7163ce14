package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/httpapi"
	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/childproc"
)

// startAPI serves the HTTP API on tg's store and returns its base URL
// (http://127.0.0.1:PORT/api/v1) with the function that stops it: `sortie
// serve` in a process of its own, or, for a store only this process can
// reach, the same API handler served from the test process.
func startAPI(t *testing.T, tg *target) (base string, stop func()) {
	t.Helper()
	if tg.b.serveArgs == nil {
		return startLocalAPI(t, tg)
	}
	flags, err := tg.b.serveArgs(tg.url)
	if err != nil {
		t.Fatal(err)
	}
	args, err := json.Marshal(append([]string{"serve", "--addr", "127.0.0.1:0"}, flags...))
	if err != nil {
		t.Fatal(err)
	}
	p := startProc(t, t.TempDir(), childServe, "serve", map[string]string{envArgs: string(args)})
	listening := regexp.MustCompile(`API on (http://\S+/api/v1)`)
	testkit.WaitFor(t, 30*time.Second, "sortie serve listens", []testkit.Watched{p}, func() string { return childproc.Tail(p.Log, 20) }, func() (bool, error) {
		m := listening.FindStringSubmatch(childproc.Tail(p.Log, 20))
		if m != nil {
			base = m[1]
		}
		return m != nil, nil
	})
	return base, func() { p.Stop(t, 30*time.Second) }
}

// startLocalAPI serves the API handler `sortie serve` serves, on a client
// of tg's store in the test process.
func startLocalAPI(t *testing.T, tg *target) (string, func()) {
	t.Helper()
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	client, err := sortie.NewClient(tg.st, &sortie.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stopping := make(chan struct{})
	srv := &http.Server{Handler: httpapi.New(client, &httpapi.Options{Logger: logger, Stopping: stopping}), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var once atomic.Bool
	stop := func() {
		if !once.CompareAndSwap(false, true) {
			return
		}
		close(stopping)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("stop the API server: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the API server: %v", err)
		}
		if err := client.Stop(ctx); err != nil {
			t.Errorf("stop the API's client: %v", err)
		}
	}
	t.Cleanup(stop)
	return "http://" + ln.Addr().String() + "/api/v1", stop
}

// apiClient makes requests to the API and counts them and their answers.
type apiClient struct {
	base string
	http *http.Client
	// requests counts the requests made; status5xx those answered 5xx,
	// failed those that got no answer.
	requests, status5xx, failed atomic.Int64
	// last5xx is the last 5xx answer, for the failure message.
	last5xx atomic.Value
	// mu guards unanswered: the first requests that got no answer, with
	// why (EOF, reset) and the request the same sender made just before.
	mu         sync.Mutex
	unanswered []string
}

// noAnswer records that method path got no answer, err saying why, on
// the connection conn describes.
func (a *apiClient) noAnswer(method, path string, err error, conn *connInfo) {
	a.failed.Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.unanswered) < 10 {
		a.unanswered = append(a.unanswered, fmt.Sprintf("%s %s: %v (%s)", method, path, err, conn))
	}
}

// connInfo is the connection a request went out on, for the failure
// message of a request that got no answer: a new one, or one reused after
// it sat idle (a server that closes an idle connection without saying so
// makes the next request on it fail with EOF).
type connInfo struct {
	got             bool
	local           string
	reused, wasIdle bool
	idleFor         time.Duration
}

func (c *connInfo) String() string {
	switch {
	case !c.got:
		return "no connection"
	case c.reused:
		return fmt.Sprintf("reused connection from %s, idle %v for %s", c.local, c.wasIdle, c.idleFor)
	}
	return "new connection from " + c.local
}

// trace records in c the connection a request gets.
func (c *connInfo) trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		c.got, c.reused, c.wasIdle, c.idleFor = true, i.Reused, i.WasIdle, i.IdleTime
		if i.Conn != nil {
			c.local = i.Conn.LocalAddr().String()
		}
	}})
}

func newAPIClient(base string) *apiClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	return &apiClient{base: base, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// do sends a request with body (nil for none; []byte as is, anything else
// as JSON) and returns the status and the answer's body; status 0 means
// the request got no answer.
func (a *apiClient) do(ctx context.Context, method, path string, body any) (int, []byte) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			panic(err) // a bug of the scenario
		}
		r = bytes.NewReader(data)
	}
	a.requests.Add(1)
	var conn connInfo
	req, err := http.NewRequestWithContext(conn.trace(ctx), method, a.base+path, r)
	if err != nil {
		panic(err) // a bug of the scenario
	}
	res, err := a.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			a.noAnswer(method, path, err, &conn)
		}
		return 0, []byte(err.Error())
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil && ctx.Err() == nil {
		a.noAnswer(method, path, fmt.Errorf("reading the answer (%d): %w", res.StatusCode, err), &conn)
	}
	if res.StatusCode >= 500 {
		a.status5xx.Add(1)
		a.last5xx.Store(fmt.Sprintf("%s %s: %d %s", method, path, res.StatusCode, data))
	}
	return res.StatusCode, data
}

// call is do for a request whose answer is JSON, decoded into out when
// the status is 2xx.
func (a *apiClient) call(ctx context.Context, method, path string, body, out any) (int, []byte) {
	status, data := a.do(ctx, method, path, body)
	if status/100 == 2 && out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return -1, fmt.Appendf(nil, "answer %q: %v", data, err)
		}
	}
	return status, data
}

func (a *apiClient) close() { a.http.CloseIdleConnections() }
