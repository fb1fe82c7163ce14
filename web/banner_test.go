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

// riskyStore is a memstore whose server, it says, may evict keys.
type riskyStore struct {
	*memstore.Store
	checked chan struct{}
}

func (s *riskyStore) ServerCheck(context.Context, *store.ServerCheckParams) ([]store.ServerProblem, error) {
	select {
	case s.checked <- struct{}{}:
	default:
	}
	return []store.ServerProblem{{Code: store.ProblemEviction, Message: "maxmemory-policy is allkeys-lru, so Redis may delete jobs"}}, nil
}

// A problem the client's check found with the store's server stands above
// every page, in the user's words.
func TestServerProblemBanner(t *testing.T) {
	t.Parallel()
	st := &riskyStore{Store: memstore.New(), checked: make(chan struct{}, 1)}
	t.Cleanup(func() { _ = st.Close() })
	// Checks every 50 ms: the wait below for the check after the first
	// (if the first had not yet recorded its problem) stays short.
	c, err := sortie.NewClient(st, &sortie.Config{Logger: slog.New(slog.DiscardHandler), RescueInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
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
	d := web.New(c, &web.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(d.Close)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	s := &site{url: srv.URL, hc: srv.Client()}
	for _, page := range []string{"/", "/jobs?state=dead"} {
		code, html := s.get(t, page)
		if code != 200 {
			t.Fatalf("GET %s = %d", page, code)
		}
		mustContain(t, page, html, `class="banner warn" role="alert"`, "The store&#39;s server puts jobs at risk: maxmemory-policy is allkeys-lru, so Redis may delete jobs.")
	}
}

// switchingStore is a memstore whose server, it says, may evict keys while
// risky is set.
type switchingStore struct {
	*memstore.Store
	risky atomic.Bool
}

func (s *switchingStore) ServerCheck(context.Context, *store.ServerCheckParams) ([]store.ServerProblem, error) {
	if !s.risky.Load() {
		return nil, nil
	}
	return []store.ServerProblem{{Code: store.ProblemEviction, Message: "maxmemory-policy is allkeys-lru, so Redis may delete jobs"}}, nil
}

// A problem with the store's server that starts, or ends, while a page is
// open shows, or goes, at the page's next live refresh: no reload needed.
func TestServerProblemBannerIsLive(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	st := &switchingStore{Store: memstore.New()}
	t.Cleanup(func() { _ = st.Close() })
	c, err := sortie.NewClient(st, &sortie.Config{Logger: slog.New(slog.DiscardHandler), RescueInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	d := web.New(c, &web.Options{Logger: slog.New(slog.DiscardHandler), Refresh: time.Second})
	t.Cleanup(d.Close)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)

	b.open(srv.URL + "/")
	b.must("#banners:empty")
	st.risky.Store(true)
	b.waitText("#banners .banner.warn", "maxmemory-policy is allkeys-lru")
	st.risky.Store(false)
	b.must("#banners:empty")
	b.checkConsole("/")
}
