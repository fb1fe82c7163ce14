// Package testkit holds what sortie's tests share: the runner of the
// scripts that start throwaway servers (scripts/testpg.sh,
// scripts/testredis.sh) and WaitFor, the one way a test waits on a
// condition it can only poll. Its sub-packages are the rigs: pgtest and
// redistest (test servers), storefault (a store that fails on cue),
// delayproxy (a TCP link with a delay), netns (test hosts in network
// namespaces), childproc (the test binary run again as child processes)
// and multiproc (sortie across operating-system processes).
// Nothing outside tests imports it.
package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A Script is one of the scripts under scripts/ that start, stop and fault
// a test's own server.
type Script struct {
	// Name is the script's file name under scripts/: "testpg.sh".
	Name string
	// Shared names the environment variables of the shared servers: the
	// script runs without them, since those servers are not a test's to
	// stop or reuse.
	Shared []string
}

// Start runs the script's start command with args (after "start") and env
// added to its environment, and returns the variables it printed as export
// lines. It fails t if the script fails or prints anything else.
func (s *Script) Start(t testing.TB, timeout time.Duration, env []string, args ...string) map[string]string {
	t.Helper()
	out, err := s.Run(t, timeout, env, append([]string{"start"}, args...)...)
	if err != nil {
		t.Fatalf("%s start: %v", s.Name, err)
	}
	vars := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || !strings.HasPrefix(line, "export ") {
			t.Fatalf("%s start printed %q, want only export lines", s.Name, line)
		}
		v, err := unquoteShell(value)
		if err != nil {
			t.Fatalf("%s start: %s: %v", s.Name, line, err)
		}
		vars[name] = v
	}
	return vars
}

// Run runs the script with args and env added to its environment, and
// returns its stdout; its stderr goes into the error, and into t's log.
func (s *Script) Run(t testing.TB, timeout time.Duration, env []string, args ...string) (string, error) {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "scripts", s.Name)}, args...)...)
	// Killed at the timeout, the script may leave a child (redis-cli, say)
	// holding its output open: stop waiting for it soon after.
	cmd.WaitDelay = 10 * time.Second
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(s.Shared, name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		t.Logf("%s %s:\n%s", s.Name, strings.Join(args, " "), msg)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// ModuleRoot returns the directory of sortie's go.mod, found from the
// working directory (a package's directory under go test) upwards.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testkit: no go.mod above the working directory")
		}
		dir = parent
	}
}

// AppendFiles appends the files at paths to b, in order; a missing file
// adds nothing, another error adds itself in parentheses. It reads a
// server's logs for a failed test's output.
func AppendFiles(b *strings.Builder, paths ...string) {
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(b, "(%v)\n", err)
		}
		b.Write(data)
	}
}

// unquoteShell undoes bash's printf %q for the values the scripts print,
// which they quote with backslashes only (the commas between a cluster's
// addresses, say).
func unquoteShell(s string) (string, error) {
	if strings.HasPrefix(s, "'") || strings.HasPrefix(s, "$'") || strings.HasPrefix(s, `"`) {
		return "", fmt.Errorf("quoted value %s: want backslash escapes only", s)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String(), nil
}
