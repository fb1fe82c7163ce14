package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, "version")
	if code != exitOK || !strings.HasPrefix(stdout, "sortie ") || !strings.Contains(stdout, "built with go1.") {
		t.Errorf("sortie version: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := run(t, "version", "extra"); code != exitUsage || !strings.Contains(stderr, "unexpected argument") {
		t.Errorf("sortie version extra: exit %d, stderr %q", code, stderr)
	}
}

// A binary built from a clone with changes says so, with its commit.
func TestPrintVersion(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printVersion(&b, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sortiehq/sortie", Version: "v0.0.0-20261124100000-abc123abc123+dirty"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123abc1234567"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-11-24T10:00:00Z"},
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
	}})
	want := "sortie devel+abc123abc123+dirty\ncommit abc123abc1234567 (with uncommitted changes)\ncommitted 2026-11-24T10:00:00Z\nbuilt with go1.26.8 linux/amd64\n"
	if b.String() != want {
		t.Errorf("printVersion =\n%s\nwant\n%s", b.String(), want)
	}
}
