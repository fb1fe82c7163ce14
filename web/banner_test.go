package web_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
	"github.com/sortiehq/sortie/web"
)

// riskyStore is a memstore whose server, it says while risky is set, may
// evict keys. Each check is signalled on checked.
type riskyStore struct {
	*memstore.Store
	risky   atomic.Bool
	checked chan struct{}
}

// newRiskyStore returns a riskyStore, risky or not, closed when t ends.
func newRiskyStore(t *testing.T, risky bool) *riskyStore {
	st := &riskyStore{Store: memstore.New(), checked: make(chan struct{}, 1)}
	st.risky.Store(risky)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func (s *riskyStore) ServerCheck(context.Context, *store.ServerCheckParams) ([]store.ServerProblem, error) {
	select {
	case s.checked <- struct{}{}:
	default:
	}
	if !s.risky.Load() {
		return nil, nil
	}
	return []store.ServerProblem{{Code: store.ProblemEviction, Message: "maxmemory-policy is allkeys-lru, so Redis may delete jobs"}}, nil
}

// checkingDashboard starts a client of st that checks its server every
// 50 ms, and serves a dashboard of it with opts; both stop when t ends.
func checkingDashboard(t *testing.T, st store.Store, opts *web.Options) (*sortie.Client, *httptest.Server) {
	t.Helper()
	c, err := sortie.NewClient(st, &sortie.Config{Logger: slog.New(slog.DiscardHandler), RescueInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	opts.Logger = slog.New(slog.DiscardHandler)
	d := web.New(c, opts)
	t.Cleanup(d.Close)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return c, srv
}

// A problem the client's check found with the store's server stands above
// every page, in the user's words.
func TestServerProblemBanner(t *testing.T) {
	t.Parallel()
	st := newRiskyStore(t, true)
	// Checks every 50 ms: the wait below for the check after the first
	// (if the first had not yet recorded its problem) stays short.
	c, srv := checkingDashboard(t, st, &web.Options{})
	select {
	case <-st.checked:
	case <-time.After(10 * time.Second):
		t.Fatal("the client never checked the store's server")
	}
	for len(c.ServerProblems()) == 0 {
		select {
		case <-st.checked: // a check after the one that recorded the problem
		case <-time.After(10 * time.Second):
			t.Fatal("ServerProblems() stayed empty")
		}
	}
	s := &site{url: srv.URL, hc: srv.Client()}
	for _, page := range []string{"/", "/jobs?state=dead"} {
		code, html := s.get(t, page)
		if code != 200 {
			t.Fatalf("GET %s = %d", page, code)
		}
		mustContain(t, page, html, `class="banner warn" role="alert"`, "The store&#39;s server puts jobs at risk: maxmemory-policy is allkeys-lru, so Redis may delete jobs.")
	}
}

// A problem with the store's server that starts, or ends, while a page is
// open shows, or goes, at the page's next live refresh: no reload needed.
func TestServerProblemBannerIsLive(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	st := newRiskyStore(t, false)
	_, srv := checkingDashboard(t, st, &web.Options{Refresh: time.Second})

	b.open(srv.URL + "/")
	b.must("#banners:empty")
	st.risky.Store(true)
	b.waitText("#banners .banner.warn", "maxmemory-policy is allkeys-lru")
	st.risky.Store(false)
	b.must("#banners:empty")
	b.checkConsole("/")
}
