package redisstore

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store"
)

// replyErr is an error reply of a Redis server.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// failConfig makes every CONFIG command fail with err.
type failConfig struct{ err error }

func (f failConfig) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f failConfig) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f failConfig) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "config" {
			cmd.SetErr(f.err)
			return f.err
		}
		return next(ctx, cmd)
	}
}

// The settings come from INFO only where the server refuses CONFIG: a
// CONFIG that failed otherwise (a connection lost, a server still loading
// after a restart) is an error, so a check keeps the last settings read
// instead of reporting INFO's, which leave the snapshot schedule unknown.
func TestSettingsFromInfoOnlyWhereConfigIsRefused(t *testing.T) {
	t.Parallel()
	opts, _, err := ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err      error
		fallback bool
	}{
		{replyErr("NOPERM User app has no permissions to run the 'config|get' command"), true},
		{replyErr("ERR unknown command 'CONFIG', with args beginning with: 'GET' '*'"), true},
		{replyErr("LOADING Redis is loading the dataset in memory"), false},
		{io.ErrUnexpectedEOF, false},
		{context.DeadlineExceeded, false},
	} {
		rdb := redis.NewClient(opts)
		rdb.AddHook(failConfig{c.err})
		set, err := readSettings(context.Background(), rdb)
		rdb.Close()
		switch {
		case c.fallback && (err != nil || !set.saveUnknown || set.policy == ""):
			t.Errorf("CONFIG failing with %q: readSettings = %+v, %v; want the settings INFO gives", c.err, set, err)
		case !c.fallback && !errors.Is(err, c.err):
			t.Errorf("CONFIG failing with %q: readSettings = %+v, %v; want that error", c.err, set, err)
		}
	}
}

// On a cluster the memory problem is the primary's that uses the largest
// share of its maxmemory among those reported, and names it; a server
// without a limit is never reported.
func TestMemoryProblemNamesTheFullestPrimary(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	all := []serverSettings{
		{addr: "10.0.0.1:7000", used: 91 * mib, maxMemory: 100 * mib, policy: "noeviction", appendOnly: true},
		{addr: "10.0.0.2:7000", used: 101 * mib, maxMemory: 100 * mib, policy: "noeviction", appendOnly: true},
		{addr: "10.0.0.3:7000", used: 900 * mib, policy: "noeviction", appendOnly: true},
	}
	high := map[string]bool{"10.0.0.1:7000": true, "10.0.0.2:7000": true}
	got := problems(all, high, true)
	if len(got) != 1 || got[0].Code != store.ProblemMemory ||
		!strings.HasPrefix(got[0].Message, "the Redis server at 10.0.0.2:7000 is full: it uses 101.0 MiB of its maxmemory 100.0 MiB") {
		t.Errorf("problems = %+v, want one memory problem naming the full primary 10.0.0.2:7000", got)
	}
	if got := problems(all[2:], map[string]bool{}, false); len(got) != 0 {
		t.Errorf("problems of a server without maxmemory = %+v, want none", got)
	}
}
