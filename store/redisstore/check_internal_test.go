package redisstore

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit/redistest"
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
