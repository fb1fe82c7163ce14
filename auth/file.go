package auth

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// ReadFile reads a token file (see the package doc). It refuses a file
// that other users may read or write: it holds secrets.
func ReadFile(path string) ([]Token, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("token file %s: mode %v lets other users read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	return Parse(path, string(b))
}

// Watcher reloads a token file into a Keyring when the file changes (its
// size or modification time, looked at every 2 s) or when Reload is called
// (serve calls it on SIGHUP). A file that no longer parses is logged and
// the tokens in use are kept.
type Watcher struct {
	path   string
	keys   *Keyring
	base   []Token
	every  time.Duration
	logger *slog.Logger
	reload chan struct{}
	seen   stamp
}

// NewWatcher returns the watcher of the token file at path, which sets
// keys to base (tokens from elsewhere, the environment) and the file's.
// Call Load once, then Run.
func NewWatcher(path string, keys *Keyring, base []Token, logger *slog.Logger) *Watcher {
	return &Watcher{path: path, keys: keys, base: base, every: 2 * time.Second, logger: logger, reload: make(chan struct{}, 1)}
}

// stamp is what tells a changed file apart.
type stamp struct {
	size int64
	mod  time.Time
}

// Load reads the file and sets the keyring to Base and its tokens; Run
// calls it when the file changes.
func (w *Watcher) Load() error {
	fi, err := os.Stat(w.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	tokens, err := ReadFile(w.path)
	if err != nil {
		return err
	}
	all := append(append([]Token(nil), w.base...), tokens...)
	if err := unique(all); err != nil {
		return err
	}
	w.keys.Set(all)
	w.seen = stamp{fi.Size(), fi.ModTime()}
	return nil
}

// unique refuses two tokens of one name or secret across sources.
func unique(all []Token) error {
	names, secrets := map[string]bool{}, map[string]bool{}
	for _, t := range all {
		if names[t.Name] || secrets[t.Secret] {
			return fmt.Errorf("token %q is defined twice (the file and the environment hold the same name or secret)", t.Name)
		}
		names[t.Name], secrets[t.Secret] = true, true
	}
	return nil
}

// Reload asks Run to read the file now. It does not wait.
func (w *Watcher) Reload() {
	select {
	case w.reload <- struct{}{}:
	default:
	}
}

// Run reloads the file when it changes or Reload is called, until ctx
// ends.
func (w *Watcher) Run(ctx context.Context) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-w.reload:
			forced = true
		}
		fi, err := os.Stat(w.path)
		if err == nil && !forced && (stamp{fi.Size(), fi.ModTime()}) == w.seen {
			continue
		}
		if err := w.Load(); err != nil {
			w.logger.Error("tokens not reloaded; the ones in use stay", slog.String("error", err.Error()))
			continue
		}
		w.logger.Info("tokens reloaded", slog.String("file", w.path), slog.Int("tokens", w.keys.Len()))
	}
}
